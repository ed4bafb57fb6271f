"""Redis Cluster, as an operator meets it: `REDIS_URL` names one node of a real three-node
cluster and nothing else changes. The approval loop, quorum, expiry, cancel, a worker crash and
restarts run on the cluster too (the tests marked `cluster_too`); these are what only a cluster
has: what `approval-bot check` finds, readiness that follows the cluster's state, and runs'
data spread over the nodes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from bot.slack.blocks import APPROVE, REVIEW_DONE
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
            await wait_until(
                lambda: _is(ready, 503), timeout=20, what="/readyz to say the cluster failed"
            )
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
                [assistant_message("ok")],
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

            async def settled() -> bool:
                waiting = [
                    m for m in bot.slack_api.approval_messages() if APPROVE in m.action_ids()
                ]
                for card in waiting:  # told to try again: clicked again, as a person would
                    await click(card)
                ran = sum(len(ledger.executed) for ledger in ledgers)
                return not waiting and ran + reviews() == runs

            await wait_until(settled, timeout=180, what="every call settled")
            assert await bot.runtime.ready()  # /readyz follows the new primary
    finally:
        sentinel.stop()
    for i, ledger in enumerate(ledgers):
        assert ledger.executed in ([], [("restart_service", {"service": f"s{i}"})]), i
