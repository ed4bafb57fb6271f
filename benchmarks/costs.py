"""What a run and a decision cost in Redis round trips (`make bench`; issue #32 parts 2, 3).

Round trips are counts, not time: the bot runs in this process (`BotHarness`: its HTTP
endpoint, worker, projector, against a local `redis-server` and the Slack stand-in) with
production's windows, and every round trip it makes is counted (`benchmarks/roundtrips.py`),
except its empty polls and its periodic upkeep, which depend on how long it runs, not on what
it does. Each operation is counted from the signed request to the moment everything it causes
is delivered (the bot idle again), one at a time:

- a run whose one tool needs no approval, from `/agent` to its output in the thread;
- a decision (Approve on the card of a run paused on one call), with the requester's notice,
  from the click to the run's output, the card and run message updated, and the notice sent;
- a run whose one gated call a policy rule approves automatically (`auto: approve`), from
  `/agent` to its output: decided inside the run (#32 part 1), it should cost little more than
  the run whose tool needs no approval;
- a run whose one gated call a policy rule rejects (`auto: reject`, with a reason), from
  `/agent` to its output: refused at the call's approval check, inside the run (its thread
  says so: a note the run whose call is approved has not).

Beside the round trips, the bot's CPU per run of those kinds, measured from outside: the bot
in a process of its own (`benchmarks/decisions.py`'s `Bot`, with the Slack stand-in in another),
the runs one at a time, interleaved (each kind first in turn), its CPU (from /proc) from the
signed `/agent` until the run's output is in Slack and nothing is left to do; their means are
compared (each run's figure is a multiple of /proc's 10 ms tick: it takes many).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agents import set_tracing_disabled

from benchmarks.bench_agents import approvals
from benchmarks.decisions import SLOW, Bot, Process, command_body, until
from benchmarks.roundtrips import RoundTrips, counting
from bot.config import Settings
from bot.slack.blocks import APPROVE
from bot.store.connection import EmbeddedRedis
from bot.testing.harness import PRODUCTION_WINDOWS, BotHarness, wait_until

RUN_GOAL = 30
DECISION_GOAL = 15
POLICY = "channels:\n  C1:\n    approvers: [U2]\n"
# The deployer's one call is approved by a rule (the looker's tool needs no approval), or
# rejected by one when its target starts with "deploy refuse-".
AUTO_POLICY = POLICY + (
    "tools:\n  - match: deploy\n    when: {args.target: 'deploy refuse-*'}\n    auto: reject\n"
    "    reason: Not deployed by agents.\n  - match: deploy\n    auto: approve\n"
)
AUTO_CPU_GOAL = 1.2  # CPU of a run decided automatically / of a run that needs no approval
AUTO_TRIPS_GOAL = 3  # round trips more


def harness(redis_url: str, policy: str = POLICY, **settings: Any) -> BotHarness:
    """The bot as it runs in production (its windows, the requester's notice by DM)."""
    return BotHarness(
        redis_url,
        approvals,
        policy,
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


async def plain_run(bot: BotHarness, i: int, text: str = "run looker look at host-{i}") -> None:
    """`/agent looker ...` (its one tool needs no approval), until its output is shown."""
    before = set(bot.slack_api.messages)
    await bot.slack.command(text.format(i=i), user="U1", channel="C1")

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


async def auto_run(bot: BotHarness, i: int) -> None:
    """`/agent deployer ...` under `AUTO_POLICY`: its call is approved by a rule."""
    await plain_run(bot, i, "run deployer deploy auto-{i}")


async def rejected_run(bot: BotHarness, i: int) -> None:
    """`/agent deployer deploy refuse-...` under `AUTO_POLICY`: its call is rejected by a rule."""
    await plain_run(bot, i, "run deployer deploy refuse-{i}")


async def measure(
    redis_url: str, samples: int, automatic: bool = True, **settings: Any
) -> dict[str, list[Counter[str]]]:
    """Round trips of `samples` plain runs and `samples` decisions, one at a time (after one
    of each that warms up: the direct-message channel is opened once per person); with
    `automatic`, of `samples` runs whose call a rule approves, and as many it rejects, too."""
    found: dict[str, list[Counter[str]]] = {
        "run": [], "decision": [], "automatic": [], "rejected": []
    }  # fmt: skip
    with counting() as counter:
        if automatic:
            async with harness(redis_url, AUTO_POLICY, **settings) as bot:
                for kind, act in (("automatic", auto_run), ("rejected", rejected_run)):
                    for i in range(samples + 1):
                        spent = await counted(counter, bot, lambda i=i, a=act: a(bot, i))  # type: ignore[misc]
                        if i:
                            found[kind].append(spent)
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


async def cpu_per_run(
    redis_url: str, api_url: str, tmp: Path, samples: int
) -> dict[str, list[float]]:
    """The bot's CPU seconds (its own process) per run, one at a time, interleaved: a run
    whose tool needs no approval (`plain`), one whose call a rule approves (`automatic`) and
    one whose call a rule rejects (`rejected`); the first three of each warm up."""
    bot = Bot(redis_url, api_url, tmp, processes=1)  # (its CPU per run, not its spread)
    (tmp / "policy.yml").write_text(AUTO_POLICY)
    found: dict[str, list[float]] = {"plain": [], "automatic": [], "rejected": []}
    await bot.start()
    try:
        for i in range(samples + 3):
            kinds = [
                ("plain", f"run looker look at h{i}"),
                ("automatic", f"run deployer deploy a{i}"),
                ("rejected", f"run deployer deploy refuse-{i}"),
            ]
            turn = i % len(kinds)
            for kind, text in kinds[turn:] + kinds[:turn]:  # each kind first in turn
                shown = len((await bot.standin("bench.results"))["results"])

                async def done(shown: int = shown) -> bool:
                    results = (await bot.standin("bench.results"))["results"]
                    return len(results) > shown and await bot.settled()

                before = bot.cpu()
                body, headers = command_body(text)
                async with bot.session.post(bot.url, data=body, headers=headers) as response:
                    assert response.status == 200, await response.text()
                await until(done, 30 * SLOW, f"the output of {text!r}")
                if i >= 3:
                    found[kind].append(bot.cpu() - before)
    finally:
        await bot.stop()
    return found


def report_cpu(found: dict[str, list[float]]) -> None:
    """Means: /proc counts CPU in clock ticks (10 ms), so each run's figure is a multiple of a
    tick, and only many runs' mean says what a run costs (a median says which tick is common)."""
    plain, auto = (statistics.mean(found[k]) * 1000 for k in ("plain", "automatic"))
    print(f"Bot CPU per run ({len(found['plain'])} each, interleaved, from outside): its gated "
          f"call decided automatically {auto:.1f} ms, its tool needing no approval {plain:.1f} "
          f"ms: {auto / plain:.2f}x (goal <= {AUTO_CPU_GOAL}x)")  # fmt: skip
    if found.get("rejected"):
        refused = statistics.mean(found["rejected"]) * 1000
        print(f"  its gated call rejected by a rule: {refused:.1f} ms, {refused / plain:.2f}x")


def report(found: dict[str, list[Counter[str]]]) -> None:
    goals = {"run": RUN_GOAL, "decision": DECISION_GOAL}
    what = {
        "run": "a run whose one tool needs no approval, /agent to output",
        "decision": "a decision, one at a time, click to output and the requester's notice",
        "automatic": "a run whose one gated call a rule approves, /agent to output",
        "rejected": "a run whose one gated call a rule rejects, /agent to output",
    }
    plain = max(sum(s.values()) for s in found["run"])
    goals["automatic"] = plain + AUTO_TRIPS_GOAL
    goals["rejected"] = plain + AUTO_TRIPS_GOAL
    for name, samples in found.items():
        if not samples:
            continue
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
    parser.add_argument("--cpu-samples", type=int, default=40, help="runs of each kind")
    args = parser.parse_args()
    set_tracing_disabled(True)
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedRedis(Path(tmp) / "redis")
        await server.start()
        standin = Process(["-m", "benchmarks.peers", "standin"])
        try:
            found = await measure(server.url, args.samples)
            api_url = await standin.first_line()
            cpu = await cpu_per_run(server.url, api_url, Path(tmp), args.cpu_samples)
        finally:
            await standin.stop()
            server.stop()
    report(found)
    report_cpu(cpu)


if __name__ == "__main__":
    os.environ.setdefault("BENCH_ROUNDTRIPS_CALLERS", "")
    asyncio.run(main())
