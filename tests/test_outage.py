"""A Redis outage is an expected condition (#17, item 2): one WARNING when it starts, one INFO
when it ends, `approval_bot_redis_up` and the time down in the metrics, the clicker told as
before, and no traceback from any part of the bot (listeners, worker, projector, timers).
The whole bot in-process on a redis-server of the test's own, stopped and started again."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from bot import metrics
from bot.slack.blocks import APPROVE
from bot.store.connection import EmbeddedRedis
from bot.testing.harness import BotHarness, wait_until
from bot.testing.slack_api import FakeSlackAPI
from tests.agents_for_tests import POLICY, Ledger, delete_then_say, ops_agent


def sample(name: str) -> float:
    value = metrics.REGISTRY.get_sample_value(name)
    assert value is not None, name
    return value


async def test_a_redis_outage_is_one_warning_one_info_and_a_metric(
    slack_api: FakeSlackAPI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(delete_then_say("/a", "Deleted."), ledger)
    data = tmp_path / "redis"
    own = EmbeddedRedis(data)
    await own.start()
    down_before = sample("approval_bot_redis_down_seconds_total")
    try:
        async with BotHarness(own.url, agent, POLICY, slack=slack_api) as bot:
            card = await bot.start_and_wait("clean", user="U1")
            assert sample("approval_bot_redis_up") == 1
            caplog.clear()
            caplog.set_level(logging.INFO)
            own.stop()  # SIGTERM: Redis writes its AOF and goes away
            for _ in range(3):
                sent = await bot.click(card, APPROVE, user="U2")
                assert sent.status == 200
            await wait_until(
                lambda: len([t for t in slack_api.ephemeral_to("U2") if "Try again" in t]) >= 3,
                what="each clicker told",
            )
            assert sample("approval_bot_redis_up") == 0
            # The worker, projector, timers and App Home loops poll Redis meanwhile.
            await asyncio.sleep(1.5)
            again = EmbeddedRedis(data, port=own.port)
            await again.start()
            own = again
            await wait_until(lambda: sample("approval_bot_redis_up") == 1, what="Redis back")
            await bot.click(card, APPROVE, user="U2")
            await bot.wait_for_status("finished", timeout=30)
            await bot.idle()
    finally:
        own.stop()
    assert ledger.names() == ["delete_logs"]
    assert sample("approval_bot_redis_down_seconds_total") - down_before >= 1.0
    records = [r for r in caplog.records if r.name.startswith("bot")]
    tracebacks = [r.getMessage() for r in records if r.exc_info or r.levelno >= logging.ERROR]
    assert not tracebacks, tracebacks
    started = [r for r in records if "Redis is unreachable" in r.getMessage()]
    ended = [r for r in records if "Redis is reachable again" in r.getMessage()]
    assert [r.levelno for r in started] == [logging.WARNING], caplog.text
    assert [r.levelno for r in ended] == [logging.INFO], caplog.text
