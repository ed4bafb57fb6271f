"""How closely each person reviews: who opened what lies behind a card, and each person's
latest decisions (the rubber-stamp alarm, `bot.service.oversight.attention`).

- `ab:{run}:call:<token>:viewers` (set, the call's retention): who opened Show all or the
  conversation of the call (the audit trail says when; this set answers at decision time).
- `ab:attention:<team>:<user>` (list, a day after the person's last decision): their latest
  decisions, newest first, `<time> <card shown> <a|r> <id>` each, at most `KEPT`.

A decision's reads and writes here ride in the round trip that writes its audit entry (`*_in`:
commands added to that pipeline, their replies read back by `noted`), so a decision costs no
round trip more for them.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as redis

from bot.store import keys
from bot.store.delivery.outbox import Shown
from bot.store.keys import PREFIX
from bot.store.scripts import text

KEEP_SECONDS = 86400
# The commands `decision_in` adds to a pipeline, whose replies `noted` reads (in that order):
# three that record the decision (not for a batch's later calls: `counted`), three that read.
DECISION_COMMANDS = 6
RECORDING = 3


def viewers_key(approval_id: str) -> str:
    return keys.call_key(approval_id) + ":viewers"


def person_key(team: str, user: str) -> str:
    return f"{PREFIX}:attention:{team}:{user}"


@dataclass(frozen=True)
class Past:
    """One of a person's latest decisions."""

    at: float
    shown: float  # when its card was shown (0: unknown)
    approve: bool
    token: str


def _past(value: Any) -> Past | None:
    parts = text(value).split(" ")
    if len(parts) != 4:
        return None
    try:
        return Past(float(parts[0]), float(parts[1]), parts[2] == "a", parts[3])
    except ValueError:
        return None


def attention_of(latest: Sequence[Past], index: int) -> float | None:
    """The seconds decision `index` of `latest` (newest first) had its card's attention: since
    the card was shown, or since the decision before it when that is shorter (a backlog read
    one card after another); None: neither is known."""
    now = latest[index]
    found = now.at - now.shown if now.shown else math.inf
    if index + 1 < len(latest):
        found = min(found, now.at - latest[index + 1].at)
    return None if math.isinf(found) else max(0.0, found)


def streak_of(latest: Sequence[Past], quick: float) -> int:
    """Approvals in a row, newest first, each with at most `quick` seconds of attention."""
    count = 0
    for index, past in enumerate(latest):
        seconds = attention_of(latest, index)
        if not past.approve or seconds is None or seconds > quick:
            break
        count += 1
    return count


@dataclass(frozen=True)
class Noted:
    """What a decision's round trip found: the attention it got, its decider's streak of
    quick approvals, the card's reading, and whether the decider opened what it hides."""

    attention: float | None
    streak: int
    card: Shown
    opened: bool


class AttentionStore:
    """Viewers of calls, and each person's latest decisions."""

    def __init__(self, client: redis.Redis, *, retention_seconds: int, kept: int = 31) -> None:
        self.redis = client
        self.retention = retention_seconds
        self.kept = kept  # decisions kept per person: the alarm's streak, and one before it

    async def add_viewer(self, approval_id: str, user: str) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.sadd(viewers_key(approval_id), user)
            pipe.expire(viewers_key(approval_id), self.retention)
            await pipe.execute()

    def decision_in(
        self, pipe: Any, team: str, user: str, *, run_id: str, approval_id: str, at: float,
        shown: float, approve: bool, counted: bool = True,
    ) -> str:  # fmt: skip
        """Add to `pipe` the `DECISION_COMMANDS` commands that record a person's decision (at
        `at`, on a card shown at `shown`, 0: unknown) and read back what `noted` needs; returns
        the entry's token (to find it among the replies). Not `counted` (a batch's calls after
        its first: one act of review): only the reads, the decision joins no streak."""
        token = secrets.token_hex(4)
        key = person_key(team, user)
        if counted:
            pipe.lpush(key, f"{at:.3f} {shown:.3f} {'a' if approve else 'r'} {token}")
            pipe.ltrim(key, 0, self.kept - 1)
            pipe.expire(key, KEEP_SECONDS)
        pipe.lrange(key, 0, self.kept - 1)
        pipe.hget(keys.shown_key(run_id), str(keys.Target("card", approval_id)))
        pipe.sismember(viewers_key(approval_id), user)
        return token

    @staticmethod
    def noted(replies: Sequence[Any], token: str, quick: float, counted: bool = True) -> Noted:
        """What `decision_in`'s commands found (`replies`: theirs, in order; `counted` as
        given to it). A decision not counted has no attention of its own and no streak."""
        first = RECORDING if counted else 0
        latest = [p for p in (_past(v) for v in replies[first] or []) if p is not None]
        mine = next((i for i, p in enumerate(latest) if p.token == token), None)
        since = latest[mine:] if mine is not None else []
        shown = replies[first + 1]
        card = Shown.decode(text(shown)) if shown is not None else Shown()
        return Noted(
            attention=attention_of(since, 0) if since else None,
            streak=streak_of(since, quick),
            card=card,
            opened=bool(replies[first + 2]),
        )

    async def restart_streak(self, team: str, user: str) -> None:
        """After an alarm: the next quick approvals count from none."""
        await self.redis.delete(person_key(team, user))
