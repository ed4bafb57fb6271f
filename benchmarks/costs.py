"""What a run and a decision cost in Redis round trips (`make bench`; issue #32 parts 2, 3).

Round trips are counts, not time: the bot runs in this process (`BotHarness`: its HTTP
endpoint, worker, projector, against a local `redis-server` and the Slack stand-in) with
production's windows, and every round trip it makes is counted (`benchmarks/roundtrips.py`),
except its empty polls and its periodic upkeep, which depend on how long it runs, not on what
it does. Each operation is counted from the signed request to the moment everything it causes
is delivered (the bot idle again), one at a time:

- a run whose one tool needs no approval, from `/agent` to its output in the thread;
- a decision (Approve on the card of a run paused on one call), with the requester's notice,
  from the click to the run's output, the card and run message updated, and the notice sent.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agents import set_tracing_disabled

from benchmarks.bench_agents import approvals
from benchmarks.roundtrips import RoundTrips, counting
from bot.config import Settings
from bot.slack.blocks import APPROVE
from bot.store.connection import EmbeddedRedis
from bot.testing.harness import PRODUCTION_WINDOWS, BotHarness, wait_until

RUN_GOAL = 30
DECISION_GOAL = 15
POLICY = "channels:\n  C1:\n    approvers: [U2]\n"


def harness(redis_url: str, **settings: Any) -> BotHarness:
    """The bot as it runs in production (its windows, the requester's notice by DM)."""
    return BotHarness(
        redis_url,
        approvals,
        POLICY,
        settings={
            **PRODUCTION_WINDOWS,
            "requester_notice": "dm",
            "requester_notice_seconds": Settings.model_fields["requester_notice_seconds"].default,
            "home_refresh_seconds": Settings.model_fields["home_refresh_seconds"].default,
            # Slack's pacing off, as in benchmarks/decisions.py: the bot's figures, not Slack's
            "slack_posts_per_second": 100_000.0,
            "slack_updates_per_minute": 6_000_000.0,
            "user_starts_per_minute": 0,
            "user_start_burst": 0,
            "channel_starts_per_minute": 0,
            "channel_start_burst": 0,
            "user_open_runs": 0,
            "channel_open_runs": 0,
            **settings,
        },
    )


async def counted(
    counter: RoundTrips, bot: BotHarness, act: Callable[[], Awaitable[None]]
) -> Counter[str]:
    """The round trips of `act` and all it causes, until the bot is idle again."""
    await bot.idle()
    before = counter.snapshot()
    await act()
    await bot.idle()
    after = counter.snapshot()
    after.subtract(before)
    return Counter({k: v for k, v in after.items() if v})


async def plain_run(bot: BotHarness, i: int) -> None:
    """`/agent looker ...` (its one tool needs no approval), until its output is shown."""
    before = set(bot.slack_api.messages)
    await bot.slack.command(f"run looker look at host-{i}", user="U1", channel="C1")

    def answered() -> bool:
        new = [m for k, m in bot.slack_api.messages.items() if k not in before]
        return any(m.thread_ts and "done" in m.all_text() for m in new)

    await wait_until(answered, timeout=30, what="the run's output", explain=bot.waiting_on)


async def decision(bot: BotHarness, card: Any) -> None:
    """U2 approves `card` (U1's run): until the output, and U1's notice, are sent."""
    told = len(bot.slack_api.dms("U1"))
    await bot.click(card, APPROVE, user="U2")
    await wait_until(
        lambda: len(bot.slack_api.dms("U1")) > told,
        timeout=30,
        what="the requester's notice",
        explain=bot.waiting_on,
    )


async def measure(redis_url: str, samples: int, **settings: Any) -> dict[str, list[Counter[str]]]:
    """Round trips of `samples` plain runs and `samples` decisions, one at a time (after one
    of each that warms up: the direct-message channel is opened once per person)."""
    found: dict[str, list[Counter[str]]] = {"run": [], "decision": []}
    with counting() as counter:
        async with harness(redis_url, **settings) as bot:
            for i in range(samples + 1):
                spent = await counted(counter, bot, lambda i=i: plain_run(bot, i))  # type: ignore[misc]
                if i:
                    found["run"].append(spent)
            for i in range(samples + 1):
                card = await bot.start_and_wait(f"deploy d{i}", user="U1", channel="C1")
                spent = await counted(counter, bot, lambda c=card: decision(bot, c))  # type: ignore[misc]
                if i:
                    found["decision"].append(spent)
    return found


def report(found: dict[str, list[Counter[str]]]) -> None:
    goals = {"run": RUN_GOAL, "decision": DECISION_GOAL}
    what = {
        "run": "a run whose one tool needs no approval, /agent to output",
        "decision": "a decision, one at a time, click to output and the requester's notice",
    }
    for name, samples in found.items():
        totals = [sum(s.values()) for s in samples]
        print(f"Redis round trips of {what[name]}: {max(totals)} (min {min(totals)}; "
              f"goal <= {goals[name]})")  # fmt: skip
        mean: Counter[str] = Counter()
        for s in samples:
            mean.update(s)
        for command, n in sorted(mean.items(), key=lambda kv: -kv[1]):
            print(f"  {n / len(samples):5.2f}  {command}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=3)
    args = parser.parse_args()
    set_tracing_disabled(True)
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedRedis(Path(tmp) / "redis")
        await server.start()
        try:
            found = await measure(server.url, args.samples)
        finally:
            server.stop()
    report(found)


if __name__ == "__main__":
    os.environ.setdefault("BENCH_ROUNDTRIPS_CALLERS", "")
    asyncio.run(main())
