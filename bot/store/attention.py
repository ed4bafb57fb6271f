"""How closely each person reviews: who opened what lies behind a card, and each person's run
of quick approvals (the rubber-stamp alarm, `bot.service.attention`).

- `ab:{run}:call:<token>:viewers` (set, the call's retention): who opened Show all or the
  conversation of the call (the audit trail says when; this set answers at decision time).
- `ab:attention:<team>:<user>` (hash, a day after the person's last decision): `last`, when
  they last decided something, and `streak`, their approvals in a row that each came quickly.
  One script reads and writes it, so two decisions of one person (two tabs, a batch) count
  once each.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio as redis

from bot.store import keys
from bot.store.keys import PREFIX
from bot.store.scripts import text

KEEP_STREAK_SECONDS = 86400

# KEYS[1] the person's hash; ARGV: now, shown (0: unknown), approve (1/0), quick seconds,
# streak that raises the alarm (0: never), keep (s). The attention a decision got is the time
# since the card was shown or since the person's previous decision, whichever is shorter (a
# backlog read one card after another: each card had the time since the one before). A quick
# approval adds to the streak, anything else ends it; at the threshold the alarm is raised and
# the streak starts again. Returns {attention (ms, -1: unknown), streak, alarmed}.
_NOTE = """
local now, shown = tonumber(ARGV[1]), tonumber(ARGV[2])
local last = tonumber(redis.call('HGET', KEYS[1], 'last') or '0') or 0
local attention = -1
if shown > 0 then attention = now - shown end
if last > 0 and (attention < 0 or now - last < attention) then attention = now - last end
local streak = 0
if ARGV[3] == '1' and attention >= 0 and attention <= tonumber(ARGV[4]) then
  streak = (tonumber(redis.call('HGET', KEYS[1], 'streak') or '0') or 0) + 1
end
local alarmed = 0
local threshold = tonumber(ARGV[5])
if threshold > 0 and streak >= threshold then
  alarmed = streak
  streak = 0
end
redis.call('HSET', KEYS[1], 'last', ARGV[1], 'streak', streak)
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[6]))
if attention >= 0 then attention = math.floor(attention * 1000 + 0.5) end
return {attention, streak, alarmed}
"""


def viewers_key(approval_id: str) -> str:
    return keys.call_key(approval_id) + ":viewers"


def person_key(team: str, user: str) -> str:
    return f"{PREFIX}:attention:{team}:{user}"


@dataclass(frozen=True)
class Noted:
    """What one decision did to its decider's record."""

    attention: float | None
    """Seconds the card had the decider's attention (see `_NOTE`); None: unknown."""
    streak: int
    """Quick approvals in a row, this one included (0: it was not one)."""
    alarmed: int
    """The streak that raised the alarm now (0: none)."""


class AttentionStore:
    """Viewers of calls, and each person's streak of quick approvals."""

    def __init__(self, client: redis.Redis, *, retention_seconds: int) -> None:
        self.redis = client
        self.retention = retention_seconds
        self._note = client.register_script(_NOTE)

    async def add_viewer(self, approval_id: str, user: str) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.sadd(viewers_key(approval_id), user)
            pipe.expire(viewers_key(approval_id), self.retention)
            await pipe.execute()

    async def viewed(self, approval_id: str, user: str) -> bool:
        """Whether `user` opened what lies behind the call's card."""
        return bool(await self.redis.sismember(viewers_key(approval_id), user))

    async def note_decision(
        self,
        team: str,
        user: str,
        *,
        now: float,
        shown: float,
        approve: bool,
        quick: float,
        streak: int,
    ) -> Noted:
        """Record a person's decision (at `now`; the card shown at `shown`, 0: unknown);
        `quick`: the most seconds of attention an approval may have had to count towards the
        streak; `streak`: the run of them that raises the alarm (0: never)."""
        reply = await self._note(
            keys=[person_key(team, user)],
            args=[f"{now:.3f}", f"{shown:.3f}", "1" if approve else "0", quick, streak,
                  KEEP_STREAK_SECONDS],
        )  # fmt: skip
        attention, count, alarmed = (int(text(v)) for v in reply)
        return Noted(None if attention < 0 else attention / 1000, count, alarmed)
