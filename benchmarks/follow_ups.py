"""Talking to a run (#20, `make bench`): follow-ups in a run's thread, one after another.

The whole bot in this process (`bot.testing.harness.BotHarness`: signed Slack requests over real
HTTP, an embedded redis-server, the Slack stand-in), one run, then TURNS follow-ups by its
starter, each sent once the previous turn's answer is final. The model is scripted: each
answer is streamed in PIECES pieces GAP seconds apart (a model writing for about
PIECES * GAP seconds), or whole (`short`: done at once, as a short answer is).

Figures, per follow-up turn (p50 / max over the turns):
- reply -> first words: from sending the signed reply event to the stand-in holding the
  turn's answer message with its first words (streamed: posted while the model writes);
- reply -> final answer: to that message holding the whole answer;
- Slack Web API calls the turn cost (every method, counted at the stand-in).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agents import Agent, set_tracing_disabled
from agents.testing import assistant_message

from bot.store.connection import EmbeddedRedis
from bot.testing.harness import BotHarness, wait_until
from bot.testing.models import SlowWriter
from bot.testing.slack_api import FakeSlackAPI, Message

TURNS = 10
PIECES, GAP = 8, 0.4
POLICY = """
channels:
  C1:
    starters: ["*"]
    approvers: [U2]
"""


def answer(n: int) -> str:
    return f"Answer {n}: " + " ".join(f"word{i}" for i in range(60)) + f" (end of {n})."


def thread(slack: FakeSlackAPI) -> list[Message]:
    runs = [m for m in slack.top_level() if "started agent" in m.all_text()]
    return slack.thread(runs[-1].channel, runs[-1].ts) if runs else []


async def turns(redis_url: str, streamed: bool) -> dict[str, list[float]]:
    steps: list[Any] = [[assistant_message(answer(n))] for n in range(TURNS + 1)]
    model = SlowWriter(steps, pieces=PIECES, gap=GAP) if streamed else SlowWriter(
        steps, pieces=1, gap=0.0
    )  # fmt: skip
    agent = Agent(name="ops", instructions="You answer.", model=model)
    figures: dict[str, list[float]] = {"first": [], "final": [], "calls": []}
    unlimited = {
        "user_start_burst": 0, "channel_start_burst": 0, "user_open_runs": 0,
        "stream_answers": True,
    }  # fmt: skip
    async with BotHarness(redis_url, agent, POLICY, settings=unlimited) as bot:
        slack = bot.slack_api
        await bot.slack.command("start", user="U1", channel="C1")
        await wait_until(
            lambda: any("(end of 0)." in m.all_text() for m in thread(slack)), timeout=60
        )
        await bot.idle()
        for n in range(1, TURNS + 1):
            run = bot.run_message()
            before = len(slack.calls)
            sent_at = time.perf_counter()
            await bot.slack.thread_reply(f"and now {n}?", user="U1", channel="C1", thread_ts=run.ts)

            start, end = f"Answer {n}:", f"(end of {n})."

            def begun(start: str = start) -> bool:
                return any(start in m.all_text() for m in thread(slack))

            def ended(end: str = end) -> bool:
                return any(end in m.all_text() for m in thread(slack))

            await wait_until(begun, timeout=60, what=f"turn {n}'s first words")
            figures["first"].append(time.perf_counter() - sent_at)
            await wait_until(ended, timeout=60, what=f"turn {n}")
            figures["final"].append(time.perf_counter() - sent_at)
            await bot.idle()
            figures["calls"].append(float(len(slack.calls) - before))
    return figures


def line(name: str, values: list[float], unit: str) -> str:
    return f"  {name:<28} p50 {statistics.median(values):7.2f}{unit}  max {max(values):7.2f}{unit}"


async def main() -> None:
    set_tracing_disabled(True)
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedRedis(Path(tmp))
        await server.start()
        try:
            print(f"Follow-ups in a run's thread: {TURNS} turns, one after another")
            for streamed, title in (
                (True, f"streamed answers ({PIECES} pieces {GAP} s apart)"),
                (False, "short answers (done at once)"),
            ):
                figures = await turns(server.url, streamed)
                print(f"{title}:")
                print(line("reply -> first words", figures["first"], " s"))
                print(line("reply -> final answer", figures["final"], " s"))
                print(line("Slack calls per turn", figures["calls"], ""))
        finally:
            server.stop()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
