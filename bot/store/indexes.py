"""The indexes over runs that the sweeper, the reconciler and the metrics read: the active
runs, the runs due for the bot (`DUE_RUNS`), and the deliveries already seen."""

from __future__ import annotations

import secrets
from typing import Any

import redis.asyncio as redis

from bot.store import keys
from bot.store.records import RunStatus
from bot.store.scripts import text

# Drop a run from the due set only if nothing made it due again since `since` was read.
_NOT_DUE = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) == tonumber(ARGV[2]) then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0
"""


class Indexes:
    """Reads and writes of the cross-run indexes (each key used alone, never in a run's script)."""

    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        self._not_due = client.register_script(_NOT_DUE)

    # Deliveries and liveness --------------------------------------------------------------

    async def first_delivery(self, kind: str, delivery_id: str, ttl: int = 3600) -> bool:
        """True the first time a (kind, id) is seen within `ttl` seconds: drops duplicates.

        The claim holds a unique token: when redis-py retries the SET after a lost reply and
        finds its own token, that is this caller's claim, not a duplicate."""
        token = secrets.token_hex(8)
        earlier = await self.redis.set(
            keys.delivery_key(kind, delivery_id), token, nx=True, ex=ttl, get=True
        )
        return earlier is None or text(earlier) == token

    async def active_runs(self) -> list[str]:
        return sorted(text(r) for r in await self.redis.smembers(keys.EXECUTING_RUNS))

    async def pending_calls(self) -> int:
        """Calls waiting for a decision, over the runs not yet finished (one round trip)."""
        run_ids = await self.active_runs()
        if not run_ids:
            return 0
        pipe = self.redis.pipeline(transaction=False)
        for run_id in run_ids:
            pipe.hmget(keys.run_key(run_id), ["status", "undecided"])
        total = 0
        for status, undecided in await pipe.execute():
            if status is not None and text(status) == RunStatus.PAUSED:
                total += int(text(undecided or b"0") or 0)
        return total

    async def forget_active(self, run_id: str) -> None:
        await self.redis.srem(keys.EXECUTING_RUNS, run_id)

    # What the sweeper looks at --------------------------------------------------------------

    async def due(self, run_id: str, since: float) -> None:
        """The run waits on the bot since `since` (the sweeper looks at it once that is old)."""
        await self.redis.zadd(keys.DUE_RUNS, {run_id: since})

    async def not_due(self, run_id: str, since: float) -> bool:
        """Done with the run's due entry, unless something made it due again after `since`."""
        return int(await self._not_due(keys=[keys.DUE_RUNS], args=[run_id, since])) == 1

    async def due_runs(self, before: float, limit: int = 1000) -> list[tuple[str, float]]:
        """(run id, since) of runs waiting on the bot since before `before`, oldest first."""
        found: Any = await self.redis.zrangebyscore(
            keys.DUE_RUNS, "-inf", before, start=0, num=limit, withscores=True
        )
        return [(text(member), float(score)) for member, score in found]

    async def active_overview(
        self,
    ) -> list[tuple[str, str | None, str, bool, bool, bool]]:
        """For each active run, in one pipeline: (run id, status (None: gone), owner, on the
        outbox index, has outbox marks, on the due set)."""
        run_ids = await self.active_runs()
        async with self.redis.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.hmget(keys.run_key(run_id), ["status", "owner"])
                pipe.zscore(keys.OUTBOX_INDEX, run_id)
                pipe.hlen(keys.outbox_key(run_id))
                pipe.zscore(keys.DUE_RUNS, run_id)
            replies = await pipe.execute()
        found = []
        for i, run_id in enumerate(run_ids):
            (status, owner), indexed, marked, due = replies[4 * i : 4 * i + 4]
            status_text = text(status) if status is not None else None
            found.append(
                (
                    run_id,
                    status_text,
                    text(owner or b""),
                    indexed is not None,
                    bool(marked),
                    due is not None,
                )
            )
        return found
