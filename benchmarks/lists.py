"""What `/agent list` and App Home renders cost over many paused runs (issue #22 item 6).

320 runs pause through the real bot (signed requests, the Slack stand-in), one call each: 20 in
C1, whose approvers are U2 and U3, and 300 in C2, whose approver is U4. Then, with the bot idle,
for U2 (who may decide only C1's 20) and U4 (who may decide C2's 300):

- `/agent list` as the service answers it (`overview`), 20 times: Redis commands (the server's
  `INFO commandstats`, less what the idle bot sends of each command in the same time) and CPU
  (this process) per list;
- one App Home render, as the publisher renders a due person, 20 times: the same, per render;
- 40 App Home renders at once (U2 and U3, 40 viewers after one decision), as the publisher
  renders a batch of due people: Redis commands and CPU for the 40.

Each is measured twice: reading the channels' indexes (`index`), and reading every active run
(`scan`: what lists did before the index, and still do until it is complete after an upgrade;
the index's completion mark is removed for it, then put back).

Run: `python benchmarks/lists.py [redis url]` (without one, an embedded redis-server). CPU is
process time, under whatever else the machine runs; the command counts are exact but for the
idle rate subtracted.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from agents import set_tracing_disabled

from bot.service.ports import Actor
from bot.store import keys
from bot.store.connection import EmbeddedRedis
from bot.testing.harness import BotHarness

MINE = 20  # paused runs in C1 (approvers U2, U3)
OTHERS = 300  # paused runs in C2 (approver U4)
VIEWERS = 40
REPEAT = 20
POLICY = """
channels:
  C1:
    starters: ["*"]
    approvers: [U2, U3]
  C2:
    starters: ["*"]
    approvers: [U4]
"""


async def _commands(client: aioredis.Redis) -> Counter[str]:
    """The server's count of each command so far (`INFO commandstats`)."""
    stats: dict[str, Any] = await client.info("commandstats")
    return Counter({name: int(value["calls"]) for name, value in stats.items()})


def _sent(before: Counter[str], after: Counter[str], idle: dict[str, float], wall: float) -> float:
    """The commands sent between two counts, less what the idle bot sends (its polls, per
    command, at `idle` a second) in `wall` seconds, and less the INFO that read `before`."""
    total = 0.0
    for name in after:
        sent = after[name] - before[name] - (1 if name == "cmdstat_info" else 0)
        total += max(0.0, sent - idle.get(name, 0.0) * wall)
    return total


async def measure(redis_url: str) -> dict[str, dict[str, float]]:
    """{"index" | "scan": {figure name: value}} over MINE + OTHERS paused runs."""
    from tests.agents_for_tests import Ledger, assistant_message, function_call, ops_agent

    set_tracing_disabled(True)
    where = ["C1"] * MINE + ["C2"] * OTHERS
    agents = {
        f"a{i}": ops_agent(
            [
                [function_call("delete_logs", {"path": f"/{i}"}, call_id="c1")],
                [assistant_message("ok")],
            ],
            Ledger(),
            name=f"a{i}",
        )[0]
        for i in range(len(where))
    }
    unlimited = {
        "user_start_burst": 0, "channel_start_burst": 0, "user_open_runs": 0,
        "channel_open_runs": 0, "slack_posts_per_second": 1000.0, "user_lists_per_minute": 0,
    }  # fmt: skip
    client = aioredis.Redis.from_url(redis_url)
    try:
        async with BotHarness(redis_url, agents, POLICY, settings=unlimited) as bot:
            for i, channel in enumerate(where):
                await bot.slack.command(f"run a{i} clean", user=f"U{100 + i % 7}", channel=channel)
            await bot.wait_for_approvals(len(where), timeout=600)
            await bot.idle(120)
            service = bot.runtime.service
            team = bot.slack_api.team_id

            async def idle_rates(seconds: float = 3.0) -> dict[str, float]:
                """What the idle bot sends a second, per command."""
                await asyncio.sleep(1.0)
                before, started = await _commands(client), time.perf_counter()
                await asyncio.sleep(seconds)
                after, wall = await _commands(client), time.perf_counter() - started
                return {name: (after[name] - before[name]) / wall for name in after}

            idle = await idle_rates()

            async def cost(work: Callable[[], Awaitable[Any]], times: int) -> tuple[float, float]:
                """(Redis commands, CPU ms) per one of `times` runs of `work`."""
                before = await _commands(client)
                wall, cpu = time.perf_counter(), time.process_time()
                for _ in range(times):
                    await work()
                cpu = time.process_time() - cpu
                wall = time.perf_counter() - wall
                sent = _sent(before, await _commands(client), idle, wall)
                return sent / times, cpu / times * 1000

            batch = [Actor(team, "U2" if n % 2 else "U3") for n in range(VIEWERS)]
            figures: dict[str, dict[str, float]] = {}
            for mode in ("index", "scan"):
                if mode == "scan":
                    await client.delete(keys.CHANNEL_RUNS_INDEXED)
                got: dict[str, float] = {}
                for who in ("U2", "U4"):
                    actor = Actor(team, who)
                    got[f"list {who}"], got[f"list {who} cpu"] = await cost(
                        partial(service.overview, actor, "C7"), REPEAT
                    )
                    got[f"home {who}"], got[f"home {who} cpu"] = await cost(
                        partial(service.homes, [actor]), REPEAT
                    )
                got["homes"], got["homes cpu"] = await cost(lambda: service.homes(batch), 1)
                figures[mode] = got
            await service.store.index_channels()
            return figures
    finally:
        await client.aclose()


async def main(url: str | None) -> None:
    if url:
        figures = await measure(url)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            server = EmbeddedRedis(Path(tmp))
            await server.start()
            try:
                figures = await measure(server.url)
            finally:
                server.stop()
    print(f"{MINE} paused runs in C1 (U2 approves), {OTHERS} in C2 (U4 approves):")
    for mode, got in figures.items():
        print(f"  {mode}:")
        for who, what in (("U2", f"{MINE} runs"), ("U4", f"{OTHERS} runs")):
            print(
                f"    /agent list of {who} ({what} to decide): {got[f'list {who}']:.0f} Redis "
                f"commands, {got[f'list {who} cpu']:.1f} ms CPU per list; one App Home render: "
                f"{got[f'home {who}']:.0f} commands, {got[f'home {who} cpu']:.1f} ms CPU"
            )
        print(
            f"    {VIEWERS} App Home renders at once (U2, U3): {got['homes']:.0f} Redis "
            f"commands, {got['homes cpu']:.0f} ms CPU"
        )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for tests.agents_for_tests
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else None))
