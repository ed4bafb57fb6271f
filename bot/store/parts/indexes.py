"""The indexes over runs that the sweeper, the reconciler, the metrics and the lists read: the
active runs, the runs due for the bot (`DUE_RUNS`), the unfinished runs of each channel
(`channel_runs_key`), and the deliveries already seen.

A channel's index is written where the active set is (the run's creation, its end, the
sweeper), in the pipeline after the run's own transition: its key is in no run's slot, so no run
script may touch it (Redis Cluster). It is added before the active set when a run starts and
dropped with it when it ends; an entry left behind by a stopped process names an ended or gone
run, which readers skip (and drop). Runs started before the index existed are put on it by
`index_channels` (every start, and the reconciler's passes)."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

import redis.asyncio as redis

from bot.store import keys
from bot.store.records import ENDED, RunStatus
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

    async def forget_active(self, run_id: str, channel: str = "") -> None:
        """The run is no longer active (and off its `channel`'s index, when known)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            if channel:
                pipe.zrem(keys.channel_runs_key(channel), run_id)
            pipe.srem(keys.EXECUTING_RUNS, run_id)
            await pipe.execute()

    # The unfinished runs of each channel (what lists and App Homes read) ---------------------

    async def index_channels(self) -> int:
        """Put every unfinished active run on its channel's index and take ended ones off;
        then mark the index complete (`CHANNEL_RUNS_INDEXED`). Returns the runs added: those
        started before the index existed, or by a process of an older version."""
        run_ids = await self.active_runs()
        async with self.redis.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.hmget(keys.run_key(run_id), ["status", "channel_id", "created_at"])
            found = await pipe.execute()
        added: list[int] = []  # which replies are the adds'
        async with self.redis.pipeline(transaction=False) as pipe:
            for run_id, (status, channel, created) in zip(run_ids, found, strict=True):
                if status is None or not channel:
                    continue
                key = keys.channel_runs_key(text(channel))
                if text(status) in ENDED:
                    pipe.zrem(key, run_id)
                else:
                    added.append(len(pipe))
                    pipe.zadd(key, {run_id: float(text(created or b"0") or 0)}, nx=True)
            pipe.set(keys.CHANNEL_RUNS_INDEXED, "1")
            replies = await pipe.execute()
        return sum(int(replies[i]) for i in added)

    async def channel_sizes(self, channels: Sequence[str]) -> dict[str, int] | None:
        """How many runs each channel's index holds (one round trip); None while the index is
        not complete yet (`index_channels` has not run since the upgrade)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.exists(keys.CHANNEL_RUNS_INDEXED)
            for channel in channels:
                pipe.zcard(keys.channel_runs_key(channel))
            indexed, *sizes = await pipe.execute()
        if not indexed:
            return None
        return {channel: int(n) for channel, n in zip(channels, sizes, strict=True)}

    async def channel_runs(
        self, oldest: Sequence[str], newest: Sequence[str], limit: int
    ) -> list[tuple[str, str]]:
        """(channel, run id) on these channels' indexes (one round trip): the `limit` oldest of
        each of `oldest`, the `limit` newest of each of `newest`, each entry once."""
        channels = [*oldest, *newest]
        async with self.redis.pipeline(transaction=False) as pipe:
            for channel in oldest:
                pipe.zrange(keys.channel_runs_key(channel), 0, limit - 1)
            for channel in newest:
                pipe.zrange(keys.channel_runs_key(channel), -limit, -1)
            replies = await pipe.execute()
        found = (
            (channel, text(r)) for channel, reply in zip(channels, replies, strict=True)
            for r in reply
        )  # fmt: skip
        return list(dict.fromkeys(found))

    async def drop_from_channels(self, entries: Sequence[tuple[str, str]]) -> None:
        """Take (channel, run id) entries of ended or gone runs off their channels' indexes."""
        if not entries:
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            for channel, run_id in entries:
                pipe.zrem(keys.channel_runs_key(channel), run_id)
            await pipe.execute()

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
