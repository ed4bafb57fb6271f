"""What an idle bot looks at, and what each look costs. An idle worker's read of the job
stream waits long for a job (each read and its wake-up cost an idle bot CPU), and a stop does
not wait that out: the read blocked in Redis ends at once (CLIENT UNBLOCK: a job is delivered
to it before, and run, or not at all). The timer loop's look is one round trip."""

from __future__ import annotations

import redis as sync_redis

from benchmarks.roundtrips import counting
from bot.service.running import worker as worker_module
from bot.store.keys import TIMERS
from bot.testing.harness import BotHarness, wait_until
from tests.agents_for_tests import POLICY, Ledger, assistant_message, ops_agent


def _blocked(looker: sync_redis.Redis) -> list[str]:
    """The connections Redis holds in a blocked XREADGROUP."""
    return [c["id"] for c in looker.client_list() if c["cmd"] == "xreadgroup" and "b" in c["flags"]]


async def test_a_stop_ends_the_idle_workers_blocked_read_at_once(
    redis_url: str, monkeypatch: object
) -> None:
    # A read that would wait an hour for a job: only the stop can end it here.
    monkeypatch.setattr(worker_module, "BLOCK_MS", 3_600_000)  # type: ignore[attr-defined]
    looker = sync_redis.Redis.from_url(redis_url)  # (synchronous: a connection of its own)
    agent, _ = ops_agent([[assistant_message("fine")]], Ledger())
    try:
        async with BotHarness(redis_url, agent, POLICY) as bot:
            assert bot.runtime.worker is not None
            worker, task = bot.runtime.worker, bot.runtime._worker_task
            assert task is not None
            await wait_until(lambda: _blocked(looker), what="the worker's read blocked in Redis")
            await worker.stop(task, timeout=3600)
            assert task.done() and not task.cancelled()  # it ended by itself, not waited out
            assert not _blocked(looker)
    finally:
        looker.close()


async def test_an_idle_timer_loops_look_is_one_round_trip(redis_url: str) -> None:
    """The timer loop's look each second (claim what is due, and when the earliest timer
    left is due) is one round trip, not two: a timer set for later, nothing due."""
    agent, _ = ops_agent([[assistant_message("fine")]], Ledger())
    settings = {"timers_poll_seconds": 0.05}
    with counting() as counter:
        counter.callers = True  # (names say which of the bot's functions sent them)
        async with BotHarness(redis_url, agent, POLICY, settings=settings) as bot:
            await bot.runtime.redis.zadd(TIMERS, {"0123456789abcdef.later": 4e12})
            looks: list[int] = []

            def counted() -> None:
                looks.append(sum(n for name, n in counter.upkeep.items() if "Timers." in name))

            bot.runtime.service.timers.on_pass.append(counted)
            await wait_until(lambda: len(looks) >= 3, what="three passes of the timer loop")
            assert looks[2] - looks[1] == 1, counter.upkeep
