"""`/agent` commands, event deliveries and runs left behind by a dead process."""

from __future__ import annotations

import json

import redis.asyncio as aioredis

from bot.store import keys
from bot.store.records import RunRecord
from bot.testing.harness import BotHarness, wait_until
from tests.agents_for_tests import POLICY, Ledger, assistant_message, function_call, ops_agent


def agents(ledger: Ledger) -> dict[str, object]:
    ops, _ = ops_agent([[assistant_message("ops here")]], ledger, name="ops")
    db, _ = ops_agent([[assistant_message("db here")]], ledger, name="db")
    return {"ops": ops, "db": db}


async def test_help_lists_usage_and_agents(redis_url: str) -> None:
    async with BotHarness(redis_url, agents(Ledger()), POLICY) as bot:
        for text in ("help", "", "run"):
            sent = await bot.slack.command(text, user="U1", channel="C1")
            body = sent.json()
            assert body["response_type"] == "ephemeral"
            assert "/agent run <agent> <task>" in body["text"] and "`db`" in body["text"]
        assert bot.slack_api.top_level() == []


async def test_named_agent_and_default_agent(redis_url: str) -> None:
    async with BotHarness(redis_url, agents(Ledger()), POLICY) as bot:
        await bot.slack.command("run db check replication", user="U1", channel="C1")
        await bot.wait_for_status("finished")
        await bot.idle()
        assert "*db*" in bot.run_message().all_text()
        assert "check replication" in bot.run_message().all_text()
        assert "db here" in [m.text for m in bot.run_thread()]
        await bot.slack.command("what is up", user="U1", channel="C1")
        await wait_until(lambda: len(bot.slack_api.top_level()) == 2, what="second run")
        await bot.wait_for_status("finished")
        await bot.idle()
        assert "*ops*" in bot.run_message().all_text()


async def test_refusals_are_private_and_explained(redis_url: str) -> None:
    policy = POLICY.replace('starters: ["*"]', "starters: [U1]")
    async with BotHarness(redis_url, agents(Ledger()), policy) as bot:
        unlisted = (await bot.slack.command("hi", user="U1", channel="C999")).json()
        stranger = (await bot.slack.command("hi", user="U7", channel="C1")).json()
        unknown = (await bot.slack.command("run nope hi", user="U1", channel="C1")).json()
        assert "not enabled in this channel" in unlisted["text"]
        assert "not among the people allowed to start" in stranger["text"]
        assert "no agent named `nope`" in unknown["text"] and "`ops`, `db`" in unknown["text"]
        assert all(r["response_type"] == "ephemeral" for r in (unlisted, stranger, unknown))
        await bot.idle()
        assert bot.slack_api.top_level() == []


async def test_duplicate_event_deliveries_are_ignored(redis_url: str) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(
        [[function_call("delete_logs", {"path": "/a"}, call_id="c1")], [assistant_message("x")]],
        ledger,
    )
    async with BotHarness(redis_url, agent, POLICY) as bot:
        await bot.slack.command("clean", user="U1", channel="C1")
        [approval] = await bot.wait_for_approvals(1)
        for _ in range(3):  # Slack retries with the same event_id
            sent = await bot.slack.thread_reply(
                "looks risky", user="U3", channel="C1", thread_ts=approval.ts, event_id="Ev1"
            )
            assert sent.status == 200
        await bot.idle()
        client = aioredis.Redis.from_url(redis_url)
        comments = await client.lrange(
            keys.comments_key(approval.button_value("approval_approve")), 0, -1
        )
        await client.aclose()
        assert [json.loads(c)["text"] for c in comments] == ["looks risky"]


def orphan_of(bot: BotHarness, owner: str) -> RunRecord:
    return RunRecord(
        run_id=keys.new_run_id(), team_id="T0TEST", user_id="U1", channel_id="C1",
        agent_name="ops", task="t", status="resuming", owner=owner,
        message_ts=bot.run_message().ts,
    )  # fmt: skip


async def test_a_run_left_executing_by_a_dead_process_is_failed_and_said(redis_url: str) -> None:
    async with BotHarness(redis_url, agents(Ledger()), POLICY) as bot:
        await bot.slack.command("hello", user="U1", channel="C1")
        await bot.wait_for_status("finished")
        await bot.idle()
        service = bot.runtime.service
        store = service.store
        # A run whose executing process stopped without a trace (no heartbeat any more)...
        dead = orphan_of(bot, "deadbeef0000:1234")
        await store.create_run(dead)
        # ... one owned by another process that is alive ...
        await store.heartbeat("a1a1a1a1a1a1", 60)
        alive = orphan_of(bot, "a1a1a1a1a1a1:5678")
        await store.create_run(alive)
        # ... and one of this process whose task is gone (crashed) without recording an end.
        crashed = orphan_of(bot, f"{service.process_id}:9abc")
        await store.create_run(crashed)
        await service.sweep_orphans()  # (the background sweeper may have run first: same result)
        await bot.idle()
        now = {}
        for name, record in (("dead", dead), ("alive", alive), ("crashed", crashed)):
            current = await store.get_run(record.run_id)
            assert current is not None
            now[name] = current
        assert now["dead"].status == now["crashed"].status == "failed"
        assert now["alive"].status == "resuming"
        assert "stopped executing this run" in now["dead"].error
        assert sum("stopped executing this run" in m.text for m in bot.run_thread()) == 2
        assert alive.run_id in await store.active_runs()
        assert dead.run_id not in await store.active_runs()
        # The failed runs are audited; the live one is never overruled, however often we sweep.
        assert await service.sweep_orphans() == 0
        audit = [e async for e in service.audit_log.read()]
        failed = {e["run_id"] for e in audit if e["kind"] == "run_failed"}
        assert failed == {dead.run_id, crashed.run_id}
