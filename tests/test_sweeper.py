"""The sweeper's cost follows what is due, not what waits (issue #9): with 400 runs waiting for
people, a sweep reads a handful of keys; a run whose job is queued behind busy workers is left
alone, and one whose job was lost is enqueued again. Real redis-server, counted by Redis itself
(`INFO commandstats`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import redis.asyncio as aioredis

from bot.service.running.worker import Worker
from bot.slack.blocks import APPROVE, REVIEW_RERUN
from bot.store import keys
from bot.store.queue import GROUP, STREAM
from bot.store.records import CallRecord, RunRecord, Snapshot
from bot.testing.harness import BotHarness, wait_until
from tests.agents_for_tests import POLICY, Ledger, assistant_message, function_call, ops_agent

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


async def _taken_with_its_job_lost(bot: BotHarness, *, executing: bool) -> str:
    """A run approved and taken by an attempt whose worker is gone, and whose job's entry and
    delivery are gone too: what a failover leaves when the take (confirmed by the replica)
    survived it but the job's write or its delivery did not (or a superseded attempt
    acknowledged it). `executing`: the attempt had begun the approved call. The run's id."""
    runtime = bot.runtime
    assert runtime.worker is not None
    card = await bot.start_and_wait("restart db", user="U1")
    await runtime.worker.stop(runtime._worker_task, 5)  # the resume job stays in the stream
    assert (await bot.click(card, APPROVE, user="U2")).status == 200
    run_id = card.button_value(APPROVE).partition(".")[0]
    client, store = runtime.redis, runtime.service.store
    [(job, fields)] = await wait_until(
        lambda: _jobs_of(client, run_id), what="the resume job in the stream"
    )
    # A worker read the job and took the run; then it was gone.
    await client.xreadgroup(GROUP, "worker-gone", {STREAM: ">"})
    execution = fields[b"execution"].decode()
    taken = await store.take_run(run_id, execution, job.decode(), f"{execution}/gone", resume=True)
    assert taken.kind == "fresh"
    if executing:
        began = await runtime.service.core.journal.begin(
            run_id, "c0", f"{execution}/gone", "restart_service"
        )
        assert began.action == "run"
    # What the promoted primary does not have: the job's delivery, and its entry.
    await client.xack(STREAM, GROUP, job)
    await client.xdel(STREAM, job)
    return run_id


async def _jobs_of(client: aioredis.Redis, run_id: str) -> list[tuple[bytes, dict[bytes, bytes]]]:
    entries: Any = await client.xrange(STREAM)
    return [(i, fields) for i, fields in entries if fields[b"run_id"] == run_id.encode()]


async def _released_on_second_look(bot: BotHarness, run_id: str) -> bytes:
    """Two sweeps (the sweeper is called; `older_than=0` skips the two leases a run waits to
    be looked at): the first only marks the attempt, the second releases the run and enqueues
    its execution again. The new job's id."""
    runtime = bot.runtime
    client, sweeper = runtime.redis, runtime.service.sweeper
    await sweeper.requeue_stalled(older_than=0, reconcile=False)
    assert await _jobs_of(client, run_id) == []  # one look is not enough
    store = runtime.service.store
    run = await store.get_run(run_id)
    assert run is not None and run.status == "resuming" and run.owner.endswith("/gone")
    # A look sooner than the two leases after the mark (here an hour) releases nothing.
    assert await store.release_lost_job(run_id, run.owner, run.job, 3600) == "waiting"
    assert await sweeper.requeue_stalled(older_than=0, reconcile=False) == 1
    [(job, fields)] = await _jobs_of(client, run_id)
    assert fields[b"kind"] == b"resume" and b"/" not in fields[b"execution"]
    return job


@contextlib.asynccontextmanager
async def _a_worker_again(bot: BotHarness) -> AsyncIterator[None]:
    """A worker of the bot's, started again (the test stopped the first)."""
    worker = Worker(bot.runtime.service, bot.runtime.queue, lease_seconds=LONG_LEASE)
    task = asyncio.create_task(worker.run())
    try:
        yield
    finally:
        await worker.stop(task, 5)


LONG_LEASE = 600.0  # no sweep of the bot's own, no lease lapsing, while a test looks


def _restarting_db(redis_url: str, ledger: Ledger) -> BotHarness:
    """A bot whose agent restarts db (a call that needs approval) and says so; its leases
    never lapse and it sweeps nothing of its own while a test looks."""
    agent, _ = ops_agent(
        [
            [function_call("restart_service", {"service": "db"}, call_id="c0")],
            [assistant_message("restarted db")],
        ],
        ledger,
    )
    return BotHarness(redis_url, agent, POLICY, settings={"job_lease_seconds": LONG_LEASE})


async def test_a_run_whose_job_a_failover_lost_is_taken_over_and_finishes(redis_url: str) -> None:
    """The failover burst's run left `resuming attempts=1` for good: taken by an attempt
    whose job no delivery held any more, so no lease watched it and no worker would take it
    over. The sweeper, seeing it so on two looks, releases it; the next delivery takes it
    over as a retry, the approved call runs once and the run finishes."""
    ledger = Ledger()
    async with _restarting_db(redis_url, ledger) as bot:
        run_id = await _taken_with_its_job_lost(bot, executing=False)
        job = await _released_on_second_look(bot, run_id)
        async with _a_worker_again(bot):
            await bot.wait_for_status("finished", timeout=30)
        run = await bot.runtime.redis.hmget(keys.run_key(run_id), ["attempts", "job"])
        assert run == [b"2", job]  # a retry, held by the new job (its lease watches it)
    assert ledger.executed == [("restart_service", {"service": "db"})]


async def test_a_lost_job_whose_call_was_executing_goes_to_a_person(redis_url: str) -> None:
    """The same, but the gone attempt had begun the approved call: the takeover does not run
    it again (it may have run); a person is asked, Mark done / Run again."""
    ledger = Ledger()
    async with _restarting_db(redis_url, ledger) as bot:
        run_id = await _taken_with_its_job_lost(bot, executing=True)
        await _released_on_second_look(bot, run_id)
        async with _a_worker_again(bot):
            [review] = await wait_until(
                lambda: [
                    m for m in bot.slack_api.messages.values() if REVIEW_RERUN in m.action_ids()
                ],
                what="a review request",
            )
        assert "`restart_service` (call `c0`) was executing" in review.all_text()
    assert ledger.executed == []
