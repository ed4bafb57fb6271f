"""`/agent list` and the App Home read only the channels where the person could decide something
(issue #22 item 6): each channel's index of unfinished runs, narrowed by the policy in force
(named approvers, user groups, `"*"` as the channel's members, escalation targets). The index
grants nothing: every call read is judged by the policy in force, as a click is.

Signed HTTP into the real Bolt app, real Redis (its own command counts), the Slack Web API
stand-in at the edge."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.service.policy.reach import decider_principals
from bot.service.policy.rules import parse_policy
from bot.service.policy.source import PolicySource, policy_version
from bot.slack.blocks import APPROVE
from bot.store import keys
from bot.testing.harness import BotHarness, wait_until
from tests.agents_for_tests import Ledger, assistant_message, function_call, ops_agent

POLICY = """
defaults:
  allow_self_approval: false
channels:
  C1:
    starters: ["*"]
    approvers: [U2, U3]
  C2:
    starters: ["*"]
    approvers: [U4]
  G1:
    starters: [U1]
    approvers: ["*"]
"""
MINE = 2  # paused runs in C1, where U2 approves
OTHERS = {"C2": 24, "G1": 6}  # paused runs where U2 may decide nothing (not a member of G1)
UNLIMITED = {"user_start_burst": 0, "channel_start_burst": 0, "user_open_runs": 0,
             "channel_open_runs": 0}  # fmt: skip
# What reading runs and calls costs (ZRANGE is left out: the timers' idle loop sends it).
READS = ("hgetall", "hmget", "smembers")


def agents(ledger: Ledger) -> dict[str, Any]:
    """One agent per run (each with its own scripted model), named after its channel."""
    names = [f"c1a{i}" for i in range(MINE)]
    names += [f"{c.lower()}a{i}" for c, n in OTHERS.items() for i in range(n)]
    steps = [
        [function_call("delete_logs", {"path": "/a"}, call_id="c1")],
        [assistant_message("ok")],
    ]
    return {name: ops_agent(steps, ledger, name=name)[0] for name in names}


async def reads(client: aioredis.Redis) -> int:
    stats: dict[str, Any] = await client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in READS)


def listed(sent: Any) -> str:
    body = sent.json()
    assert body["response_type"] == "ephemeral", body
    return str(body["text"]) + json.dumps(body.get("blocks") or [])


def waiting_agents(text: str) -> list[str]:
    """The agents of the calls listed under "Waiting for your decision"."""
    waiting = text.split("Waiting for your decision", 1)[1].split("Unfinished runs", 1)[0]
    return sorted(set(re.findall(r"\*(c1a\d+|c2a\d+|g1a\d+)\*", waiting)))


async def test_a_persons_list_and_home_do_not_read_channels_they_cannot_decide_in(
    redis_url: str,
) -> None:
    ledger = Ledger()
    client = aioredis.from_url(redis_url)
    try:
        async with BotHarness(redis_url, agents(ledger), POLICY, settings=UNLIMITED) as bot:
            bot.slack_api.channel_members["G1"] = ["U1", "U5"]
            team = bot.slack_api.team_id
            for i in range(MINE):
                await bot.slack.command(f"run c1a{i} clean", user="U1", channel="C1")
            await bot.wait_for_approvals(MINE)
            await bot.idle()

            async def measured() -> tuple[int, int, str]:
                """Reads of U2's list (asked in C7) and of one render of U2's Home: the fewest
                of three tries, as the bot's own background looks (a loaded machine's longer
                window holds more of them) only ever add reads to a try."""
                tries = []
                for _ in range(3):
                    await bot.idle()
                    await wait_until(bot.runtime.home.idle, what="no App Home due")
                    before = await reads(client)
                    text = listed(await bot.slack.command("list", user="U2", channel="C7"))
                    after_list = await reads(client)
                    await bot.runtime.home.publish_many([(team, "U2")])
                    tries.append((after_list - before, await reads(client) - after_list))
                return min(t[0] for t in tries), min(t[1] for t in tries), text

            list_alone, home_alone, text = await measured()
            assert waiting_agents(text) == ["c1a0", "c1a1"]

            # 30 more paused runs, in channels where U2 may decide nothing.
            for channel, count in OTHERS.items():
                for i in range(count):
                    name = f"{channel.lower()}a{i}"
                    await bot.slack.command(f"run {name} clean", user="U1", channel=channel)
            await bot.wait_for_approvals(MINE + sum(OTHERS.values()), timeout=60)
            list_among, home_among, text = await measured()
            assert waiting_agents(text) == ["c1a0", "c1a1"]
            # U2's list and Home read what they read before: nothing of the 30 other runs.
            assert (list_among, home_among) == (list_alone, home_alone)
            assert list_alone < 20 and home_alone < 20, (list_alone, home_alone)

            # Everyone else still sees exactly what they may decide.
            u4 = listed(await bot.slack.command("list", user="U4", channel="C2"))
            assert len(waiting_agents(u4)) == 20  # (a list shows 20)
            assert all(a.startswith("c2a") for a in waiting_agents(u4))
            u5 = listed(await bot.slack.command("list", user="U5", channel="G1"))
            assert waiting_agents(u5) == sorted(f"g1a{i}" for i in range(6))
            u3 = listed(await bot.slack.command("list", user="U3", channel="C1"))
            assert waiting_agents(u3) == ["c1a0", "c1a1"]
            assert ledger.executed == []
    finally:
        await client.aclose()


async def test_runs_from_before_the_index_are_listed_and_ended_ones_leave_it(
    redis_url: str,
) -> None:
    ledger = Ledger()
    client = aioredis.from_url(redis_url, decode_responses=True)
    try:
        async with BotHarness(redis_url, agents(ledger), POLICY) as bot:
            await bot.slack.command("run c1a0 clean", user="U1", channel="C1")
            [card] = await bot.wait_for_approvals(1)
            [run_id] = await client.zrange(keys.channel_runs_key("C1"), 0, -1)
            assert await client.get(keys.CHANNEL_RUNS_INDEXED) == "1"

            # As Redis holds it after an upgrade: the run, but no channel index.
            await client.delete(keys.channel_runs_key("C1"), keys.CHANNEL_RUNS_INDEXED)
            text = listed(await bot.slack.command("list", user="U2", channel="C1"))
            assert waiting_agents(text) == ["c1a0"] and run_id in text  # every active run read
            # The reconciler's pass (also run at every start) indexes it again.
            await bot.runtime.service.requeue_stalled(older_than=3600, reconcile=True)
            assert await client.zrange(keys.channel_runs_key("C1"), 0, -1) == [run_id]
            text = listed(await bot.slack.command("list", user="U2", channel="C1"))
            assert waiting_agents(text) == ["c1a0"] and run_id in text

            # An entry a stopped process left behind (its run ended) is skipped and dropped.
            await client.zadd(keys.channel_runs_key("C1"), {"0123456789abcdef": 1.0})
            text = listed(await bot.slack.command("list", user="U2", channel="C1"))
            assert "0123456789abcdef" not in text
            assert await client.zrange(keys.channel_runs_key("C1"), 0, -1) == [run_id]

            # A run that ends leaves its channel's index.
            await bot.click(card, APPROVE, user="U2")
            await bot.wait_for_status("finished")
            assert await client.zrange(keys.channel_runs_key("C1"), 0, -1) == []
        assert [name for name, _ in ledger.executed] == ["delete_logs"]
    finally:
        await client.aclose()


GROUPS = """
defaults:
  allow_self_approval: false
channels:
  C1:
    starters: ["*"]
    approvers: [U3]
  C2:
    starters: ["*"]
    approvers: ["@ops"]
"""


async def test_groups_and_a_new_policy_decide_what_a_list_reads(
    redis_url: str, tmp_path: Path
) -> None:
    """A user group's member lists its channel's call; a rule added to the policy while calls
    wait (a tool rule scoped to C1 naming U2) gives U2 C1's call at their next list."""
    ledger = Ledger()
    path = tmp_path / "policy.yml"
    path.write_text(GROUPS)
    source = PolicySource.from_file(path, check_every=0.05)
    async with BotHarness(redis_url, agents(ledger), source, settings=UNLIMITED) as bot:
        bot.slack_api.usergroups["S0OPS"] = ("ops", ["U6"])
        await bot.slack.command("run c1a0 clean", user="U1", channel="C1")
        await bot.slack.command("run c2a0 clean", user="U1", channel="C2")
        await bot.wait_for_approvals(2)
        u6 = listed(await bot.slack.command("list", user="U6", channel="C7"))
        assert waiting_agents(u6) == ["c2a0"]
        u2 = listed(await bot.slack.command("list", user="U2", channel="C7"))
        assert waiting_agents(u2) == []

        after = GROUPS + 'tools:\n  - {match: "delete_*", channel: C1, approvers: [U2]}\n'
        path.write_text(after)
        await wait_until(lambda: source.current().version == policy_version(after), what="reload")
        u2 = listed(await bot.slack.command("list", user="U2", channel="C7"))
        assert waiting_agents(u2) == ["c1a0"]
        u3 = listed(await bot.slack.command("list", user="U3", channel="C7"))
        assert waiting_agents(u3) == []  # the rule took C1's delete_logs from U3
    assert ledger.executed == []


@pytest.mark.parametrize(
    "policy",
    [
        POLICY,
        """
defaults:
  escalate_after: 1h
  escalate_to: [U9]
channels:
  C1: {approvers: [U2]}
  C2: {approvers: ["@ops"], escalate_after: 2h, escalate_to: [S7]}
tools:
  - {match: "delete_*", agent: "billing*", approvers: [U5], escalate_after: 1h, escalate_to: [U6]}
  - {match: "restart_*", channel: C2, approvers: ["*"]}
  - {match: "read_*", channel: C1, auto: approve}
""",
    ],
)
def test_who_could_decide_in_a_channel_covers_every_rule_and_escalation(policy: str) -> None:
    """Every approver any call can have in a channel (escalation included) is among the
    channel's deciders, and nobody of a rule scoped to another channel is."""
    parsed = parse_policy(policy)
    for channel in parsed.channels:
        deciders = set(decider_principals(parsed, channel))
        for agent in ("ops", "billing-x"):
            for tool in ("delete_logs", "restart_service", "read_logs", "other"):
                rule = parsed.rule_for(channel=channel, agent=agent, tool=tool)
                assert rule is not None
                assert {*rule.approvers, *rule.escalate_to} <= deciders, (channel, agent, tool)
    assert decider_principals(parsed, "C9") == ()
    if "restart_*" in policy:
        assert "*" not in decider_principals(parsed, "C1")
        assert "*" in decider_principals(parsed, "C2")
