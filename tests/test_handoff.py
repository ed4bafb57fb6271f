"""A decision's resume job handed to its own process's idle worker (#32 part 2): enqueued, read
for that worker and taken in the decision's round trip (handoff.lua), so that the worker's
blocked read and its take are not steps of the path from a click to its output. The job is a
job like any other in Redis: left by a process that died before running it, another worker
takes it over once its lease lapses, and the tool runs once. Through the real bot, real Redis
and the Slack stand-in."""

from __future__ import annotations

from bot.slack.blocks import APPROVE, approval_and_version
from bot.store.queue import GROUP, STREAM
from bot.store.records import Decided
from bot.testing.harness import BotHarness
from tests.agents_for_tests import POLICY, Ledger, delete_then_say, ops_agent


async def test_a_handed_off_job_its_process_never_ran_is_taken_over(redis_url: str) -> None:
    """What a process that died right after its decision's round trip leaves: the decision
    recorded, its run's resume job taken by that process's worker (`worker-gone`) and pending
    for it. Another worker (this harness's: a lease of 1 s) takes the job over, and the run
    resumes and ends with its tool run once."""
    ledger = Ledger()
    agent, _ = ops_agent(delete_then_say(), ledger)
    async with BotHarness(redis_url, agent, POLICY, settings={"job_lease_seconds": 1.0}) as bot:
        card = await bot.start_and_wait("delete the logs", user="U1", channel="C1")
        approval_id, _ = approval_and_version(card.button_value(APPROVE))
        store = bot.runtime.service.store
        call, run = await store.call_and_run(approval_id)
        assert call is not None and run is not None
        owner = bot.runtime.service.core.new_owner()
        handoff = store.hand_off("worker-gone", "attempt")
        decided = await store.decide(
            approval_id, approve=True, always=False, team="T0TEST", user="U2", reason="",
            owner=owner, enqueue=True, pause=run.calls, handoff=handoff,
            expected=Decided(settled=[approval_id], resume=True, undecided=0),
        )  # fmt: skip
        assert isinstance(decided, Decided) and decided.resume
        [(job, taken)] = handoff.taken  # read and taken in the decision's round trip
        assert job is not None and job.run_id == run.run_id and taken.kind == "fresh"
        assert taken.run is not None and taken.run.owner == f"{owner}/attempt"
        pending = await bot.runtime.redis.xpending_range(STREAM, GROUP, "-", "+", 10)
        assert [p["consumer"] for p in pending] == [b"worker-gone"], pending
        assert ledger.names() == []  # nothing ran it
        await bot.wait_for_status("finished")  # taken over once the lease lapsed
        assert ledger.names() == ["delete_logs"]
        await bot.idle()
        assert not await bot.runtime.redis.xpending_range(STREAM, GROUP, "-", "+", 10)
