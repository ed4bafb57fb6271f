"""Where a person could decide anything: the channels a list or an App Home reads for them.

Who may decide a call is worked out by the policy in force at the moment it is asked (the
call's rule, its escalation once fired, user groups, a channel's members for `"*"`), so no index
can say it ahead of time. What can be said cheaply is where someone certainly may decide nothing:
a channel none of whose rules could name them. `decider_principals` is everyone any rule of the
policy may let decide some call in a channel, a superset of every call's approvers there; a
person among none of them (`Authorizer.is_among`, the same check as a click's) is not read for
that channel. This narrows what is read and grants nothing: each call read is still judged by
the policy in force, as a click is, before it is shown or offered.
"""

from __future__ import annotations

from bot.service.policy.answerers import STARTER
from bot.service.policy.rules import Policy


def decider_principals(policy: Policy, channel: str) -> tuple[str, ...]:
    """Everyone who may decide some call in `channel` under `policy` (empty: nobody, the
    channel is not in it): the channel's approvers, every tool rule's that applies there
    (unscoped, or scoped to this channel), and whom any of those levels, or the defaults,
    escalates to (`gate.rule_for` widens a call's approvers by them once its escalation
    fired), and who may answer the agent's questions there. A superset of what
    `Policy.rule_for` gives any call there, escalation and questions included."""
    base = policy.channels.get(channel)
    if base is None:
        return ()
    found = [*base.approvers, *(base.escalate_to or ()), *(policy.defaults.escalate_to or ())]
    # Questions (ask_human): their answerers (a run's starter, who may answer by default or
    # as `starter`, is read their own runs instead: `People._gather`).
    found += [*(base.answerers or ())]
    for rule in policy.tools:
        if rule.channel in (None, channel):
            found += [*(rule.approvers or ()), *(rule.escalate_to or ()), *(rule.answerers or ())]
    return tuple(p for p in dict.fromkeys(found) if p != STARTER)
