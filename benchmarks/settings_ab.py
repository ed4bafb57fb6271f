"""An A/B of the bot's settings, one decision at a time (#32): two bots side by side, each on
its own redis-server, clicked in alternating turns of `BLOCK`, so that the machine's drift over
the minutes this takes moves both alike.

    python -m benchmarks.settings_ab 'APPROVAL_BOT_EVENT_LOOP=asyncio' \
        'APPROVAL_BOT_EVENT_LOOP=uvloop' 8

Each argument is a bot's settings ("NAME=value ...", as BENCH_BOT_ENV); the last is the turns
counted (a turn of each first warms up, and the first click of each turn, which follows the
other bot's work, is not counted). Prints, for each bot, decision -> final output (click sent
to the run's final output at the Slack stand-in) p50 and p90, and its CPU per decision, from
the click until everything it caused is shown (the mean: /proc counts CPU in 10 ms ticks,
and idle polling while it waits is in it). The other environment of
`benchmarks.decisions` applies to both (BENCH_NOTICE=off: no requester's message).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
from pathlib import Path

from benchmarks.decisions import Bot, Process, percentile
from bot.store.connection import EmbeddedRedis

BLOCK = 6  # clicks per turn


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("a", help="the first bot's settings, e.g. APPROVAL_BOT_EVENT_LOOP=asyncio")
    parser.add_argument("b", help="the second bot's settings")
    parser.add_argument("turns", type=int, nargs="?", default=8, help="turns counted")
    args = parser.parse_args()
    arms: list[str] = [args.a, args.b]
    with tempfile.TemporaryDirectory() as tmp:
        standin = Process(["-m", "benchmarks.peers", "standin"])
        servers: list[EmbeddedRedis] = []
        bots: list[Bot] = []
        try:
            api = await standin.first_line()
            for i, arm in enumerate(arms):
                folder = Path(tmp) / str(i)
                folder.mkdir()
                server = EmbeddedRedis(folder / "redis")
                await server.start()
                servers.append(server)
                os.environ["BENCH_BOT_ENV"] = arm  # read by Bot() (its settings)
                bot = Bot(server.url, api, folder)
                bots.append(bot)
                await bot.start()
            count = BLOCK * (args.turns + 1)
            runs = [await bot.paused_runs(count, lambda i: f"deploy s{i}") for bot in bots]
            taken: list[list[float]] = [[], []]
            cpu: list[list[float]] = [[], []]
            for turn in range(args.turns + 1):
                for i in (0, 1) if turn % 2 else (1, 0):  # each first in every other turn
                    block = runs[i][turn * BLOCK : (turn + 1) * BLOCK]
                    out, _, _, (_, spent) = await bots[i].one_at_a_time(block)
                    if turn:  # the first turn warms up
                        taken[i] += out[1:]
                        cpu[i] += spent[1:]
            for i, arm in enumerate(arms):
                print(
                    f"{arm!r}: decision -> final output p50 {statistics.median(taken[i]):.2f} ms, "
                    f"p90 {percentile(taken[i], 0.9):.2f}; CPU per decision, mean "
                    f"{statistics.fmean(cpu[i]):.1f} ms; n {len(taken[i])}"
                )
        finally:
            for bot in bots:
                await bot.stop()
            await standin.stop()
            for server in servers:
                server.stop()


if __name__ == "__main__":
    asyncio.run(main())
