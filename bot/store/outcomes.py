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


class Outcomes:
    """What the starter must be told, and what they were told (idempotent)."""

    def __init__(self, client: redis.Redis, *, retention_seconds: int, outbox: Outbox) -> None:
        self.redis = client
        self.retention = retention_seconds
        self.outbox = outbox
        self._outcomes = client.register_script(script("_outbox") + _OUTCOMES)

    async def record_outcomes(self, run_id: str, outcomes: dict[str, str]) -> Mark | None:
        """Note outcomes the starter must be told (approval id or `run` -> status); their
        message (`notice`) is marked when one is new: then its mark (what a reread of the
        outbox would give). Idempotent."""
        if not outcomes:
            return None
        args: list[str] = [now(), str(self.retention)]
        for item in sorted(outcomes.items()):
            args.extend(item)
        reply = await self._outcomes(keys=RunKeys(run_id).record_outcomes(), args=args)
        notice = decode_outcomes(reply)
        if notice is not None:
            await self.outbox.schedule(run_id)
        return notice

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
