"""The work queue and the transition scripts against a real redis-server: leases, take-overs,
malformed messages, and scripts repeated after a lost reply."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from bot.store import keys
from bot.store.queue import GROUP, STREAM, Acknowledgement, Job, JobQueue
from bot.store.records import RunRecord
from bot.store.runs import AlreadyEnded, Ended, NotOwner, RunMissing, RunStore
from bot.testing.harness import BotHarness, wait_until
from tests.agents_for_tests import (
    POLICY,
    Ledger,
    assistant_message,
    function_call,
    ops_agent,
    slow_check,
)


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    c = aioredis.Redis.from_url(redis_url)
    yield c
    await c.aclose()


async def read_one(client: aioredis.Redis, kind: str, consumer: str) -> tuple[JobQueue, Job]:
    """A queue whose leases last a millisecond, and a job of `kind` on it read by `consumer`."""
    queue = JobQueue(client, lease_seconds=0.001)
    await queue.ensure_group()
    await queue.enqueue(kind, keys.new_run_id(), "exec")
    [job] = await queue.read(consumer, 1, block_ms=100)
    return queue, job


async def taken_over(queue: JobQueue, consumer: str) -> Job:
    """The job `consumer` takes over once its lease (a millisecond) lapsed."""
    [job] = await wait_until(lambda: queue.reclaim(consumer, 1), what="the job taken over")
    return job  # type: ignore[no-any-return]


async def only_the_later_holds(
    client: aioredis.Redis, queue: JobQueue, earlier: tuple[str, Job], later: tuple[str, Job]
) -> None:
    """The superseded delivery (consumer, job) may neither renew nor acknowledge the job; the
    later one may do both."""
    assert await queue.renew(*earlier) is False  # it must not steal the job back
    assert await queue.ack(*earlier) is False  # nor acknowledge what the later one needs
    assert (await client.xpending(STREAM, GROUP))["pending"] == 1
    assert await queue.renew(*later) is True
    assert await queue.ack(*later) is True
    assert (await client.xpending(STREAM, GROUP))["pending"] == 0


async def test_a_worker_that_lost_its_job_neither_renews_nor_acks_it(
    client: aioredis.Redis,
) -> None:
    queue, job = await read_one(client, "start", "A")
    # A stalls; B takes the job over once the lease lapsed.
    taken = await taken_over(queue, "B")
    assert taken.message_id == job.message_id
    await only_the_later_holds(client, queue, ("A", job), ("B", taken))
    await queue.trim()
    assert await client.xlen(STREAM) == 0  # done with: trimmed


async def test_a_job_its_own_worker_took_over_is_acknowledged_by_the_later_attempt_alone(
    client: aioredis.Redis,
) -> None:
    """A's first attempt stalls past the lease (as in a failover) and A takes its own job over:
    the superseded attempt, which ends without the run (another attempt owns it), must neither
    renew nor acknowledge the job the later attempt still needs. (The failover burst left runs
    `resuming`, taken, with no job left to retry them: the first attempt had acknowledged it.)"""
    queue, first = await read_one(client, "resume", "A")
    again = await taken_over(queue, "A")
    assert again.message_id == first.message_id
    assert (first.deliveries, again.deliveries) == (1, 2)
    await only_the_later_holds(client, queue, ("A", first), ("A", again))


async def test_a_renewal_that_follows_the_runs_end_finds_the_job_done_not_lost(
    client: aioredis.Redis,
) -> None:
    """A run's end acknowledges its job with its own writes; a lease renewal sent meanwhile
    finds the job no longer pending: done, not lost to another worker (which the worker
    would report as a lost lease)."""
    queue, job = await read_one(client, "resume", "A")
    async with client.pipeline(transaction=False) as pipe:
        Acknowledgement(job).send_in(pipe)
        await pipe.execute()
    assert await queue.renew("A", job) is None
    assert (await client.xpending(STREAM, GROUP))["pending"] == 0


async def test_a_malformed_message_does_not_stop_the_worker(redis_url: str) -> None:
    ledger = Ledger()
    agent, _ = ops_agent([[assistant_message("fine")]], ledger)
    async with BotHarness(redis_url, agent, POLICY) as bot:
        await bot.runtime.queue.redis.xadd(STREAM, {"garbage": "1"})
        await bot.slack.command("hello", user="U1", channel="C1")
        await bot.wait_for_status("finished")
        await bot.idle()


async def test_transitions_repeated_after_a_lost_reply_answer_the_same(
    client: aioredis.Redis,
) -> None:
    store = RunStore(client, retention_seconds=600)
    run = RunRecord(
        run_id=keys.new_run_id(), team_id="T", user_id="U1", channel_id="C1",
        agent_name="ops", task="t", owner="exec",
    )  # fmt: skip
    await store.create_run(run)
    assert await store.take(run.run_id, "exec", "1-0", "exec/a") == ("fresh", 1)
    assert await store.take(run.run_id, "exec", "1-0", "exec/b") == ("retry", 2)
    assert await store.take(run.run_id, "exec", "2-0", "exec/c") == ("skip", 0)  # a duplicate
    assert await store.to_review(run.run_id, "exec/b", "rv", "why", "start")
    assert await store.to_review(run.run_id, "exec/b", "rv", "why", "start")  # repeated
    first = await store.resolve_review(
        run.run_id, "rv", action="done", execution="exec2", user="U2", status="running"
    )
    again = await store.resolve_review(
        run.run_id, "rv", action="done", execution="exec2", user="U2", status="running"
    )
    other = await store.resolve_review(
        run.run_id, "rv", action="done", execution="exec3", user="U3", status="running"
    )
    assert first == [] and again == [] and other is None
    assert await store.take(run.run_id, "exec2", "3-0", "exec2/a") == ("fresh", 1)
    with pytest.raises(NotOwner):  # not this attempt's run: refused, nothing written
        await store.finish(run.run_id, "exec2/z", status="failed", text="y", drop_snapshot=True)
    assert await store.finish(
        run.run_id, "exec2/a", status="finished", text="x", drop_snapshot=True
    ) == Ended("running")
    assert await store.finish(
        run.run_id, "exec2/a", status="finished", text="x", drop_snapshot=True
    ) == Ended("finished")  # the same request again: answered as done
    assert await store.finish(
        run.run_id, "exec2/z", status="failed", text="y", drop_snapshot=True
    ) == AlreadyEnded("finished")
    assert (
        await store.finish(
            keys.new_run_id(), "exec2/a", status="failed", text="y", drop_snapshot=True
        )
        == RunMissing()
    )
    final = await store.get_run(run.run_id)
    assert final is not None and (final.status, final.output) == ("finished", "x")


async def test_the_history_is_kept_by_the_end_of_the_run_and_by_its_owner_only(
    client: aioredis.Redis,
) -> None:
    """A finished turn's conversation is written by finish.lua with the end (one round trip):
    an execution that no longer owns the run writes neither."""
    store = RunStore(client, retention_seconds=600)
    run = RunRecord(
        run_id=keys.new_run_id(), team_id="T", user_id="U1", channel_id="C1",
        agent_name="ops", task="t", owner="exec",
    )  # fmt: skip
    await store.create_run(run)
    assert await store.take(run.run_id, "exec", "1-0", "exec/a") == ("fresh", 1)
    history = keys.history_key(run.run_id)
    with pytest.raises(NotOwner):
        await store.finish(
            run.run_id, "exec/stale", status="finished", text="x", drop_snapshot=True,
            history=b"stale turn",
        )  # fmt: skip
    assert await client.get(history) is None
    assert await store.finish(
        run.run_id, "exec/a", status="finished", text="x", drop_snapshot=True,
        history=b"\x78\x9cpacked",
    ) == Ended("running")  # fmt: skip
    assert await client.get(history) == b"\x78\x9cpacked"
    assert 0 < await client.ttl(history) <= 600


def test_every_key_of_a_run_is_in_one_cluster_slot() -> None:
    """Every transition script touches only keys of one run: on Redis Cluster they must hash to
    one slot, which the shared `{run id}` tag guarantees."""
    from redis.crc import key_slot

    run_id = keys.new_run_id()
    approval_id = keys.new_approval_id(run_id)
    run_keys = [
        keys.run_key(run_id), keys.state_key(run_id), keys.snapshot_key(run_id),
        keys.journal_key(run_id), keys.call_key(approval_id), keys.votes_key(approval_id),
        keys.comments_key(approval_id),
    ]  # fmt: skip
    assert len({key_slot(k.encode()) for k in run_keys}) == 1
    other = keys.run_key(keys.new_run_id())
    assert all(f"{{{run_id}}}" in k for k in run_keys) and f"{{{run_id}}}" not in other


async def test_a_job_running_past_its_lease_stays_its_workers(
    redis_url: str, client: aioredis.Redis
) -> None:
    """The worker renews the lease of each job in hand while it runs (one loop for them all,
    #32): a tool that runs for several leases is never taken over by the worker's own look for
    lapsed jobs (which it makes every third of the lease), so it runs once, in one attempt."""
    ledger = Ledger()
    started, release = asyncio.Event(), asyncio.Event()
    agent, _ = ops_agent(
        [[function_call("slow_check", {"host": "db-1"}, call_id="c1")],
         [assistant_message("db-1 is fine.")]],
        ledger, extra_tools=[slow_check(ledger, started, release)],
    )  # fmt: skip
    async with BotHarness(redis_url, agent, POLICY, settings={"job_lease_seconds": 0.6}) as bot:
        await bot.slack.command("check db-1", user="U1", channel="C1")
        await asyncio.wait_for(started.wait(), 30)
        seen: list[int] = []  # the job's idle time (ms), each time it went down: a renewal

        async def renewed_three_times() -> bool:
            [entry] = await client.xpending_range(STREAM, GROUP, "-", "+", 1)
            assert entry["times_delivered"] == 1, entry  # never taken over
            idle = int(entry["time_since_delivered"])
            if not seen or idle < seen[-1]:
                seen.append(idle)
            else:
                seen[-1] = idle
            return len(seen) > 3

        await wait_until(renewed_three_times, what="three renewals of the job's lease")
        release.set()
        await bot.wait_for_status("finished")
    assert ledger.names() == ["slow_check"]
    [run] = await client.keys(keys.run_key("*"))
    assert await client.hget(run, "attempts") == b"1"
