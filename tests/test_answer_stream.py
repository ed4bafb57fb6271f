"""A turn's answer as the model writes it (`bot.service.running.streaming.AnswerStream`, #32):
an answer finished before FIRST_SHOW is shown once, whole, by the run's end, and costs no
writer task; one still being written then is written to the run's store, as it grows."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.service.running import streaming
from bot.service.running.streaming import AnswerStream
from bot.store.runs import RunStore
from bot.testing.harness import wait_until


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RunStore]:
    client = aioredis.Redis.from_url(redis_url)
    yield RunStore(client, retention_seconds=600)
    await client.aclose()


async def test_an_answer_done_before_it_is_shown_starts_no_task(store: RunStore) -> None:
    """The model's texts, then the execution's end, within FIRST_SHOW: nothing is written and
    no writer task is started (one was started, slept and was cancelled before this)."""
    names: list[str] = []
    loop = asyncio.get_running_loop()

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        names.append(getattr(getattr(coro, "cr_code", None), "co_qualname", "?"))
        return asyncio.Task(coro, loop=loop, **kwargs)

    stream = AnswerStream(store.turns, "r1", 1)
    loop.set_task_factory(factory)
    try:
        for text in ("", "do", "done"):
            await stream(text)
        await stream.close()
    finally:
        loop.set_task_factory(None)
    assert "AnswerStream._write" not in names
    assert await store.turns.partial("r1") is None


async def test_an_answer_still_written_is_written_as_it_grows(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Still being written after FIRST_SHOW: the text so far is written, then each later
    text."""
    monkeypatch.setattr(streaming, "FIRST_SHOW", 0.05)
    monkeypatch.setattr(streaming, "WRITE_EVERY", 0.05)
    stream = AnswerStream(store.turns, "r2", 2)
    await stream("")  # a response that only called tools: no message for it
    await stream("the deploy")
    assert await wait_until(lambda: store.turns.partial("r2"), what="the first words") == (
        2,
        "the deploy",
    )
    await stream("the deploy went well")
    await wait_until(
        lambda: _is(store, "r2", (2, "the deploy went well")), what="the answer so far"
    )
    await stream.close()
    assert await store.turns.partial("r2") == (2, "the deploy went well")


async def _is(store: RunStore, run_id: str, expected: tuple[int, str]) -> bool:
    return await store.turns.partial(run_id) == expected
