"""Redis Cluster, as an operator meets it: `REDIS_URL` names one node of a real three-node
cluster and nothing else changes. The approval loop, quorum, expiry, cancel, a worker crash and
restarts run on the cluster too (the tests marked `cluster_too`); these are what only a cluster
has: what `approval-bot check` finds, readiness that follows the cluster's state, and runs'
data spread over the nodes."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
from agents import AgentHooks

from bot.slack.blocks import APPROVE, REVIEW_DONE, REVIEW_RERUN
from bot.store.keys import DUE_RUNS
from bot.store.queue import STREAM
from bot.testing.cluster import LocalCluster, LocalSentinel
from bot.testing.harness import BotHarness, wait_until
from bot.testing.slack_api import Message
from tests.agents_for_tests import POLICY, Ledger, assistant_message, function_call, ops_agent
from tests.test_config import check


def test_check_says_what_redis_it_found(redis_cluster: LocalCluster, tmp_path: Path) -> None:
    result = check(
        tmp_path,
        POLICY,
        SLACK_BOT_TOKEN="xoxb-x",
        SLACK_SIGNING_SECRET="shh",
        OPENAI_API_KEY="sk-test",
        REDIS_URL=redis_cluster.url,
    )
    assert result.returncode == 0, result.stderr
    found = next(line for line in result.stdout.splitlines() if line.startswith("Redis:"))
    assert found.startswith("Redis: Redis Cluster of 3 primaries and 0 replica(s), version 7")
    assert "maxmemory-policy noeviction;" in found
    # The test cluster keeps nothing on disk, and check says what that costs.
    assert "AOF off; RDB saves off (a restart of Redis would lose every paused run)" in found


async def test_runs_spread_over_the_nodes_and_resume(redis_cluster: LocalCluster) -> None:
    """Each run's keys share its own hash tag, so runs land on every node; each resumes."""
    redis_cluster.flush()
    ledger = Ledger()
    runs = 9
    steps = [
        turn
        for n in range(runs)
        for turn in (
            [function_call("restart_service", {"service": "api"}, call_id=f"c{n}")],
            [assistant_message("done")],
        )
    ]
    agent, _ = ops_agent(steps, ledger)
    roomy = {"user_start_burst": runs, "channel_start_burst": runs}  # one person starts them all
    async with BotHarness(redis_cluster.url, agent, POLICY, settings=roomy) as bot:
        for n in range(runs):
            sent = await bot.slack.command(f"restart api {n}", user="U1", channel="C1")
            assert sent.status == 200
            [card] = await bot.wait_for_approvals(1)
            clicked = await bot.slack.click(
                APPROVE, card.button_value(APPROVE), user="U2", channel="C1"
            )
            assert clicked.status == 200
            await wait_until(lambda n=n: len(ledger.executed) == n + 1, what=f"run {n}'s tool")
        spread = redis_cluster.keys_per_node()
    assert all(count > 0 for count in spread.values()), spread
    assert ledger.executed == [("restart_service", {"service": "api"})] * runs
    assert not redis_cluster.refusals()


async def test_readiness_follows_the_clusters_state(tmp_path: Path) -> None:
    """`/readyz` is 200 while every slot is served, 503 once a node is gone."""
    cluster = LocalCluster(tmp_path / "cluster", node_timeout_ms=500)
    cluster.start()
    try:
        async with (
            BotHarness(cluster.url, ops_agent([], Ledger())[0], POLICY) as bot,
            aiohttp.ClientSession() as http,
        ):

            async def ready() -> int:
                async with http.get(f"{bot.url}/readyz") as response:
                    return response.status

            assert await ready() == 200
            cluster.stop_node(2)
            await wait_until(lambda: _is(ready, 503), what="/readyz to say the cluster failed")
    finally:
        cluster.stop()


async def _is(probe: object, status: int) -> bool:
    return await probe() == status  # type: ignore[operator, no-any-return]


async def test_a_sentinel_failover_in_a_burst_runs_no_tool_twice(tmp_path: Path) -> None:
    """A forced `SENTINEL FAILOVER` while a burst of clicks is being decided: the bot follows
    the new primary, every click is acknowledged, and every call is settled: its tool run
    exactly once, or (where a worker lost its job in the failover and cannot tell whether the
    tool ran) handed to a person with Mark done / Run again. No tool runs twice. Transitions
    wait for the replica (`APPROVAL_BOT_REDIS_WAIT_REPLICAS=1`), so what the bot acted on was
    on the replica that was promoted."""
    sentinel = LocalSentinel(tmp_path / "sentinel")
    sentinel.start()
    runs = 16
    ledgers = [Ledger() for _ in range(runs)]
    agents = {
        f"a{i}": ops_agent(
            [
                [function_call("restart_service", {"service": f"s{i}"}, call_id="c1")],
                # A resume retried after its end went unconfirmed asks the model again (the
                # tool, journaled as done, is not run again).
                *[[assistant_message("ok")]] * 5,
            ],
            ledgers[i],
            name=f"a{i}",
        )[0]
        for i in range(runs)
    }
    settings = {
        "user_start_burst": 0, "channel_start_burst": 0, "user_open_runs": 0,
        "redis_wait_replicas": 1, "job_lease_seconds": 10,
    }  # fmt: skip
    try:
        async with BotHarness(sentinel.url, agents, POLICY, settings=settings) as bot:
            for i in range(runs):
                sent = await bot.slack.command(f"run a{i} restart", user="U1", channel="C1")
                assert sent.status == 200
            cards = await bot.wait_for_approvals(runs, timeout=60)
            before = sentinel.primary()

            async def click(card: Message) -> int:
                try:
                    value = card.button_value(APPROVE)
                except KeyError:  # decided meanwhile (the stand-in updates it in place)
                    return 200
                sent = await bot.slack.click(APPROVE, value, user="U2", channel="C1")
                return sent.status

            half = runs // 2
            clicks = [asyncio.create_task(click(card)) for card in cards[:half]]
            moved = asyncio.create_task(asyncio.to_thread(sentinel.failover))
            clicks += [asyncio.create_task(click(card)) for card in cards[half:]]
            assert await asyncio.gather(*clicks) == [200] * runs  # every click acknowledged
            assert await moved != before

            def reviews() -> int:
                return sum(REVIEW_DONE in m.action_ids() for m in bot.slack_api.messages.values())

            async def statuses() -> list[str]:
                client = bot.runtime.redis
                return [
                    (await client.hget(key, "status") or b"").decode()
                    async for key in client.scan_iter(match="ab:{*}:run")
                ]

            async def settled() -> bool:
                """Every card decided, every run ended or handed to a person (a tool whose
                journal end went unconfirmed may have run: a person says, Mark done / Run
                again), and every review request in Slack."""
                waiting = [
                    m for m in bot.slack_api.approval_messages() if APPROVE in m.action_ids()
                ]
                for card in waiting:  # told to try again: clicked again, as a person would
                    await click(card)
                found = await statuses()
                ended = len(found) == runs and all(s in ("finished", "needs_review") for s in found)
                return not waiting and ended and reviews() == found.count("needs_review")

            try:
                await wait_until(settled, timeout=180, what="every call settled")
            except TimeoutError:
                waiting = [
                    m for m in bot.slack_api.approval_messages() if APPROVE in m.action_ids()
                ]
                ran = sum(len(ledger.executed) for ledger in ledgers)
                raise AssertionError(
                    f"cards waiting {len(waiting)}, tools run {ran}, reviews {reviews()}; "
                    + await sentinel.runs_left()
                ) from None
            assert await bot.runtime.ready()  # /readyz follows the new primary
    finally:
        sentinel.stop()
    for i, ledger in enumerate(ledgers):
        assert ledger.executed in ([], [("restart_service", {"service": f"s{i}"})]), i


async def test_a_resume_lost_in_a_failover_is_enqueued_at_the_next_sweep(tmp_path: Path) -> None:
    """A decision is confirmed by the replica, but its resume job and due-index entry (separate
    writes: other slots) were acknowledged by the old primary and never reached the promoted
    one. The sweep after the failover looks at every active run and enqueues the resume, in
    about a sweep period, not a reconcile period (20 of them) later: what the burst test above
    met in CI, three runs left `resuming` with no job."""
    sentinel = LocalSentinel(tmp_path / "sentinel")
    sentinel.start()
    agent, _ = ops_agent(
        [[function_call("restart_service", {"service": "db"}, call_id="c0")]], Ledger()
    )
    settings = {"redis_wait_replicas": 1, "job_lease_seconds": 1}  # a sweep every second
    try:
        async with BotHarness(sentinel.url, agent, POLICY, settings=settings) as bot:
            runtime = bot.runtime
            assert runtime.worker is not None
            sent = await bot.slack.command("restart db", user="U1", channel="C1")
            assert sent.status == 200
            [card] = await bot.wait_for_approvals(1)
            await runtime.worker.stop(runtime._worker_task, 5)  # the job stays in the stream
            sent = await bot.slack.click(
                APPROVE, card.button_value(APPROVE), user="U2", channel="C1"
            )
            assert sent.status == 200
            client = runtime.redis
            run_id = card.button_value(APPROVE).partition(".")[0]

            async def jobs() -> list[str]:
                entries = await client.xrange(STREAM)
                return [
                    entry_id for entry_id, fields in entries if fields[b"run_id"] == run_id.encode()
                ]

            await wait_until(lambda: _has(jobs), what="the resume job")
            sweeper = bot.runtime.service.sweeper  # past its first sweep, a full pass anyway
            await wait_until(lambda: sweeper.sweeps >= 1, what="the first sweep done")
            # What the old primary lost: the job and the entry that makes the run due.
            for entry_id in await jobs():
                await client.xdel(STREAM, entry_id)
            await client.zrem(DUE_RUNS, run_id)
            await asyncio.to_thread(sentinel.failover)
            await wait_until(lambda: _has(jobs), what="the resume enqueued again")
            run = await runtime.service.store.get_run(run_id)
            assert run is not None and run.status == "resuming"
    finally:
        sentinel.stop()


async def _has(listed: Any) -> bool:
    return bool(await listed())


class FreezeTheReplicaOnce(AgentHooks[Any]):
    """Once armed, freezes the replica as a tool is about to run: the journal's write saying
    the call is executing is one no replica confirms."""

    def __init__(self, sentinel: LocalSentinel, seconds: float = 1.4) -> None:
        self.sentinel = sentinel
        self.armed = False
        self.seconds = seconds  # 1.4: past the journal's 1 s WAIT, within the next write's

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        if self.armed:
            self.armed = False
            self.sentinel.stall_replica(self.seconds)


async def test_a_long_replica_stall_does_not_use_up_a_runs_attempts(tmp_path: Path) -> None:
    """The replica is frozen for 8 s as an approved call is about to run, with a 1 s lease:
    the job is taken again and again meanwhile, and every take or write goes unconfirmed.
    Those attempts are Redis being away, not a worker that stopped: the run is not given up
    ("tried 5 times", as it was in CI); once the replica is back, the call left executing goes
    to a person."""
    sentinel = LocalSentinel(tmp_path / "sentinel")
    sentinel.start()
    ledger = Ledger()
    agent, _ = ops_agent(
        [[function_call("restart_service", {"service": "api"}, call_id="c1")]]
        + [[assistant_message("restarted api")]] * 3,
        ledger,
    )
    hooks = FreezeTheReplicaOnce(sentinel, seconds=8)
    agent.hooks = hooks
    settings = {"redis_wait_replicas": 1, "job_lease_seconds": 1}
    try:
        async with BotHarness(sentinel.url, agent, POLICY, settings=settings) as bot:
            card = await bot.start_and_wait("restart api", user="U1")
            hooks.armed = True
            assert (await bot.click(card, APPROVE, user="U2")).status == 200
            [review] = await wait_until(
                lambda: [
                    m for m in bot.slack_api.messages.values() if REVIEW_RERUN in m.action_ids()
                ],
                timeout=40,
                what="a review request",
                explain=bot.waiting_on,  # (it timed out once on a loaded CI run: say where)
            )
            assert "`restart_service` (call `c1`) was executing" in review.all_text()
        said = [m.all_text() for m in bot.slack_api.messages.values()]
        assert not [text for text in said if "gave up" in text], said
        assert ledger.executed == []
    finally:
        sentinel.stop()


async def test_a_journal_write_no_replica_confirmed_is_retried_not_failed(tmp_path: Path) -> None:
    """An approved call's journal entry is written while the replica is frozen, so `WAIT`
    confirms nothing and the tool does not run. The bot gives that run no verdict (it was
    recorded as failed once the replica caught up: a flake of the failover test above): the
    job is retried when its lease lapses, finds the call left executing, and asks a person;
    "Run again" runs it, once."""
    sentinel = LocalSentinel(tmp_path / "sentinel")
    sentinel.start()
    ledger = Ledger()
    agent, _ = ops_agent(
        [
            [function_call("restart_service", {"service": "db"}, call_id="c0")],
            [assistant_message("restarted db")],
            [function_call("restart_service", {"service": "api"}, call_id="c1")],
            [assistant_message("restarted api")],
        ],
        ledger,
    )
    hooks = FreezeTheReplicaOnce(sentinel)
    agent.hooks = hooks
    settings = {"redis_wait_replicas": 1, "job_lease_seconds": 1.5}
    try:
        async with BotHarness(sentinel.url, agent, POLICY, settings=settings) as bot:
            # A first run, undisturbed: every script the second one uses is loaded by then
            # (a first EVALSHA meets NOSCRIPT, and its WAIT would shift the timing below).
            card = await bot.start_and_wait("restart db", user="U1")
            assert (await bot.click(card, APPROVE, user="U2")).status == 200
            await bot.wait_for_status("finished", timeout=30)
            await bot.idle()
            assert ledger.executed == [("restart_service", {"service": "db"})]
            await bot.slack.command("restart api", user="U1", channel="C1")
            [card] = await wait_until(
                lambda: [m for m in bot.slack_api.approval_messages() if APPROVE in m.action_ids()],
                what="the second run's card",
            )
            hooks.armed = True
            assert (await bot.click(card, APPROVE, user="U2")).status == 200
            [review] = await wait_until(
                lambda: [
                    m for m in bot.slack_api.messages.values() if REVIEW_RERUN in m.action_ids()
                ],
                timeout=30,
                what="a review request",
            )
            assert "`restart_service` (call `c1`) was executing" in review.all_text()
            assert ledger.executed == [("restart_service", {"service": "db"})]
            await bot.slack.click(
                REVIEW_RERUN, review.button_value(REVIEW_RERUN), user="U2", channel="C1"
            )
            await wait_until(
                lambda: len(ledger.executed) == 2, timeout=30, what="the call run again"
            )
            await bot.wait_for_status("finished", timeout=30)
            await bot.idle()
        said = [m.all_text() for m in bot.slack_api.messages.values()]
        assert not [text for text in said if "failed" in text], said
        assert ledger.executed[1] == ("restart_service", {"service": "api"})
    finally:
        sentinel.stop()
