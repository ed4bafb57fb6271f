"""The shadow rules' record: what each would have done, beside what became of the call.

A shadow entry (`bot/service/policy/shadow.py`) is written when the call is posted; what became of
the call is its settling entry (`bot.learning.history.History.outcomes`). A rule that would have
approved automatically agreed with people when they approved, and disagreed when they rejected
it or edited it first: each of those is listed, every one. A rule that would have rejected
agreed when people rejected it, and disagreed when they approved it. A rule that would have
asked other approvers agreed when the person who decided is one it names ("*" names everyone in
the channel; a user group cannot be resolved without Slack: unknown). Calls nobody decided
(expired), that the policy decided, or that were not settled within the window are counted
apart.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from bot.learning.history import DecidedCall, History, ShadowEntry
from bot.learning.text import call_line, count, printable, when
from bot.service.policy.shadow import ASK, AUTO_APPROVE, AUTO_REJECT

WOULD = {
    AUTO_APPROVE: "approve automatically",
    AUTO_REJECT: "reject automatically",
    ASK: "ask its approvers",
}


@dataclass
class ShadowRuleReport:
    """One shadow rule's record in the window."""

    rule: str
    would: Counter[str] = field(default_factory=Counter)  # what it would have done, how often
    agreed: int = 0
    disagreed: int = 0
    unknown: int = 0  # decided by someone it names only through a user group
    expired: int = 0  # nobody decided it in time
    by_policy: int = 0  # settled by an enforced automatic rule
    unsettled: int = 0  # not settled in the window (pending, cancelled, or later)
    approved_rejected: list[tuple[ShadowEntry, DecidedCall]] = field(default_factory=list)
    rejected_approved: list[tuple[ShadowEntry, DecidedCall]] = field(default_factory=list)

    @property
    def calls(self) -> int:
        return sum(self.would.values())

    @property
    def by_people(self) -> int:
        return self.agreed + self.disagreed + self.unknown

    def as_json(self) -> dict[str, Any]:
        def listed(pairs: list[tuple[ShadowEntry, DecidedCall]]) -> list[dict[str, Any]]:
            return [
                {
                    "approval_id": c.approval_id,
                    "at": c.at,
                    "channel": c.channel,
                    "agent": c.agent,
                    "tool": c.tool,
                    "outcome": c.outcome,
                    "decider": c.decider,
                    "subject": c.subject,
                    "why": s.detail,
                }
                for s, c in pairs
            ]

        return {
            "rule": self.rule,
            "would": dict(self.would),
            "agreed": self.agreed,
            "disagreed": self.disagreed,
            "unknown": self.unknown,
            "expired": self.expired,
            "by_policy": self.by_policy,
            "unsettled": self.unsettled,
            "approved_rejected": listed(self.approved_rejected),
            "rejected_approved": listed(self.rejected_approved),
        }


def _names(shadow: ShadowEntry, decider: str) -> bool | None:
    """Whether the shadow rule's approvers name `decider` (None: only a group could)."""
    if decider in shadow.approvers or "*" in shadow.approvers:
        return True
    if any(p[:1] in ("S", "@") for p in shadow.approvers):
        return None
    return False


def shadow_report(history: History) -> list[ShadowRuleReport]:
    """Each shadow rule that would have decided a call in the window, in the order first seen."""
    outcomes = history.outcomes()
    rules: dict[str, ShadowRuleReport] = {}
    for shadow in history.shadows:
        report = rules.setdefault(shadow.rule, ShadowRuleReport(shadow.rule))
        report.would[shadow.would] += 1
        call = outcomes.get(shadow.approval_id)
        if call is None:
            report.unsettled += 1
            continue
        if call.by_policy:
            report.by_policy += 1
            continue
        if call.outcome == "expired":
            report.expired += 1
            continue
        approved = call.outcome == "approved"
        if shadow.would == AUTO_APPROVE:
            if approved:
                report.agreed += 1
            else:
                report.disagreed += 1
                report.approved_rejected.append((shadow, call))
        elif shadow.would == AUTO_REJECT:
            if approved:
                report.disagreed += 1
                report.rejected_approved.append((shadow, call))
            else:
                report.agreed += 1
        else:
            named = _names(shadow, call.decider)
            if named is None:
                report.unknown += 1
            elif named:
                report.agreed += 1
            else:
                report.disagreed += 1
    return list(rules.values())


def render(history: History, *, limit: int = 20) -> list[str]:
    """The report as lines: per rule, agreement, then every call it would have approved that
    people rejected (or edited first), and (up to `limit`, 0: all) the approved calls it would
    have rejected."""
    reports = shadow_report(history)
    lines = [f"Shadow rules, {when(history.since)} to {when(history.until)} UTC"]
    if not reports:
        lines.append("  No shadow rule would have decided a call in this window.")
        return lines
    for report in reports:
        would = ", ".join(f"{WOULD.get(w, w)}: {n:,}" for w, n in report.would.most_common())
        lines.append("")
        lines.append(f"  {printable(report.rule, 120)}: {count(report.calls, 'call')} ({would})")
        if report.by_people:
            share = 100.0 * report.agreed / report.by_people
            lines.append(
                f"    agreed with people on {report.agreed:,} of {report.by_people:,} "
                f"({share:.1f}%); disagreed on {report.disagreed:,}"
                + (f"; unknown {report.unknown:,} (a user group)" if report.unknown else "")
            )
        else:
            lines.append("    no person has decided a call it would have decided yet")
        lines.append(
            f"    decided by an enforced automatic rule: {report.by_policy:,}; expired "
            f"undecided: {report.expired:,}; not settled in the window: {report.unsettled:,}"
        )
        lines.append(
            f"    would have approved what people rejected (or edited first): "
            f"{len(report.approved_rejected):,}"
        )
        for _, call in report.approved_rejected:
            lines.append(f"      {call_line(call)}")
        if report.rejected_approved:
            shown = report.rejected_approved if limit <= 0 else report.rejected_approved[:limit]
            lines.append(
                f"    would have rejected what people approved: {len(report.rejected_approved):,}"
            )
            for _, call in shown:
                lines.append(f"      {call_line(call)}")
            if len(shown) < len(report.rejected_approved):
                more = len(report.rejected_approved) - len(shown)
                lines.append(f"      … and {more:,} more (--limit 0 shows all)")
    return lines
