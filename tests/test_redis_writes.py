"""The store's connections write small commands without redis-py's per-write timeout (a task
per command on Python 3.11), and a stalled server still fails every command in time."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as redis

from bot.store.connection import (
    TIMED_WRITE_BYTES,
    EmbeddedRedis,
    UntimedSmallWrites,
    connect,
    untimed_small_writes,
)
from tests.test_stalls import stalled  # SIGSTOP: connections stay open, nothing is read


@contextmanager
def tasks_made() -> Iterator[list[Any]]:
    """Every task the running loop makes meanwhile (redis-py's `wait_for` makes one)."""
    loop = asyncio.get_running_loop()
    made: list[Any] = []

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        made.append(coro)
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.set_task_factory(factory)
    try:
        yield made
    finally:
        loop.set_task_factory(None)


def client(url: str, timeout: float) -> redis.Redis:
    pool = redis.BlockingConnectionPool.from_url(url, max_connections=2, socket_timeout=timeout)
    return redis.Redis(connection_pool=untimed_small_writes(pool))


async def test_the_store_writes_a_small_command_with_no_task_of_its_own(redis_url: str) -> None:
    store = connect(redis_url, max_connections=4)
    plain = redis.Redis.from_url(redis_url, socket_timeout=30)
    try:
        assert issubclass(store.connection_pool.connection_class, UntimedSmallWrites)
        for each in (store, plain):
            await each.set("writes:k", "v")  # connected
        with tasks_made() as made:
            for _ in range(20):
                assert await store.get("writes:k") == b"v"
            async with store.pipeline(transaction=False) as pipe:
                pipe.get("writes:k").get("writes:k")
                assert await pipe.execute() == [b"v", b"v"]
        assert made == []
        with tasks_made() as made:  # redis-py as it comes: a task for every write
            for _ in range(20):
                await plain.get("writes:k")
        assert len(made) == 20
    finally:
        await store.aclose()
        await plain.aclose()


async def test_a_stalled_server_still_fails_a_small_command_in_time(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / "redis")
    await server.start()
    store = client(server.url, timeout=0.5)
    try:
        await store.set("k", "v")
        with stalled(server), pytest.raises(redis.TimeoutError):
            await asyncio.wait_for(store.get("k"), 10)
        assert await store.get("k") == b"v"  # reconnected once the server answers again
    finally:
        await store.aclose()
        server.stop()


async def test_a_large_write_to_a_stalled_server_keeps_its_timeout(tmp_path: Path) -> None:
    """A write larger than asyncio's buffer waits on the socket: with no timeout it would wait
    for as long as the server is stalled."""
    server = EmbeddedRedis(tmp_path / "redis")
    await server.start()
    store = client(server.url, timeout=0.5)
    big = b"x" * (64 * 1024 * 1024)  # past the kernel's socket buffers too
    assert len(big) > TIMED_WRITE_BYTES
    try:
        await store.ping()
        with stalled(server), pytest.raises(redis.TimeoutError):
            await asyncio.wait_for(store.set("big", big), 20)
    finally:
        await store.aclose()
        server.stop()
