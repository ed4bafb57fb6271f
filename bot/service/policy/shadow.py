"""Shadow rules (`mode: shadow`): what a rule would have done with a call, recorded, never done.

A shadow rule decides nothing: `Policy.rule_for` skips it. When a run pauses on a call, each
shadow rule that would have decided the call had it been enforced, in its place in the rule
order (`Policy.rule_for(..., enforcing=index)`: the very judgement every enforced rule gets,
on the same subject and request time), gets an audit entry (`AuditKind.SHADOW`: what it would
have done, and why) and moves `approval_bot_shadow_decisions`. The call itself goes on under
the enforced rules. `approval-bot report shadow` (bot/learning/) sets the entries beside what
people then decided.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from bot.engine.questions import QUESTION_KIND
from bot.service.policy.gate import subject_of_call
from bot.service.policy.rules import CallRule, Policy
from bot.store.records import CallRecord, RunRecord

AUTO_APPROVE, AUTO_REJECT, ASK = "auto_approve", "auto_reject", "ask"


@dataclass(frozen=True)
class ShadowVerdict:
    """What one shadow rule would have done with one call, and why (the entry's detail)."""

    rule: CallRule  # as `rule_for` gives it with the shadow rule enforced
    would: str  # AUTO_APPROVE | AUTO_REJECT | ASK (its approvers)
    why: str

    def audited_call(self, call: CallRecord) -> CallRecord:
        """`call` as the shadow entry names it: the shadow rule's label, approvers, quorum and
        typed confirmation instead of the enforced rule's (the entry keeps the call's ids)."""
        rule = self.rule
        return dataclasses.replace(
            call,
            rule=rule.source,
            approvers=json.dumps(list(rule.approvers)),
            required=rule.required,
            confirm=(rule.confirm_value or "tool") if rule.confirm else "",
        )


def would_do(rule: CallRule) -> str:
    """What a rule does with a call it governs: decide it (`auto_approve`, `auto_reject`), or
    ask its approvers (`ask`)."""
    if rule.auto == "approve":
        return AUTO_APPROVE
    if rule.auto == "reject":
        return AUTO_REJECT
    return ASK


def shadow_verdicts(policy: Policy, run: RunRecord, call: CallRecord) -> list[ShadowVerdict]:
    """Each shadow rule of `policy` that would have decided `call` (a question is answered by
    people whatever the rules say: none)."""
    if call.kind == QUESTION_KIND or not any(r.mode == "shadow" for r in policy.tools):
        return []
    subject = subject_of_call(call)
    found = []
    for index, shadow in enumerate(policy.tools):
        if shadow.mode != "shadow":
            continue
        rule = policy.rule_for(
            channel=run.channel_id, agent=call.agent, tool=call.tool, subject=subject,
            enforcing=index,
        )  # fmt: skip
        if rule is None or rule.source != shadow.label(index):
            continue  # an enforced rule before it decides the call, or it does not apply
        would = would_do(rule)
        found.append(ShadowVerdict(rule, would, _why(rule, would, call)))
    return found


def _why(rule: CallRule, would: str, call: CallRecord) -> str:
    if would == ASK:
        done = f"would have asked {', '.join(rule.approvers)}"
        if rule.required > 1:
            done += f" ({rule.required} approvals)"
        if rule.confirm:
            done += f", typing {rule.confirm_value or 'the tool name'}"
    else:
        done = "would have " + ("approved" if would == AUTO_APPROVE else "rejected") + " it"
        done += " automatically" + (f" ({rule.reason})" if rule.reason else "")
    if rule.undecidable:  # it may or may not apply: enforced, a person would decide
        done += f" (its conditions could not be decided: {rule.undecidable})"
    return f"shadow rule {rule.source} {done}; the rule in force: {call.rule or '?'}"
