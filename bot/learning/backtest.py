"""A backtest: the calls the audit trail says were settled, judged again by a candidate policy.

Each call is replayed from what its entry kept (`bot.learning.history`): its subject as the bot
judged it and when it was requested go to `Policy.rule_for`, the one judgement the bot itself
uses; no tool runs, nothing is decided. What would change is sorted, most dangerous first:

1. calls the candidate would approve automatically that were rejected (by a person or a rule)
   or that a person edited before approving (the arguments as proposed were not approved);
   calls that expired undecided are listed after them, apart: nobody decided those;
2. calls that would go to other approvers (another list or quorum, or people instead of an
   automatic decision);
3. approved calls that would now need their value typed;
4. approved calls the candidate would reject (automatically, or its channel is not in it).

The first set fails the command (`approval-bot policy backtest` exits 1), so CI can stop a
policy change that would let through what people turned down.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from bot.learning.history import DecidedCall, History
from bot.learning.text import call_line, count, printable, when
from bot.service.policy.conditions import REQUESTED_AT
from bot.service.policy.rules import CallRule, Policy
from bot.service.policy.shadow import ASK, AUTO_APPROVE, AUTO_REJECT, would_do

SETS = (
    ("approves_rejected", "Would approve automatically what was rejected (or edited first)"),
    ("other_approvers", "Would go to other approvers"),
    ("typed_confirmation", "Would need the value typed to approve"),
    ("rejects_approved", "Would reject what was approved"),
)


def section_for(policy: Policy, team: str, channel: str) -> Policy:
    """The policy that governs a call of `team` in `channel`: its workspace's section (an
    automatic decision's entry names no team: the section that lists its channel)."""
    if not policy.workspaces:
        return policy
    if not team:
        team = next((t for t, s in policy.workspaces.items() if channel in s.channels), "")
    return policy.for_team(team)


def judged(policy: Policy, call: DecidedCall) -> CallRule | None:
    """The rule `policy` gives `call` (None: its channel is not in it), read from the subject
    and request time the trail kept, by `Policy.rule_for` itself."""
    subject = dict(call.subject or {})
    if call.requested:
        subject[REQUESTED_AT] = call.requested
    section = section_for(policy, call.team, call.channel)
    return section.rule_for(channel=call.channel, agent=call.agent, tool=call.tool, subject=subject)


@dataclass(frozen=True)
class Change:
    """One call the candidate would settle otherwise, and how."""

    call: DecidedCall
    rule: str  # the candidate's rule for it ("": its channel is not in the candidate)
    said: str  # what would change, in a few words


@dataclass
class Backtest:
    """What a candidate policy would have done with the settled calls of a window."""

    approves_rejected: list[Change] = field(default_factory=list)
    other_approvers: list[Change] = field(default_factory=list)
    typed_confirmation: list[Change] = field(default_factory=list)
    rejects_approved: list[Change] = field(default_factory=list)
    approves_expired: list[Change] = field(default_factory=list)  # nobody decided them
    approves_approved: int = 0  # people approved; the candidate would, without a click
    rejects_unapproved: int = 0  # people did not approve; the candidate would reject at once
    unchanged: int = 0
    replayed: int = 0
    not_replayable: int = 0  # settled before subjects were audited

    @property
    def fails(self) -> bool:
        return bool(self.approves_rejected)

    def sets(self) -> list[tuple[str, str, list[Change]]]:
        return [(key, title, getattr(self, key)) for key, title in SETS]

    def as_json(self) -> dict[str, Any]:
        """The result as plain JSON values (`--json`)."""
        return {
            "fails": self.fails,
            "replayed": self.replayed,
            "not_replayable": self.not_replayable,
            "unchanged": self.unchanged,
            "approves_approved": self.approves_approved,
            "rejects_unapproved": self.rejects_unapproved,
            **{
                key: [
                    {
                        "approval_id": c.call.approval_id,
                        "at": c.call.at,
                        "team": c.call.team,
                        "channel": c.call.channel,
                        "agent": c.call.agent,
                        "tool": c.call.tool,
                        "outcome": c.call.outcome,
                        "decision": c.call.decision,
                        "decider": c.call.decider,
                        "rule_then": c.call.rule,
                        "rule_now": c.rule,
                        "change": c.said,
                        "subject": c.call.subject,
                    }
                    for c in changes
                ]
                for key, changes in [
                    *((k, c) for k, _, c in self.sets()),
                    ("approves_expired", self.approves_expired),
                ]
            },
        }


def _who(rule: CallRule) -> tuple[frozenset[str], int]:
    return frozenset(rule.approvers), rule.required


def _asks(approvers: Iterable[str], required: int) -> str:
    named = ", ".join(printable(p, 30) for p in approvers) or "?"
    return named + (f" ({required} approvals)" if required > 1 else "")


def backtest(policy: Policy, calls: Iterable[DecidedCall]) -> Backtest:
    """Replay `calls` against `policy`: what would change, sorted into the sets above."""
    result = Backtest()
    for call in calls:
        if call.subject is None:
            result.not_replayable += 1
            continue
        result.replayed += 1
        rule = judged(policy, call)
        would = AUTO_REJECT if rule is None else would_do(rule)
        source = "" if rule is None else rule.source
        approved = call.outcome == "approved"
        if would == AUTO_APPROVE:
            said = f"approve automatically ({source}); was {call.outcome}"
            if call.outcome == "expired":
                result.approves_expired.append(Change(call, source, said))
            elif not approved:
                result.approves_rejected.append(Change(call, source, said))
            elif call.decision == "auto_approve":
                result.unchanged += 1
            else:
                result.approves_approved += 1
            continue
        if would == AUTO_REJECT:
            if approved:
                said = f"reject automatically ({source or 'channel not in the policy'})"
                result.rejects_approved.append(Change(call, source, said))
            elif call.decision == "auto_reject":
                result.unchanged += 1
            else:
                result.rejects_unapproved += 1
            continue
        assert rule is not None and would == ASK
        changed = False
        undecidable = f" (undecidable: {rule.undecidable})" if rule.undecidable else ""
        if call.by_policy:
            said = f"ask {_asks(rule.approvers, rule.required)} instead of deciding automatically"
            said += undecidable
            result.other_approvers.append(Change(call, source, said))
            changed = True
        elif _who(rule) != (frozenset(call.approvers), call.required):
            said = (
                f"ask {_asks(rule.approvers, rule.required)} instead of "
                f"{_asks(call.approvers, call.required)}{undecidable}"
            )
            result.other_approvers.append(Change(call, source, said))
            changed = True
        if rule.confirm and not call.confirm and approved:
            said = f"type {rule.confirm_value or 'the tool name'} to approve ({source})"
            result.typed_confirmation.append(Change(call, source, said))
            changed = True
        if not changed:
            result.unchanged += 1
    for changes in [*(c for _, _, c in result.sets()), result.approves_expired]:
        changes.sort(key=lambda c: c.call.at, reverse=True)
    return result


def _listed(changes: list[Change], limit: int) -> list[str]:
    """Each change (up to `limit`; 0: all) as two lines."""
    shown = changes if limit <= 0 else changes[:limit]
    lines = []
    for change in shown:
        lines.append(f"   {call_line(change.call)}")
        lines.append(f"      would {printable(change.said, 300)}")
    if len(shown) < len(changes):
        lines.append(f"   … and {len(changes) - len(shown):,} more (--limit 0 shows all)")
    return lines


def render(result: Backtest, history: History, candidate: str, *, limit: int) -> list[str]:
    """The backtest as lines for a terminal: the sets, most dangerous first (the first one
    whole; the others up to `limit` calls each, 0: all), then what stays the same."""
    lines = [
        f"Backtest of {printable(candidate, 200)} against the settled calls of "
        f"{when(history.since)} to {when(history.until)} UTC: {count(result.replayed, 'call')} "
        "replayed"
        + (
            f", {count(result.not_replayable, 'call')} not replayable (settled before "
            "subjects were audited)"
            if result.not_replayable
            else ""
        )
        + ".",
        "",
    ]
    for number, (key, title, changes) in enumerate(result.sets(), start=1):
        first = key == "approves_rejected"
        mark = "  <- fails the backtest" if first and changes else ""
        lines.append(f"{number}. {title}: {len(changes):,}{mark}")
        if changes:
            rules = Counter(c.rule or "channel not in the policy" for c in changes)
            ranked = ", ".join(f"{printable(r, 80)} ({n:,})" for r, n in rules.most_common())
            lines.append(f"   by the candidate's rule: {ranked}")
        lines += _listed(changes, 0 if first else limit)
        if first and result.approves_expired:
            lines.append(
                f"   Also approved automatically, not failing: "
                f"{count(len(result.approves_expired), 'call')} that expired undecided"
            )
            lines += _listed(result.approves_expired, limit)
        lines.append("")
    lines.append(
        f"Unchanged: {result.unchanged:,}. Would approve automatically what people approved: "
        f"{result.approves_approved:,}; would reject automatically what people did not approve: "
        f"{result.rejects_unapproved:,}."
    )
    return lines
