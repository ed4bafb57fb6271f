"""A task looping on Redis calls stops when told, on Python 3.11 too (see `bot.stopping`)."""

from __future__ import annotations

import asyncio
import random

import redis.asyncio as aioredis

from bot.stopping import cancel_and_wait


async def _pinging(client: aioredis.Redis) -> None:
    while True:
        await asyncio.sleep(0)
        await client.ping()


async def test_a_loop_of_redis_calls_stops_however_the_cancellation_lands(redis_url: str) -> None:
    """Cancelled at random moments of its calls, each of 40 loops stops (on 3.11 one plain
    cancellation in three is lost here: the loop would run on, and an `await` of it hang)."""
    client = aioredis.Redis.from_url(redis_url)
    lost = 0
    try:
        for _ in range(40):
            task = asyncio.create_task(_pinging(client))
            await asyncio.sleep(random.random() * 0.002)
            task.cancel()
            await asyncio.wait({task}, timeout=0.02)
            lost += not task.done()
            await asyncio.wait_for(cancel_and_wait(task), timeout=10)
            assert task.cancelled()
    finally:
        await client.aclose()
    print(f"plain cancellations lost: {lost} of 40")


async def test_cancel_and_wait_gives_back_a_finished_tasks_failure_retrieved() -> None:
    async def fails() -> None:
        raise ValueError("boom")

    task = asyncio.create_task(fails())
    await asyncio.sleep(0)
    await cancel_and_wait(task)
    assert isinstance(task.exception(), ValueError)
    await cancel_and_wait(None)  # nothing to stop
