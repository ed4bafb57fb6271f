"""Shared fixtures: one real redis-server for the session (flushed before each test)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from agents import set_tracing_disabled

from bot.store.connection import EmbeddedRedis

set_tracing_disabled(True)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(Path(tmp_path_factory.mktemp("redis")))
    asyncio.run(server.start())
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: EmbeddedRedis) -> str:
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    return redis_server.url
