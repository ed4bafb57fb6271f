"""Timers of pending calls: expiry, reminders and escalation, fired by any replica, once.

Every pending call with timers is on one sorted set (`keys.TIMERS`), scored by when its next
timer is due. A process claims due calls by moving their score to the end of a lease (so two
processes do not work on the same call at once), fires each with `fire_timers.lua` on the
run's own keys (a compare-and-swap: what already happened, or a decision that came first,
makes it a no-op), and puts the call back at its next due time or drops it. A process that
stops mid-way leaves the call on the set, due at the lease's end: it fires late, never twice.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as redis

from bot.clock import SYSTEM_CLOCK, Clock
from bot.store import keys
from bot.store.connection import Replicated, is_cluster
from bot.store.keys import RunKeys
from bot.store.records import CallRecord
from bot.store.scripts import Batch, marking, text

_CLAIM = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[3])
local out = {}
for i, member in ipairs(due) do
  local score = string.format('%.3f', tonumber(ARGV[2]) + i / 1000)
  redis.call('ZADD', KEYS[1], 'XX', score, member)
  table.insert(out, member)
  table.insert(out, score)
end
return out
"""

# Put a claimed call back (ARGV[3]: its next due time in ms, or '' to drop it), only if the
# claim still holds it (its score is unchanged).
_RELEASE = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) ~= tonumber(ARGV[2]) then
  return 0
end
if ARGV[3] == '' then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
end
return 1
"""


def next_due(call: CallRecord) -> float | None:
    """When the call's first timer is due (Unix s), or None when it has none."""
    times = [float(call.expires_at)] if call.expires_at else []
    if call.escalate_at and not call.escalated_at:
        times.append(float(call.escalate_at))
    if call.remind_after and call.reminders < call.remind_max and call.paused_at:
        times.append(float(call.paused_at) + (call.reminders + 1) * call.remind_after)
    return min(times) if times else None


@dataclass(frozen=True)
class TimerClaim:
    approval_id: str
    score: str


@dataclass(frozen=True)
class Fired:
    """What one firing did: `expired` (and whether that leaves the run to resume), or the
    timers it fired (`escalated`, `remind:<n>`) and when the next one is due (Unix s; None:
    the call is decided or gone, it has no timer left)."""

    expired: bool = False
    resume: bool = False
    fired: tuple[str, ...] = ()
    next_due: float | None = None


def decode_fire(reply: list[Any]) -> Fired:
    """fire_timers.lua's reply: {'gone'} | {'expired', resume, undecided left} | {'ok', next
    due (Unix s, 0: none), fired timers...}."""
    kind = text(reply[0])
    if kind == "gone":
        return Fired()
    if kind == "expired":
        return Fired(expired=True, resume=int(reply[1]) == 1)
    due = float(text(reply[1]))
    return Fired(fired=tuple(text(r) for r in reply[2:]), next_due=due if due > 0 else None)


def _claims(reply: list[Any]) -> list[TimerClaim]:
    """_CLAIM's reply: {approval id, score, ...}."""
    items = [text(r) for r in reply]
    return [TimerClaim(items[i], items[i + 1]) for i in range(0, len(items), 2)]


class Timers:
    """The timers index and the firing transition."""

    def __init__(
        self, client: redis.Redis, *, retention_seconds: int, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.redis = client
        self.retention = retention_seconds
        self.clock = clock  # what "due" means: tests skip time on their own clock
        self._claim = client.register_script(_CLAIM)
        self._release = client.register_script(_RELEASE)
        self._fire = client.register_script(marking("fire_timers"))

    async def schedule(self, calls: list[CallRecord], *, only_missing: bool = False) -> None:
        """Index pending calls at their first timer (`only_missing`: leave indexed ones be,
        as the sweeper does for a pause whose process stopped before indexing it)."""
        due = {c.approval_id: t * 1000 for c in calls if not c.decided and (t := next_due(c))}
        if due:
            await self.redis.zadd(keys.TIMERS, due, nx=only_missing)  # type: ignore[arg-type]

    async def claim(self, limit: int, lease: float) -> list[TimerClaim]:
        return _claims(await self._claim(keys=[keys.TIMERS], args=self._claim_args(limit, lease)))

    def _claim_args(self, limit: int, lease: float) -> list[Any]:
        now_ms = self.clock.time() * 1000
        return [f"{now_ms:.3f}", f"{now_ms + lease * 1000 + random.random():.3f}", limit]

    async def release(self, claim: TimerClaim, due: float | None) -> None:
        """Back on the index at `due` (Unix s), or off it (None)."""
        score = "" if due is None else f"{due * 1000:.3f}"
        await self._release(keys=[keys.TIMERS], args=[claim.approval_id, claim.score, score])

    async def look(self, limit: int, lease: float) -> tuple[list[TimerClaim], float | None]:
        """`claim`, and with it, in the same round trip, `next_due_in` as the claim left the
        index (the timer loop's look: one round trip, not two, each second the bot is idle).
        Confirmed by replicas (`Replicated`) the claim goes alone, then the read."""
        redis_ = self.redis
        if is_cluster(redis_) or (isinstance(redis_, Replicated) and redis_.replicas):
            claims = await self.claim(limit, lease)
            return claims, await self.next_due_in()
        async with redis_.pipeline(transaction=False) as pipe:
            batch = Batch(pipe)
            batch.script(self._claim, [keys.TIMERS], self._claim_args(limit, lease))
            pipe.zrange(keys.TIMERS, 0, 0, withscores=True)
            reply, first = await batch.execute()
        return _claims(reply), self._due_in(first)

    async def next_due_in(self) -> float | None:
        """Seconds until the earliest timer (negative: overdue), or None when none is set."""
        return self._due_in(await self.redis.zrange(keys.TIMERS, 0, 0, withscores=True))

    def _due_in(self, first: list[Any]) -> float | None:
        """`next_due_in` from the earliest timer as ZRANGE 0 0 WITHSCORES returns it."""
        return float(first[0][1]) / 1000 - self.clock.time() if first else None

    async def fire(
        self,
        call: CallRecord,
        *,
        pause: Sequence[str],
        owner: str,
        reason: str,
        approvers: Sequence[str] | None = None,
        escalate_to: Sequence[str] | None = None,
    ) -> Fired:
        """Fire what is due of `call`'s timers now (`pause`: the approval ids of its pause);
        see fire_timers.lua. `approvers` and `escalate_to`: who the policy in force names for
        the call (None: what the call recorded when posted), recorded on it as they are used."""
        if approvers is None:
            approvers = json.loads(call.approvers) if call.approvers else []
        if escalate_to is None:
            escalate_to = json.loads(call.escalate_to) if call.escalate_to else []
        others = [i for i in pause if i != call.approval_id]
        reply = await self._fire(
            keys=RunKeys(call.run_id).fire_timers(call.approval_id, others),
            args=[
                f"{self.clock.time():.3f}",
                owner,
                self.retention,
                reason,
                json.dumps(list(approvers)),
                json.dumps(list(escalate_to)) if escalate_to else "",
            ],
        )
        return decode_fire(reply)
