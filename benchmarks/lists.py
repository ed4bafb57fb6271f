"""What `/agent list` and App Home renders cost over many paused runs (issue #22 item 6).

300 runs pause through the real bot (signed requests, the Slack stand-in), one call each, in
one channel whose approvers are U2 and U3. Then, with the bot idle:

- `/agent list` as the service answers it (`overview`), 20 times: Redis commands (the server's
  `total_commands_processed`, less what the idle bot sends in the same time) and CPU (this
  process) per list;
- 40 App Home renders at once (40 viewers after one decision), as the publisher renders a
  batch of due people: Redis commands and CPU for the 40.

Run: `python benchmarks/lists.py [redis url]` (without one, an embedded redis-server).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from agents import set_tracing_disabled

from bot.service.ports import Actor
from bot.store.connection import EmbeddedRedis
from bot.testing.harness import BotHarness

RUNS = 300
VIEWERS = 40
POLICY = """
channels:
  C1:
    starters: ["*"]
    approvers: [U2, U3]
"""


async def _commands(client: aioredis.Redis) -> int:
    stats: dict[str, Any] = await client.info("stats")
    return int(stats["total_commands_processed"])


async def measure(redis_url: str) -> dict[str, float]:
    """{"list_commands", "list_cpu_ms", "homes_commands", "homes_cpu_ms"} over RUNS paused runs."""
    from tests.agents_for_tests import Ledger, assistant_message, function_call, ops_agent

    set_tracing_disabled(True)
    done = [assistant_message("ok")]
    calls = [[function_call("delete_logs", {"path": f"/{i}"}, call_id="c1")] for i in range(RUNS)]
    steps = [[call, done] for call in calls]
    agents = {f"a{i}": ops_agent(s, Ledger(), name=f"a{i}")[0] for i, s in enumerate(steps)}
    unlimited = {
        "user_start_burst": 0, "channel_start_burst": 0, "user_open_runs": 0,
        "channel_open_runs": 0, "slack_posts_per_second": 1000.0, "user_lists_per_minute": 0,
    }  # fmt: skip
    client = aioredis.Redis.from_url(redis_url)
    try:
        async with BotHarness(redis_url, agents, POLICY, settings=unlimited) as bot:
            for i in range(RUNS):
                await bot.slack.command(f"run a{i} clean", user=f"U{100 + i % 7}", channel="C1")
            await bot.wait_for_approvals(RUNS, timeout=300)
            await bot.idle(120)
            service = bot.runtime.service
            team = bot.slack_api.team_id

            async def idle_rate() -> float:
                before, started = await _commands(client), time.perf_counter()
                await asyncio.sleep(1.0)
                return (await _commands(client) - before - 1) / (time.perf_counter() - started)

            rate = await idle_rate()
            lists = 20
            before, wall, cpu = await _commands(client), time.perf_counter(), time.process_time()
            for _ in range(lists):
                await service.overview(Actor(team, "U2"), "C1")
            cpu = time.process_time() - cpu
            wall = time.perf_counter() - wall
            sent = await _commands(client) - before - 1 - rate * wall
            figures = {"list_commands": sent / lists, "list_cpu_ms": cpu / lists * 1000}

            actors = [Actor(team, "U2" if n % 2 else "U3") for n in range(VIEWERS)]
            before, wall, cpu = await _commands(client), time.perf_counter(), time.process_time()
            homes = getattr(service, "homes", None)
            if homes is not None:
                await homes(actors)
            else:  # before batch renders: one at a time, as the publisher did
                for actor in actors:
                    await service.home(actor)
            cpu = time.process_time() - cpu
            wall = time.perf_counter() - wall
            figures["homes_commands"] = await _commands(client) - before - 1 - rate * wall
            figures["homes_cpu_ms"] = cpu * 1000
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
    print(
        f"/agent list over {RUNS} paused runs: {figures['list_commands']:.0f} Redis commands, "
        f"{figures['list_cpu_ms']:.1f} ms CPU per list"
    )
    print(
        f"{VIEWERS} App Home renders over {RUNS} paused runs: "
        f"{figures['homes_commands']:.0f} Redis commands, {figures['homes_cpu_ms']:.0f} ms CPU"
    )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for tests.agents_for_tests
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else None))
