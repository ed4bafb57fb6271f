"""Outcomes the run's starter must be told (a call decided or expired, the run ended), and
which of them they were told: their `notice` message is one more target of the run's outbox."""

from __future__ import annotations

from typing import Any

import redis.asyncio as redis

from bot.store import keys
from bot.store.keys import RunKeys
from bot.store.outbox import Mark, Outbox
from bot.store.scripts import now, script, text

# Record outcomes the run's starter must be told; mark their message when one is new.
# KEYS[1] outcomes hash, KEYS[2] outbox; ARGV[1] now, ARGV[2] retention, ARGV[3..] id, outcome
_OUTCOMES = """
local new = 0
for i = 3, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) ~= ARGV[i + 1] then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
    new = new + 1
  end
end
if new > 0 then
  redis.call('EXPIRE', KEYS[1], ARGV[2])
  mark(KEYS[2], 'notice', ARGV[1], ARGV[2])
  return {new, redis.call('HGET', KEYS[2], 'notice'), redis.call('HGET', KEYS[2], 'notice@')}
end
return {new}
"""


def decode_outcomes(reply: list[Any]) -> Mark | None:
    """_OUTCOMES' reply: {new, notice tick, notice since} when an outcome was new, else {0}:
    the notice's mark, or None when nothing was new."""
    if not int(reply[0]):
        return None
    return Mark(text(reply[1]), float(text(reply[2]) or 0))


# Let go of a person's notice lock only if this pass still holds it.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class Outcomes:
    """What the starter must be told, and what they were told (idempotent)."""

    def __init__(self, client: redis.Redis, *, retention_seconds: int, outbox: Outbox) -> None:
        self.redis = client
        self.retention = retention_seconds
        self.outbox = outbox
        self._outcomes = client.register_script(script("_outbox") + _OUTCOMES)
        self._release = client.register_script(_RELEASE)

    async def record_outcomes(
        self, run_id: str, outcomes: dict[str, str], person: str = ""
    ) -> Mark | None:
        """Note outcomes the starter must be told (approval id or `run` -> status); their
        message (`notice`) is marked when one is new: then its mark (what a reread of the
        outbox would give), and the run is listed among `person`'s runs with news (one notice
        tells them all, see `pending_runs`). Idempotent."""
        if not outcomes:
            return None
        args: list[str] = [now(), str(self.retention)]
        for item in sorted(outcomes.items()):
            args.extend(item)
        reply = await self._outcomes(keys=RunKeys(run_id).record_outcomes(), args=args)
        notice = decode_outcomes(reply)
        if notice is not None:
            if person:  # its own key (another slot): after the run's script, never inside it
                async with self.redis.pipeline(transaction=False) as pipe:
                    pipe.zadd(keys.notice_runs_key(person), {run_id: notice.since}, nx=True)
                    pipe.expire(keys.notice_runs_key(person), self.retention)
                    await pipe.execute()
            await self.outbox.schedule(run_id)
        return notice

    async def pending_runs(self, person: str, limit: int) -> list[str]:
        """Up to `limit` of `person`'s runs with outcomes not told yet, oldest news first."""
        found = await self.redis.zrange(keys.notice_runs_key(person), 0, limit - 1)
        return [text(run_id) for run_id in found]

    async def forget_runs(self, person: str, run_ids: list[str]) -> None:
        """`person` was told everything of these runs (news after that lists them again)."""
        if run_ids:
            await self.redis.zrem(keys.notice_runs_key(person), *run_ids)

    async def hold_notice(self, person: str, token: str, seconds: float) -> bool:
        """Take `person`'s notice for one pass (a lease: another pass of another run, in this
        process or another, does not tell the same outcomes at the same time)."""
        return bool(
            await self.redis.set(
                keys.notice_lock_key(person), token, nx=True, px=max(1, int(seconds * 1000))
            )
        )

    async def release_notice(self, person: str, token: str) -> None:
        await self._release(keys=[keys.notice_lock_key(person)], args=[token])

    async def untold_of(self, run_ids: list[str]) -> dict[str, dict[str, str]]:
        """`untold_outcomes` of several runs in one round trip (runs with none left out)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.hgetall(keys.outcomes_key(run_id))
            replies = await pipe.execute()
        found: dict[str, dict[str, str]] = {}
        for run_id, stored in zip(run_ids, replies, strict=True):
            raw = {text(k): text(v) for k, v in stored.items()}
            untold = {k: v for k, v in raw.items() if not k.endswith("!") and raw.get(k + "!") != v}
            if untold:
                found[run_id] = untold
        return found

    async def untold_outcomes(self, run_id: str) -> dict[str, str]:
        """Outcomes recorded and not yet told to the starter (id -> status)."""
        stored = await self.redis.hgetall(keys.outcomes_key(run_id))
        raw = {text(k): text(v) for k, v in stored.items()}
        return {k: v for k, v in raw.items() if not k.endswith("!") and raw.get(k + "!") != v}

    async def has_outcomes(self, run_id: str) -> bool:
        return bool(await self.redis.exists(keys.outcomes_key(run_id)))

    async def told_outcomes(self, run_id: str, told: dict[str, str]) -> None:
        if told:
            await self.redis.hset(
                keys.outcomes_key(run_id), mapping={k + "!": v for k, v in told.items()}
            )
