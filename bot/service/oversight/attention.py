"""Whether approvals are real: how much attention each person's decisions got.

Recorded as it happens: what each card asked of its reader when it was posted (an audit entry
`card_shown`: its characters, its arguments folded or whole), who opened what lies behind a
card (Show all, the conversation: `viewed`), and for each decision by a person, in the round
trip that writes its audit entry (no round trip more), the time the card had their attention
(since the card was shown, or since their previous decision when that is shorter: a backlog
read one card after another), compared with the time the card takes to read (its characters
at `read_chars_per_second`). An approver whose approvals come quickly `stamp_streak` times in a
row (each within `stamp_seconds`) is told privately, and the alarm is audited (`rubber_stamp`),
so the channel's report shows it. `approval-bot report reviews` reads the same entries back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bot import metrics
from bot.outage import log_failure
from bot.service.audit import AuditKind
from bot.service.core import ServiceCore
from bot.service.ports import Actor
from bot.store.records import CallRecord, RunRecord
from bot.store.trail.attention import AttentionStore, Noted

log = logging.getLogger(__name__)

# What a view or a card is audited as, for the report (`bot.learning.reviews`).
SHOW_ALL = "show_all"
CONVERSATION = "conversation"
FOLDED = "folded"  # a card's arguments were folded (it offered Show all)
WHOLE = "whole"
APPROVALS = frozenset({"approve", "always_approve"})


@dataclass(frozen=True)
class AttentionSettings:
    """The thresholds (settings `APPROVAL_BOT_REVIEW_READ_CHARS_PER_SECOND`,
    `APPROVAL_BOT_RUBBER_STAMP_SECONDS`, `APPROVAL_BOT_RUBBER_STAMP_STREAK`)."""

    read_chars_per_second: float = 500.0
    """A card of N characters takes N / this many seconds to read (1,000: 2 s)."""
    stamp_seconds: float = 5.0
    """An approval with at most this much attention is quick."""
    stamp_streak: int = 30
    """Quick approvals in a row that raise the alarm (0: never)."""

    def read_seconds(self, chars: int) -> float:
        """The least time a card of `chars` characters takes to read."""
        return chars / self.read_chars_per_second


def shown_at(call: CallRecord) -> float:
    """When the call's card was shown in Slack: its message's timestamp (0: not yet)."""
    try:
        return float(call.message_ts) if call.message_ts else 0.0
    except ValueError:
        return 0.0


def alarm_text(settings: AttentionSettings, streak: int) -> str:
    return (
        f"You have approved {streak} calls in a row, each within {settings.stamp_seconds:g} "
        "seconds of seeing it. An approval is worth the reading behind it: take the time each "
        "card needs (Show all, the conversation), reject what you cannot check, or ask for a "
        "policy rule that decides such calls by itself. This alarm is in your channel's "
        "review report."
    )


class Attention:
    """Records the attention behind decisions, and raises the rubber-stamp alarm."""

    def __init__(self, core: ServiceCore, settings: AttentionSettings | None = None) -> None:
        self.core = core
        self.settings = settings or AttentionSettings()
        self.store = AttentionStore(
            core.store.redis,
            retention_seconds=core.store.retention,
            kept=self.settings.stamp_streak + 1,
        )

    def card_shown(self, run: RunRecord, call: CallRecord, chars: int, folded: bool) -> None:
        """A call's card was posted: what it asked of its reader (`card_shown` in the audit:
        folded or whole, and its characters)."""
        decision = FOLDED if folded else WHOLE
        self.core.spawn(
            self.core.audit(AuditKind.CARD_SHOWN, run=run, call=call, decision=decision,
                            detail=f"{chars} characters"),
            name="card-shown",
        )  # fmt: skip

    def viewed(self, actor: Actor, call: CallRecord, what: str) -> None:
        """`actor` opened what lies behind `call`'s card (`SHOW_ALL`, `CONVERSATION`)."""
        self.core.spawn(self._viewed(actor, call, what), name="attention-viewed")

    async def _viewed(self, actor: Actor, call: CallRecord, what: str) -> None:
        if not call.decided:
            await self.store.add_viewer(call.approval_id, actor.user_id)
        await self.core.audit(AuditKind.VIEWED, call=call, actor=actor, decision=what)

    def decided_in(
        self, pipe: Any, actor: Actor, call: CallRecord, decision: str, counted: bool = True
    ) -> Callable[[Sequence[Any]], None]:
        """`actor` decided `call` (or voted on it) with `decision`, as audited: the commands
        that record it join `pipe` (the round trip of the decision's audit entry, first in it),
        and what to do with their replies is returned (the figures, the alarm). Not `counted`:
        a batch's call after its first (Approve all is one act of review: its first decision
        joins the person's streak of quick approvals, the others do not)."""
        now = time.time()  # as Slack's timestamps (the card's `shown`)
        shown = shown_at(call)
        token = self.store.decision_in(
            pipe, actor.team_id, actor.user_id, run_id=call.run_id,
            approval_id=call.approval_id, at=now, shown=shown, approve=decision in APPROVALS,
            counted=counted,
        )  # fmt: skip

        def then(replies: Sequence[Any]) -> None:
            try:
                noted = self.store.noted(replies, token, self.settings.stamp_seconds, counted)
                self._figures(actor, call, noted, waited=now - shown if shown else None)
            except Exception:
                log_failure(log, "could not count the attention of a decision on %s",
                            call.approval_id)  # fmt: skip

        return then

    def _figures(
        self, actor: Actor, call: CallRecord, noted: Noted, *, waited: float | None
    ) -> None:
        channel = call.channel_id
        if waited is not None:
            metrics.REVIEW_SECONDS.labels(channel=channel).observe(max(0.0, waited))
        if self._too_fast(noted):
            metrics.REVIEW_TOO_FAST.labels(channel=channel).inc()
        if noted.card.folded and not noted.opened:
            metrics.REVIEW_UNOPENED.labels(channel=channel).inc()
        threshold = self.settings.stamp_streak
        if threshold and noted.streak == threshold:
            self.core.spawn(self._alarm(actor, call, noted.streak), name="rubber-stamp")

    def _too_fast(self, noted: Noted) -> bool:
        """Decided in less time than its card takes to read (unknown: not counted)."""
        chars = noted.card.card_chars
        return (
            noted.attention is not None
            and chars > 0
            and noted.attention < self.settings.read_seconds(chars)
        )

    async def _alarm(self, actor: Actor, call: CallRecord, streak: int) -> None:
        s = self.settings
        await self.store.restart_streak(actor.team_id, actor.user_id)
        metrics.RUBBER_STAMPS.labels(channel=call.channel_id).inc()
        detail = f"{streak} approvals in a row, each within {s.stamp_seconds:g} s"
        await self.core.audit(
            AuditKind.RUBBER_STAMP, call=call, actor=actor, decision="alarm", detail=detail
        )
        await self.core.safely(
            "tell an approver about their quick approvals",
            self.core.notifier.tell(
                call.channel_id, actor.user_id, alarm_text(s, streak), team=actor.team_id
            ),
        )
