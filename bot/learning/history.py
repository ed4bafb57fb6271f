"""The decided calls, the shadow verdicts and the review entries of the audit trail, as typed
records.

A call is settled by one of the entries `bot.service.audit.REPLAYED` names, which keep what a
backtest needs: the call's subject as the policy judged it, when it was requested, where and by
which agent and tool, what it was posted under, what became of it and who decided. Entries
written before subjects were audited have no subject: they are counted, never replayed.
Questions (`ask_human`) are answered, not approved: they are left out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from bot.engine.questions import TOOL_NAME as QUESTION_TOOL
from bot.service.audit import AuditKind
from bot.service.policy.conditions import decode_subject
from bot.store.trail.audit import AuditLog

Outcome = Literal["approved", "rejected", "expired", "edited"]

APPROVED: frozenset[str] = frozenset(
    {"approve", "always_approve", "approve_edited", "auto_approve"}
)
REJECTED: frozenset[str] = frozenset({"reject", "always_reject", "auto_reject"})
# A person's decision on the call itself (not an edit, a grant or the policy): the evidence a
# suggested rule is built on.
CLICKED: frozenset[str] = frozenset({"approve", "always_approve"})


@dataclass(frozen=True)
class DecidedCall:
    """One settled call, as the audit trail kept it."""

    entry_id: str
    at: float  # when it was settled (Unix seconds)
    kind: str  # the audit kind: decided, grant_used, expired, edited
    decision: str  # as audited: approve, auto_reject, approve_edited, expired, edit, ...
    outcome: Outcome
    decider: str  # the person (user id); "" when the policy decided, or it expired
    team: str
    channel: str
    run_id: str
    approval_id: str
    agent: str
    tool: str
    rule: str  # the rule it was posted (or decided) under
    approvers: tuple[str, ...]  # that rule's, as posted
    required: int
    confirm: str  # the typed confirmation it was posted with ("": none)
    subject: dict[str, Any] | None  # as judged; None: not kept (an older entry)
    requested: float  # when it was requested (0: unknown)
    detail: str = ""

    @property
    def by_policy(self) -> bool:
        """Settled by an automatic rule, not by a person."""
        return self.decision.startswith("auto_")

    @property
    def clicked(self) -> bool:
        """Approved by a person on its own card, as posted (no edit, no grant, no quorum, no
        typed confirmation): evidence for a suggested rule."""
        return (
            self.decision in CLICKED
            and bool(self.decider)
            and self.kind == AuditKind.DECIDED
            and self.required <= 1
            and not self.confirm
        )


@dataclass(frozen=True)
class ShadowEntry:
    """What a shadow rule would have done with a call (`AuditKind.SHADOW`)."""

    entry_id: str
    at: float
    approval_id: str
    rule: str  # the shadow rule's label
    would: str  # auto_approve | auto_reject | ask
    approvers: tuple[str, ...]
    required: int
    team: str
    channel: str
    agent: str
    tool: str
    detail: str


# The entries that say how closely people review (bot/service/oversight/attention.py), besides the
# decisions: a card posted (folded or whole, its characters), a person who opened what lies
# behind a card, a quorum vote, a rubber-stamp alarm.
REVIEWED: frozenset[str] = frozenset(
    {AuditKind.CARD_SHOWN, AuditKind.VIEWED, AuditKind.APPROVAL_VOTE, AuditKind.RUBBER_STAMP}
)


@dataclass(frozen=True)
class ReviewEntry:
    """One of the `REVIEWED` entries."""

    at: float
    kind: str
    decision: str  # card_shown: folded | whole; viewed: show_all | conversation; a vote's
    user: str  # who viewed, voted or was alarmed ("" for card_shown)
    team: str
    channel: str
    approval_id: str
    detail: str  # card_shown: "<n> characters"

    @property
    def chars(self) -> int:
        """A card_shown entry's characters (0: unknown)."""
        first = self.detail.split(" ", 1)[0]
        return int(first) if first.isdigit() else 0


@dataclass
class History:
    """What one read of the trail found."""

    decided: list[DecidedCall] = field(default_factory=list)
    shadows: list[ShadowEntry] = field(default_factory=list)
    reviews: list[ReviewEntry] = field(default_factory=list)
    entries: int = 0  # entries read, of every kind
    since: float = 0.0
    until: float = 0.0

    def add(self, entry: dict[str, str]) -> None:
        """Take in one entry of the trail (the next one, in order)."""
        self.entries += 1
        call = decided_call(entry)
        if call is not None:
            self.decided.append(call)
            return
        shadow = shadow_entry(entry)
        if shadow is not None:
            self.shadows.append(shadow)
        elif entry.get("kind", "") in REVIEWED:
            self.reviews.append(review_entry(entry))

    @property
    def replayable(self) -> list[DecidedCall]:
        return [c for c in self.decided if c.subject is not None]

    def outcomes(self) -> dict[str, DecidedCall]:
        """Approval id -> how the call as proposed was settled: an edit says it was not taken
        as proposed, whatever was approved after it; else the last settling entry."""
        found: dict[str, DecidedCall] = {}
        for call in self.decided:
            known = found.get(call.approval_id)
            if known is None or known.outcome != "edited":
                found[call.approval_id] = call
        return found


def _approvers(text: str) -> tuple[str, ...]:
    try:
        value = json.loads(text) if text else []
    except ValueError:
        return ()
    return tuple(str(p) for p in value) if isinstance(value, list) else ()


def _number(text: str, default: float = 0.0) -> float:
    try:
        return float(text)
    except ValueError:
        return default


def decided_call(entry: dict[str, str]) -> DecidedCall | None:
    """The settled call an audit entry records, or None (another kind, a question, a vote)."""
    kind, decision = entry.get("kind", ""), entry.get("decision", "")
    outcome: Outcome
    decider = entry.get("user", "")
    if kind == AuditKind.DECIDED and decision in APPROVED:
        outcome = "approved"
    elif kind == AuditKind.DECIDED and decision in REJECTED:
        outcome = "rejected"
    elif kind == AuditKind.GRANT_USED:
        outcome = "approved"
    elif kind == AuditKind.EXPIRED:
        outcome, decider, decision = "expired", "", "expired"
    elif kind == AuditKind.EDITED:
        outcome = "edited"
    else:
        return None
    if decision.startswith("auto_"):
        decider = ""
    if entry.get("tool", "") == QUESTION_TOOL:
        return None
    kept = entry.get("subject")
    return DecidedCall(
        entry_id=entry.get("id", ""),
        at=_number(entry.get("time", "")),
        kind=kind,
        decision=decision,
        outcome=outcome,
        decider=decider,
        team=entry.get("team", ""),
        channel=entry.get("channel", ""),
        run_id=entry.get("run_id", ""),
        approval_id=entry.get("approval_id", ""),
        agent=entry.get("agent", ""),
        tool=entry.get("tool", ""),
        rule=entry.get("rule", ""),
        approvers=_approvers(entry.get("approvers", "")),
        required=int(_number(entry.get("required", ""), 1)),
        confirm=entry.get("confirm", ""),
        subject=decode_subject(kept) if kept is not None else None,
        requested=_number(entry.get("requested", "")),
        detail=entry.get("detail", ""),
    )


def shadow_entry(entry: dict[str, str]) -> ShadowEntry | None:
    if entry.get("kind") != AuditKind.SHADOW:
        return None
    return ShadowEntry(
        entry_id=entry.get("id", ""),
        at=_number(entry.get("time", "")),
        approval_id=entry.get("approval_id", ""),
        rule=entry.get("rule", ""),
        would=entry.get("decision", ""),
        approvers=_approvers(entry.get("approvers", "")),
        required=int(_number(entry.get("required", ""), 1)),
        team=entry.get("team", ""),
        channel=entry.get("channel", ""),
        agent=entry.get("agent", ""),
        tool=entry.get("tool", ""),
        detail=entry.get("detail", ""),
    )


def review_entry(entry: dict[str, str]) -> ReviewEntry:
    return ReviewEntry(
        at=_number(entry.get("time", "")),
        kind=entry.get("kind", ""),
        decision=entry.get("decision", ""),
        user=entry.get("user", ""),
        team=entry.get("team", ""),
        channel=entry.get("channel", ""),
        approval_id=entry.get("approval_id", ""),
        detail=entry.get("detail", ""),
    )


def history_of(
    entries: Iterable[dict[str, str]], *, since: float = 0.0, until: float = 0.0
) -> History:
    """The decided calls and shadow verdicts among `entries` (the trail's, oldest first)."""
    history = History(since=since, until=until)
    for entry in entries:
        history.add(entry)
    return history


async def read_history(audit: AuditLog, *, since: float, until: float) -> History:
    """The trail from `since` to `until` (Unix seconds), read once, oldest first."""
    history = History(since=since, until=until)
    async for entry in audit.read(since=since, until=until, batch=2000):
        history.add(entry)
    return history
