"""The sweeper's cost follows what is due, not what waits (issue #9): with 400 runs waiting for
people, a sweep reads a handful of keys; a run whose job is queued behind busy workers is left
alone, and one whose job was lost is enqueued again. Real redis-server, counted by Redis itself
(`INFO commandstats`)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis.asyncio as aioredis

from bot.store import keys
from bot.store.queue import STREAM
from bot.store.records import CallRecord, RunRecord, Snapshot
from bot.testing.harness import BotHarness
from tests.agents_for_tests import POLICY, Ledger, assistant_message, ops_agent

WAITING = 400


async def _commands(client: aioredis.Redis) -> dict[str, int]:
    stats: Any = await client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def _run(stamp: str, owner: str) -> RunRecord:
    return RunRecord(
        run_id=keys.new_run_id(), team_id="T0TEST", user_id="U1", channel_id="C1",
        agent_name="ops", task="t", status="running", owner=owner, message_ts="1.0",
        created_at=stamp, updated_at=stamp,
    )  # fmt: skip


async def test_a_sweep_reads_what_is_due_and_leaves_queued_jobs_alone(redis_url: str) -> None:
    agent, _ = ops_agent([[assistant_message("done")]], Ledger())
    async with BotHarness(redis_url, agent, POLICY) as bot:
        runtime = bot.runtime
        assert runtime.worker is not None
        await runtime.worker.stop(runtime._worker_task, 5)  # every worker busy: jobs wait
        await runtime.projector.stop(5)  # these runs have no messages to show
        assert runtime._projector_task is not None
        runtime._projector_task.cancel()
        service, store = runtime.service, runtime.service.store
        old = f"{time.time() - 120:.3f}"

        # 400 runs paused on a call each, waiting for people (their pauses fully saved).
        async def paused(i: int) -> None:
            run = _run(old, f"exec{i}")
            await store.create_run(run)
            await store.take(run.run_id, run.owner, f"1-{i}", run.owner + "/w")
            call = CallRecord(
                approval_id=keys.new_approval_id(run.run_id), run_id=run.run_id, index=0,
                call_id="c1", agent="ops", tool="delete_logs", kind="function",
                sticky="ops::delete_logs", arguments='{"path": "/"}',
            )  # fmt: skip
            since = float(old)
            await store.save_pause(
                run.run_id, run.owner + "/w", Snapshot(b"x", "0", "f"), [call], since
            )
            await store.not_due(run.run_id, since)  # its automatic decisions were applied

        for first in range(0, WAITING, 50):  # 50 at a time: their round trips overlap
            await asyncio.gather(*(paused(i) for i in range(first, first + 50)))
        # One run whose job waits in the stream for a free worker, one whose job was lost.
        queued, lost = _run(old, "queued-exec"), _run(old, "lost-exec")
        for run in (queued, lost):
            await store.create_run(run)
        await runtime.queue.enqueue("start", queued.run_id, queued.owner)

        client = aioredis.Redis.from_url(redis_url)
        try:
            jobs = await client.xlen(STREAM)
            await client.config_resetstat()
            touched = await service.requeue_stalled(older_than=60, reconcile=False)
            counted = await _commands(client)
            assert touched == 1  # the lost run only
            entries = await client.xrange(STREAM, min="-", max="+")
            assert await client.xlen(STREAM) == jobs + 1
            assert entries[-1][1][b"run_id"] == lost.run_id.encode()
            reads = sum(counted.get(c, 0) for c in ("hgetall", "hget", "hmget", "smembers"))
            # Layout 1's sweep: about 3 reads per waiting run (1,200 here).
            assert reads <= 4, counted
            # (layout 3, #17: one GET more per due run read, its task key)
            assert sum(counted.values()) <= 24, counted
            # The queued run stays due: looked at again next time, still not re-enqueued.
            assert await client.zscore(keys.DUE_RUNS, queued.run_id) is not None
            # Now both jobs wait for a worker: nothing is enqueued twice.
            assert await service.requeue_stalled(older_than=0, reconcile=False) == 0
            assert await client.xlen(STREAM) == jobs + 1
            # The full pass (first sweep, then every 20th) reads every active run, in one
            # pipeline: it is what keeps a crash between a transition and its index harmless.
            await client.config_resetstat()
            await service.requeue_stalled(older_than=3600, reconcile=True)
            assert (await _commands(client)).get("hmget", 0) >= WAITING
        finally:
            await client.aclose()
