"""`/agent` commands, event deliveries and runs left behind by a dead process."""

from __future__ import annotations

import json
import time

import redis.asyncio as aioredis

from bot.store import keys
from bot.store.queue import GROUP, STREAM
from bot.store.records import RunRecord
from bot.testing.harness import BotHarness, wait_until
from tests.agents_for_tests import POLICY, Ledger, assistant_message, delete_then_say, ops_agent


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
    agent, _ = ops_agent(delete_then_say("/a", "x"), ledger)
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


async def test_a_run_whose_job_was_never_enqueued_is_picked_up(redis_url: str) -> None:
    """The process that created a run stopped before enqueueing its job: the sweeper does.

    This bot's projector would enqueue it too, once it has posted the run's message (a run
    starts once its message is shown, `Runs.start_in`); that post hangs here until the sweep
    is done, so the start the worker takes can only be the sweeper's."""
    ledger = Ledger()
    ops, _ = ops_agent([[assistant_message("one")], [assistant_message("two")]], ledger)
    async with BotHarness(redis_url, ops, POLICY) as bot:
        await bot.slack.command("hello", user="U1", channel="C1")
        await bot.wait_for_status("finished")
        await bot.idle()
        service = bot.runtime.service
        store = service.store
        stamp = f"{time.time() - 120:.3f}"  # due for two minutes
        # Created now: the projector does not start it without its message (as it would once
        # Slack has failed it for `START_WITHOUT_MESSAGE`) while the test looks.
        created = f"{time.time():.3f}"
        bot.slack_api.hang("chat.postMessage", times=1000, when=lambda p: "left behind" in str(p))

        def run(owner: str, task: str) -> RunRecord:
            return RunRecord(
                run_id=keys.new_run_id(), team_id="T0TEST", user_id="U1", channel_id="C1",
                agent_name="ops", task=task, status="running", owner=owner,
                message_ts=bot.run_message().ts, created_at=created, updated_at=stamp,
            )  # fmt: skip

        stalled = run("deadbeef0000:1234", "left behind")  # never taken by any worker
        taken = run("deadbeef0000:5678/worker:1", "taken")  # a worker has it: its lease decides
        for record in (stalled, taken):
            await store.create_run(record)
        # The taken run's job, delivered to its worker (pending: no worker of this bot reads it).
        async with bot.runtime.redis.pipeline(transaction=True) as pipe:
            pipe.xadd(STREAM, {"kind": "start", "run_id": taken.run_id, "execution": "x"})
            pipe.xreadgroup(GROUP, "worker:1", {STREAM: ">"}, count=1)
            job, delivered = await pipe.execute()
        assert delivered[0][1][0][0] == job
        await bot.runtime.redis.hset(keys.run_key(taken.run_id), "job", job)
        assert await service.requeue_stalled(older_than=60) == 1

        async def finished() -> bool:
            done = await store.get_run(stalled.run_id)
            return done is not None and done.status == "finished"

        await wait_until(finished, timeout=30, what="the swept run to finish")
        still = await store.get_run(taken.run_id)
        assert still is not None and still.status == "running"
        await bot.runtime.redis.xack(STREAM, GROUP, job)  # (its worker's: then the bot is idle)
        bot.slack_api.release()  # its message is posted (the start that follows it is a no-op)
        await bot.idle()
        # A duplicate job for an execution already taken does nothing.
        await bot.runtime.queue.enqueue("start", stalled.run_id, "deadbeef0000:1234")
        await bot.idle()
        audit = [e async for e in service.audit_log.read()]
        assert [e["run_id"] for e in audit if e["kind"] == "run_finished"].count(
            stalled.run_id
        ) == 1


async def test_a_task_that_mentions_payload_starts_a_run(redis_url: str) -> None:
    """Bolt's own body parser takes any form containing the word "payload" for an interaction
    and loses the command; the intake hands Bolt the form it parsed (#17)."""
    async with BotHarness(redis_url, agents(Ledger()), POLICY) as bot:
        sent = await bot.slack.command("run db fix the payload= parser", user="U1", channel="C1")
        assert sent.status == 200, sent
        await bot.wait_for_status("finished")
        await bot.idle()
        assert "fix the payload= parser" in bot.run_message().all_text()
