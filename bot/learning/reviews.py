"""`approval-bot report reviews`: whether approvals are real, per approver and channel.

Read back from the audit trail the bot writes as it happens (bot/service/oversight/attention.py):
for each person's decision (or quorum vote), the time from its card shown in Slack (`card_shown`;
before that entry existed, the call's request) to the decision; whether it came faster than
the card can be read (the attention it had, since the card was shown or since the person's
previous decision when that is shorter, under its characters at `read_chars_per_second`);
whether a card whose arguments were folded was decided without its decider opening Show all
or the conversation (`viewed`). Beside them: approvals, rejections, expiries (on a person's
row, the expired calls that named them among their approvers; a group cannot be expanded
here), and rubber-stamp alarms (`rubber_stamp`).

Each channel has a row for everyone (approver `*`) and one per person. Percentiles are by
nearest rank (p95 of 20 decisions is the 19th quickest): exact, and reproducible by hand.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from bot.learning.history import DecidedCall, History, ReviewEntry
from bot.service.audit import AuditKind

EVERYONE = "*"
APPROVALS = frozenset({"approve", "always_approve", "approve_edited"})
REJECTIONS = frozenset({"reject", "always_reject"})
# An Always decision settles the run's other calls of the tool too: those were not reviewed
# on their own cards (bot/service/decisions/decide.py audits them with this detail).
ALONGSIDE = "always decision on "
# A previous decision older than this does not shorten a card's attention (the live record of
# a person's latest decisions is kept as long: bot/store/trail/attention.py).
KEEP_SECONDS = 86400.0
# A Slack user id (a mention is made of nothing else).
USER_ID = re.compile(r"^[UW][A-Z0-9]+\Z")  # (\Z: `$` would let a final "\n" through)

CSV_COLUMNS = (
    "team", "channel", "approver", "decisions", "approvals", "rejections", "timed",
    "p50_seconds", "p95_seconds", "too_fast", "unopened", "expiries", "rubber_stamp_alarms",
)  # fmt: skip


def percentile(values: Iterable[float], q: float) -> float | None:
    """The nearest-rank `q` percentile (0 < q <= 1) of `values`; None when there are none."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


@dataclass
class ReviewFigures:
    """One approver's figures in one channel (approver `EVERYONE`: the channel's)."""

    channel: str
    approver: str
    team: str = ""
    seconds: list[float] = field(default_factory=list)  # time to decision, where known
    approvals: int = 0
    rejections: int = 0
    too_fast: int = 0
    unopened: int = 0
    expiries: int = 0
    alarms: int = 0

    @property
    def decisions(self) -> int:
        return self.approvals + self.rejections

    @property
    def p50(self) -> float | None:
        return percentile(self.seconds, 0.5)

    @property
    def p95(self) -> float | None:
        return percentile(self.seconds, 0.95)

    @property
    def empty(self) -> bool:
        return not (self.decisions or self.expiries or self.alarms)

    def as_json(self) -> dict[str, Any]:
        return {
            "team": self.team,
            "channel": self.channel,
            "approver": self.approver,
            "decisions": self.decisions,
            "approvals": self.approvals,
            "rejections": self.rejections,
            "timed": len(self.seconds),
            "p50_seconds": _rounded(self.p50),
            "p95_seconds": _rounded(self.p95),
            "too_fast": self.too_fast,
            "unopened": self.unopened,
            "expiries": self.expiries,
            "rubber_stamp_alarms": self.alarms,
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


@dataclass(frozen=True)
class _Decision:
    at: float
    team: str
    user: str
    channel: str
    approval_id: str
    approve: bool
    requested: float  # 0: unknown


def _decisions(history: History) -> list[_Decision]:
    """Every decision or vote a person made on a card, oldest first."""
    found = [
        _Decision(c.at, c.team, c.decider, c.channel, c.approval_id,
                  c.decision in APPROVALS, c.requested)
        for c in history.decided
        if _by_a_person(c)
    ]  # fmt: skip
    found += [
        _Decision(e.at, e.team, e.user, e.channel, e.approval_id, True, 0.0)
        for e in history.reviews
        if e.kind == AuditKind.APPROVAL_VOTE and e.user
    ]
    return sorted(found, key=lambda d: d.at)


def _by_a_person(call: DecidedCall) -> bool:
    return (
        call.kind == AuditKind.DECIDED
        and bool(call.decider)
        and call.decision in APPROVALS | REJECTIONS
        and not call.detail.startswith(ALONGSIDE)
    )


def review_figures(
    history: History, *, read_chars_per_second: float = 500.0, channel: str = ""
) -> list[ReviewFigures]:
    """The figures of every channel (or of `channel`) and approver in `history`: each
    channel's row for everyone first, then its people's, channels in order."""
    shown: dict[str, ReviewEntry] = {}
    opened: dict[tuple[str, str], float] = {}
    for entry in history.reviews:
        if entry.kind == AuditKind.CARD_SHOWN:
            shown.setdefault(entry.approval_id, entry)
        elif entry.kind == AuditKind.VIEWED:
            opened.setdefault((entry.approval_id, entry.user), entry.at)
    rows: dict[tuple[str, str], ReviewFigures] = {}

    def rows_of(where: str, person: str, team: str) -> list[ReviewFigures]:
        keys = [(where, EVERYONE)] + ([(where, person)] if person else [])
        for key in keys:
            row = rows.setdefault(key, ReviewFigures(channel=key[0], approver=key[1]))
            row.team = row.team or team
        return [rows[key] for key in keys]

    previous: dict[tuple[str, str], float] = {}
    for d in _decisions(history):
        card = shown.get(d.approval_id)
        since = card.at if card is not None else d.requested
        attention = d.at - card.at if card is not None else math.inf
        before = previous.get((d.team, d.user))
        if before is not None and d.at - before <= KEEP_SECONDS:
            attention = min(attention, d.at - before)
        previous[(d.team, d.user)] = d.at
        if channel and d.channel != channel:
            continue
        chars = card.chars if card is not None else 0
        too_fast = (
            not math.isinf(attention) and chars > 0
            and max(0.0, attention) < chars / read_chars_per_second
        )  # fmt: skip
        seen = opened.get((d.approval_id, d.user))
        unopened = card is not None and card.decision == "folded" and (seen is None or seen > d.at)
        for row in rows_of(d.channel, d.user, d.team):
            if since:
                row.seconds.append(max(0.0, d.at - since))
            row.approvals += d.approve
            row.rejections += not d.approve
            row.too_fast += too_fast
            row.unopened += unopened
    for call in history.decided:
        if call.outcome != "expired" or (channel and call.channel != channel):
            continue
        rows_of(call.channel, "", call.team)[0].expiries += 1
        for person in {p for p in call.approvers if USER_ID.match(p)}:
            rows_of(call.channel, person, call.team)[1].expiries += 1
    for entry in history.reviews:
        if entry.kind == AuditKind.RUBBER_STAMP and (not channel or entry.channel == channel):
            for row in rows_of(entry.channel, entry.user, entry.team):
                row.alarms += 1
    return sorted(
        (row for row in rows.values() if not row.empty),
        key=lambda r: (r.channel, r.approver != EVERYONE, r.approver),
    )


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


HEADINGS = ("channel", "approver", "decisions", "approved", "rejected", "p50 s", "p95 s",
            "too fast", "unopened", "expired", "alarms")  # fmt: skip


def render(rows: list[ReviewFigures], history: History) -> list[str]:
    """The figures as a table for a terminal."""
    days = (history.until - history.since) / 86400
    window = f"the last {days:g} days" if history.since > 0 else "the whole trail"
    lines = [
        f"Reviews, {window}: per channel (approver {EVERYONE}: everyone) and "
        "approver, time from a card shown to its decision (p50, p95), decisions faster than "
        "the card can be read (too fast), folded cards decided without opening them "
        "(unopened), expiries, rubber-stamp alarms."
    ]
    if not rows:
        return [*lines, "  No decisions, expiries or alarms in the window."]
    table = [HEADINGS] + [
        (r.channel, r.approver, str(r.decisions), str(r.approvals), str(r.rejections),
         _seconds(r.p50), _seconds(r.p95), str(r.too_fast), str(r.unopened), str(r.expiries),
         str(r.alarms))
        for r in rows
    ]  # fmt: skip
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADINGS))]
    for row in table:
        pairs = enumerate(zip(row, widths, strict=True))
        cells = [c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in pairs]
        lines.append("  " + "  ".join(cells).rstrip())
    return lines


def _cell(value: Any) -> str:
    """A CSV cell that a spreadsheet shows as text, never runs as a formula."""
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def csv_text(rows: list[ReviewFigures]) -> str:
    """The figures as CSV (a header row, then `CSV_COLUMNS` per row)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in rows:
        data = row.as_json()
        writer.writerow([_cell(data[column]) for column in CSV_COLUMNS])
    return out.getvalue()
