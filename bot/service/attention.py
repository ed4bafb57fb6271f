"""Whether approvals are real: how much attention each person's decisions got.

Recorded as it happens, off the decision's path (a tracked background task after the decision
is recorded): who opened what lies behind a card (Show all, the conversation: an audit entry
`viewed`), and for each decision by a person, the time the card had their attention (since the
card was shown, or since their previous decision when that is shorter: a backlog read one card
after another), compared with the time the card takes to read (its characters at
`read_chars_per_second`). An approver whose approvals come quickly `stamp_streak` times in a
row (each within `stamp_seconds`) is told privately, and the alarm is audited (`rubber_stamp`),
so the channel's report shows it. `approval-bot report reviewers` reads the same entries back.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from bot import metrics
from bot.outage import log_failure
from bot.service.audit import AuditKind
from bot.service.core import ServiceCore
from bot.service.ports import Actor
from bot.store import keys
from bot.store.attention import AttentionStore, Noted
from bot.store.outbox import Shown
from bot.store.records import CallRecord, RunRecord

log = logging.getLogger(__name__)

# What a view or a card is audited as, for the report (`bot.learning.reviewers`).
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
        self.store = AttentionStore(core.store.redis, retention_seconds=core.store.retention)

    def card_shown(self, run: RunRecord, approval_id: str, chars: int, folded: bool) -> None:
        """A call's card was posted: what it asked of its reader (`card_shown` in the audit:
        folded or whole, and its characters)."""
        self.core.spawn(self._card_shown(run, approval_id, chars, folded), name="card-shown")

    async def _card_shown(self, run: RunRecord, approval_id: str, chars: int, folded: bool) -> None:
        call = await self.core.store.get_call(approval_id)
        if call is not None:
            await self.core.audit(
                AuditKind.CARD_SHOWN, run=run, call=call, decision=FOLDED if folded else WHOLE,
                detail=f"{chars} characters",
            )  # fmt: skip

    def viewed(self, actor: Actor, call: CallRecord, what: str) -> None:
        """`actor` opened what lies behind `call`'s card (`SHOW_ALL`, `CONVERSATION`)."""
        self.core.spawn(self._viewed(actor, call, what), name="attention-viewed")

    async def _viewed(self, actor: Actor, call: CallRecord, what: str) -> None:
        if not call.decided:
            await self.store.add_viewer(call.approval_id, actor.user_id)
        await self.core.audit(AuditKind.VIEWED, call=call, actor=actor, decision=what)

    def decided(self, actor: Actor, call: CallRecord, decision: str) -> None:
        """`actor` decided `call` (or voted on it) with `decision`, as audited."""
        self.core.spawn(self._decided(actor, call, decision), name="attention-decided")

    async def _decided(self, actor: Actor, call: CallRecord, decision: str) -> None:
        s = self.settings
        now = time.time()  # as Slack's timestamps (the card's `shown`)
        shown = shown_at(call)
        try:
            noted = await self.store.note_decision(
                actor.team_id, actor.user_id, now=now, shown=shown,
                approve=decision in APPROVALS or decision == "vote", quick=s.stamp_seconds,
                streak=s.stamp_streak,
            )  # fmt: skip
        except Exception:
            log_failure(log, "could not record the attention of a decision on %s",
                        call.approval_id)  # fmt: skip
            return
        channel = call.channel_id
        card = await self.core.store.outbox.shown_one(
            call.run_id, str(keys.Target("card", call.approval_id))
        )
        if shown:
            metrics.REVIEW_SECONDS.labels(channel=channel).observe(max(0.0, now - shown))
        if self._too_fast(card, noted):
            metrics.REVIEW_TOO_FAST.labels(channel=channel).inc()
        if card.folded and not await self.store.viewed(call.approval_id, actor.user_id):
            metrics.REVIEW_UNOPENED.labels(channel=channel).inc()
        if noted.alarmed:
            await self._alarm(actor, call, noted.alarmed)

    def _too_fast(self, card: Shown, noted: Noted) -> bool:
        """Decided in less time than its card takes to read (unknown: not counted)."""
        return (
            noted.attention is not None
            and card.card_chars > 0
            and noted.attention < self.settings.read_seconds(card.card_chars)
        )

    async def _alarm(self, actor: Actor, call: CallRecord, streak: int) -> None:
        s = self.settings
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
