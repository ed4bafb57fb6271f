"""A paused run's snapshot stores long arguments about once (issue #7 item 10): the RunState JSON
repeats a call's arguments up to ten times, and zlib's 32 KB window cannot see repeats of an
argument longer than that. Signed HTTP, real Redis, the Slack stand-in."""

from __future__ import annotations

import random
import string

import redis.asyncio as aioredis

from bot.slack.blocks import APPROVE
from bot.store import keys
from bot.testing.harness import BotHarness
from tests.agents_for_tests import POLICY, Ledger, assistant_message, function_call, ops_agent
from tests.test_security import audited


def prose(chars: int) -> str:
    """Text that compresses like prose does (not like a repeated phrase)."""
    rnd = random.Random(7)
    words = (
        "".join(rnd.choice(string.ascii_lowercase) for _ in range(rnd.randint(2, 9)))
        for _ in range(chars // 3)
    )
    return " ".join(words)[:chars]


async def test_long_arguments_cost_the_snapshot_about_once_and_still_run_whole(
    redis_url: str,
) -> None:
    path = prose(40_000)
    ledger = Ledger()
    agent, _ = ops_agent(
        [[function_call("delete_logs", {"path": path}, call_id="c1")], [assistant_message("ok")]],
        ledger,
    )
    async with BotHarness(redis_url, agent, POLICY) as bot:
        approval = await bot.start_and_wait("clean the logs", user="U1")
        run_id = keys.run_of(approval.button_value(APPROVE))
        assert run_id is not None
        client = aioredis.Redis.from_url(redis_url)
        try:
            snapshot = await client.memory_usage(keys.state_key(run_id), samples=0) or 0
            total = 0
            async for key in client.scan_iter(match=f"ab:{{{run_id}}}*"):
                total += await client.memory_usage(key, samples=0) or 0
        finally:
            await client.aclose()
        # With zlib: snapshot 328 KB, every key of the run 373 KB (the JSON holds the 40 KB
        # argument ten times).
        assert snapshot < 40_000, snapshot
        assert total < 50_000, total
        await bot.click(approval, APPROVE, user="U2")
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await audited(bot)
        assert audit["decided"] == ["U2"]
    assert ledger.executed == [("delete_logs", {"path": path})]  # resumed from it, whole
