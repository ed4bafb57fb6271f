"""How a Redis Cluster carries the bot's data and load, as figures: `python -m benchmarks.cluster`.

A three-node cluster (`bot.testing.cluster.LocalCluster`) and the real bot (signed requests,
the Slack stand-in): `RUNS` runs pause on one call each, are approved and finish. Printed per
node: the keys it holds at the pause and at the end, the commands it processed, and which of the
shared keys (job stream, outbox index, timers, App Home, start limits, audit stream) it serves.

Decided (issue #21): a run's keys share the tag `{<run id>}`, so runs spread over the nodes by
their random ids; the shared indexes and streams are one key each (one node each, on different
nodes where their slots fall), not sharded: each holds a small entry per run, and the figures
show what share of the commands they bring to their node.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import redis
from agents import set_tracing_disabled

from benchmarks.storage import paused_runs_bot
from bot.slack.blocks import APPROVE
from bot.store import keys
from bot.testing.cluster import LocalCluster
from bot.testing.harness import wait_until

RUNS = 120
SHARED = {
    "job stream": "ab:jobs",
    "outbox index": keys.OUTBOX_INDEX,
    "timers": keys.TIMERS,
    "App Home": keys.HOME_DUE,
    "start limits": keys.user_bucket_key("T0TEST", "U1"),
    "audit stream": "ab:audit",
}


def commands(cluster: LocalCluster) -> dict[int, int]:
    counts: dict[int, int] = {}
    for port in cluster.ports:
        client = redis.Redis(port=port)
        try:
            counts[port] = int(client.info("stats")["total_commands_processed"])
        finally:
            client.close()
    return counts


def owner(cluster: LocalCluster, key: str) -> int:
    """The port of the node that serves `key`'s slot."""
    client = redis.Redis(port=cluster.ports[0])
    try:
        slot = int(client.execute_command("CLUSTER KEYSLOT", key))  # type: ignore[no-untyped-call]
        for start, end, primary, *_ in client.execute_command("CLUSTER SLOTS"):  # type: ignore[no-untyped-call]
            if int(start) <= slot <= int(end):
                return int(primary[1])
    finally:
        client.close()
    raise LookupError(key)


async def measure() -> None:
    set_tracing_disabled(True)
    with tempfile.TemporaryDirectory() as tmp:
        cluster = LocalCluster(Path(tmp))
        cluster.start()
        try:
            cluster.flush()
            before = commands(cluster)
            async with paused_runs_bot(cluster.url, RUNS) as bot:
                for i in range(RUNS):
                    await bot.slack.command(f"run a{i} clean", user="U1", channel="C1")
                cards = await bot.wait_for_approvals(RUNS, timeout=120)
                at_pause = cluster.keys_per_node()
                for card in cards:
                    await bot.slack.click(
                        APPROVE, card.button_value(APPROVE), user="U2", channel=card.channel
                    )
                await wait_until(
                    lambda: (
                        bot.slack_api.approval_messages()
                        and not any(m.action_ids() for m in bot.slack_api.approval_messages())
                    ),
                    timeout=120,
                    what="every card decided",
                )
                await bot.idle(60)
            after = commands(cluster)
            at_end = cluster.keys_per_node()
            refused = cluster.refusals()
            shared = {name: owner(cluster, key) for name, key in SHARED.items()}
        finally:
            cluster.stop()
    total = sum(after[p] - before[p] for p in cluster.ports)
    print(f"Redis Cluster of 3 nodes, {RUNS} runs paused, approved and finished:")
    print(f"{'node':>7} {'keys paused':>12} {'keys at end':>12} {'commands':>10} {'share':>7}  "
          "shared keys it serves")  # fmt: skip
    for port in cluster.ports:
        done = after[port] - before[port]
        served = ", ".join(name for name, where in shared.items() if where == port) or "-"
        print(f"{port:>7} {at_pause[port]:>12} {at_end[port]:>12} {done:>10} "
              f"{done / total:>6.0%}  {served}")  # fmt: skip
    print(f"commands per run: {total / RUNS:.1f}; refused for spanning slots: {refused or 0}")


if __name__ == "__main__":
    asyncio.run(measure())
