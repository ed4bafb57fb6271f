"""The gate a click passes: the rule the policy in force gives a call, and whether this person
may decide it under that rule. Decisions, Always decisions made earlier in a run, the lists of
what waits for whom and the sweeper's timers all ask the same question the same way."""

from __future__ import annotations

import dataclasses
from typing import Any

from bot.engine.questions import QUESTION_KIND
from bot.service.answerers import question_rule
from bot.service.authorize import Authorizer
from bot.service.conditions import REQUESTED_AT, decode_subject, encode_subject, stored_subject
from bot.service.policy import CallRule, Policy, Verdict
from bot.service.policy_source import PolicySource
from bot.service.ports import Actor
from bot.store.records import CallRecord, RunRecord
from bot.store.runs import RunStore


class Gate:
    """Judges a call against the policy in force, for one person."""

    def __init__(self, store: RunStore, policies: PolicySource, authorizer: Authorizer) -> None:
        self.store = store
        self.policies = policies
        self.authorizer = authorizer

    async def authorize(
        self, actor: Actor, call: CallRecord, run: RunRecord | None = None
    ) -> tuple[RunRecord | None, Verdict]:
        """The call's run and whether `actor` may decide the call. `run`: the call's run when
        the caller already read it (else it is read here)."""
        if run is None:
            run = await self.store.get_run(call.run_id)
        if run is None:
            return None, Verdict(False, "This run no longer exists.")
        _, verdict = await self.judge(actor, run, call)
        return run, verdict

    async def judge(
        self, actor: Actor, run: RunRecord, call: CallRecord
    ) -> tuple[CallRule | None, Verdict]:
        """The rule the policy in force gives `call`, and whether `actor` may decide it."""
        policy = self.policies.current().policy.for_team(run.team_id)
        rule = rule_for(policy, run, call)
        return rule, await self.under(policy, rule, actor, run, call)

    async def under(
        self, policy: Policy, rule: CallRule | None, actor: Actor, run: RunRecord, call: CallRecord
    ) -> Verdict:
        """Whether `actor` may decide `call` under `rule` (the rule `policy` gives it, worked
        out once for the many people a list or a batch of App Homes judges). Self-approval is
        judged against who asked for the call: its turn's requester (the starter's first turn,
        a follow-up's author's later ones)."""
        return await self.authorizer.may_decide(
            policy,
            actor,
            run_team=run.team_id,
            requester=call.asked_by(run),
            channel=run.channel_id,
            tool=call.tool,
            rule=rule,
        )


def rule_for(policy: Policy, run: RunRecord, call: CallRecord) -> CallRule | None:
    """The policy's rule for `call`, its approvers widened once (and only once) the call's
    escalation has fired (its time, set at posting, recorded by fire_timers.lua), by whom the
    policy in force escalates it to: never by a stored list the policy no longer names."""
    rule = policy.rule_for(
        channel=run.channel_id, agent=call.agent, tool=call.tool, subject=subject_of_call(call)
    )
    if rule is not None and call.kind == QUESTION_KIND:
        rule = question_rule(rule, run.user_id, call.asked_by(run))
    if rule is None or not call.escalated_at:
        return rule
    extra = [p for p in rule.escalate_to if p not in rule.approvers]
    if extra:
        rule = dataclasses.replace(rule, approvers=(*rule.approvers, *extra))
    return rule


def subject_of_call(call: CallRecord) -> dict[str, Any]:
    """What the policy's rules read of a stored call: its kept subject, or (when none was kept,
    as it was the same) what its stored arguments give; and when it was requested (`during:`
    rules: the same instant however often the call is judged)."""
    kept = call.subject
    subject = decode_subject(kept) if kept else stored_subject(call.kind, call.arguments)
    if call.paused_at:
        subject[REQUESTED_AT] = call.paused_at
    return subject


def keep_subject(call: CallRecord, subject: dict[str, Any]) -> None:
    """Keep `subject` beside a new call unless its stored arguments give it again."""
    encoded = encode_subject(subject)
    again = encode_subject(stored_subject(call.kind, call.arguments))
    call.subject = "" if again == encoded else encoded
