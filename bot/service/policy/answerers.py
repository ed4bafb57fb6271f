"""Who may answer an agent's question (`ask_human`): the rule a question is judged under.

A question is a pending call like any other (the same expiry, reminders, escalation and
durability), judged under the rule the policy gives the `ask_human` call, with these
differences: the people are the rule's `answerers` (a tool rule's, else its channel's), or by
default the run's starter and the rule's approvers; `starter` among them is the run's starter
and, in a later turn of its conversation, who asked for that turn (the question is theirs too);
one answer settles it (no quorum, no Always, no automatic decision: only a person answers)."""

from __future__ import annotations

import dataclasses

from bot.service.policy.rules import CallRule

STARTER = "starter"


def question_rule(rule: CallRule, starter: str, requester: str = "") -> CallRule:
    """`rule` (the policy's rule for an `ask_human` call) as it applies to answering it, for a
    run started by `starter`, asked in a turn `requester` asked for: its approvers are who may
    answer (escalation still adds its own)."""
    named = rule.answerers if rule.answerers is not None else (STARTER, *rule.approvers)
    asked = (starter, requester or starter)
    people = tuple(dict.fromkeys(q for p in named for q in (asked if p == STARTER else (p,))))
    return dataclasses.replace(
        rule, approvers=people, required=1, allow_self=True, allow_always=False, auto=None
    )
