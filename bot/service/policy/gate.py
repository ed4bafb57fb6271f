"""The rule the policy in force gives a stored call, read from what its tool will receive (its
subject). Every judgement of a call (`bot.service.judgement`), the lists of what waits for
whom, the timers and the sweeper ask it the same way."""

from __future__ import annotations

import dataclasses
from typing import Any

from bot.engine.questions import QUESTION_KIND
from bot.service.oversight.advised import advice_subject
from bot.service.policy.answerers import question_rule
from bot.service.policy.conditions import (
    REQUESTED_AT,
    decode_subject,
    encode_subject,
    stored_subject,
)
from bot.service.policy.rules import CallRule, Policy
from bot.store.records import CallRecord, RunRecord


def rule_for(
    policy: Policy, run: RunRecord, call: CallRecord, subject: dict[str, Any] | None = None
) -> CallRule | None:
    """The policy's rule for `call`, its approvers widened once (and only once) the call's
    escalation has fired (its time, set at posting, recorded by fire_timers.lua), by whom the
    policy in force escalates it to: never by a stored list the policy no longer names.
    `subject`: what the call's tool would receive instead (an edit's), judged at the same
    instant."""
    if subject is None:
        subject = subject_of_call(call)
    elif call.paused_at:
        subject = {**subject, REQUESTED_AT: call.paused_at}
    rule = policy.rule_for(
        channel=run.channel_id, agent=call.agent, tool=call.tool, subject=subject
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
    as it was the same) what its stored arguments give; when it was requested (`during:`
    rules: the same instant however often the call is judged); and the advisor's opinion as it
    stands (`advice.risk`: undecidable until it is given)."""
    kept = call.subject
    subject = decode_subject(kept) if kept else stored_subject(call.kind, call.arguments)
    if call.paused_at:
        subject[REQUESTED_AT] = call.paused_at
    return advice_subject(call, subject)


def keep_subject(call: CallRecord, subject: dict[str, Any]) -> None:
    """Keep `subject` beside a new call unless its stored arguments give it again."""
    encoded = encode_subject(subject)
    again = encode_subject(stored_subject(call.kind, call.arguments))
    call.subject = "" if again == encoded else encoded
