"""What a second opinion (#33 part 2) adds to a card (run: `python -m benchmarks.advisor`).

The whole bot in this process (`bot.testing.harness.BotHarness`: signed Slack requests over
real HTTP, an embedded redis-server, the Slack stand-in), ROUNDS runs one after another, each
pausing on one gated call (left pending). Without an advisor, then with a scripted one whose
model answers after LATENCY seconds (0: the bot's own cost alone; 1: a quick model).

Figures (p50 / max over the runs):
- /agent -> card: from the signed command to the stand-in holding the card (the advisor is
  asked only after it is posted: the same with or without one);
- card -> advice on it: to the card's update with the advice; minus the model's LATENCY, what
  the bot adds (reading the call, the advisor run in the SDK, the transition, the redraw);
- Slack calls per card (the advice is one `chat.update` more).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agents import Agent, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, function_call

from bot.store.connection import EmbeddedRedis
from bot.testing.advisors import scripted_advisor
from bot.testing.harness import BotHarness
from bot.testing.slack_api import FakeSlackAPI, Message

ROUNDS = 10
LATENCIES = (0.0, 1.0)
POLICY = """
channels:
  C1:
    starters: ["*"]
    approvers: [U2]
"""
UNLIMITED = {"user_start_burst": 0, "channel_start_burst": 0, "user_open_runs": 0,
             "channel_open_runs": 0}  # fmt: skip


@function_tool(needs_approval=True)
def delete_user(name: str) -> str:
    """Delete a user account."""
    return f"deleted {name}"


async def poll(condition: Any, what: str, timeout: float = 60.0) -> Any:
    """`condition()` once it is truthy, looked at every 2 ms (the harness's waits: 20 ms)."""
    deadline = time.perf_counter() + timeout
    while not (found := condition()):
        if time.perf_counter() > deadline:
            raise TimeoutError(f"waiting for {what}")
        await asyncio.sleep(0.002)
    return found


def cards(slack: FakeSlackAPI) -> list[Message]:
    return [m for m in slack.approval_messages() if m.action_ids()]


async def rounds(redis_url: str, latency: float | None) -> dict[str, list[float]]:
    """ROUNDS runs, each paused on one card; `latency`: the advisor model's (None: none)."""
    steps: list[Any] = [
        [function_call("delete_user", {"name": f"u{n}"}, call_id=f"c{n}")] for n in range(ROUNDS)
    ]
    agent = Agent(name="ops", instructions="You operate.", model=ScriptedModel(steps),
                  tools=[delete_user])  # fmt: skip

    async def answer(card: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(latency or 0.0)
        return {"risk": "high", "rationale": "Deletes an account.", "concerns": ["irreversible"]}

    advisor = scripted_advisor(answer) if latency is not None else None
    figures: dict[str, list[float]] = {"card": [], "advice": [], "calls": []}
    async with BotHarness(redis_url, agent, POLICY, settings=UNLIMITED, advisor=advisor) as bot:
        slack = bot.slack_api
        for n in range(ROUNDS):
            before, calls = len(cards(slack)), len(slack.calls)
            began = time.perf_counter()
            await bot.slack.command(f"delete u{n}", user="U1", channel="C1")
            found = await poll(lambda b=before: cards(slack)[b:], f"card {n}")
            posted = time.perf_counter()
            figures["card"].append(posted - began)
            if advisor is not None:
                card = found[0]
                await poll(
                    lambda c=card: "Second opinion" in slack.messages[(c.channel, c.ts)].all_text(),
                    f"advice on card {n}",
                )
                figures["advice"].append(time.perf_counter() - posted)
            await bot.idle()
            figures["calls"].append(float(len(slack.calls) - calls))
    return figures


def line(name: str, values: list[float], unit: str) -> str:
    p50, top = statistics.median(values), max(values)
    return f"  {name:<40} p50 {p50:7.3f}{unit}  max {top:7.3f}{unit}"


async def main() -> None:
    set_tracing_disabled(True)
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedRedis(Path(tmp))
        await server.start()
        try:
            print(f"A second opinion on the card: {ROUNDS} runs, one card each")
            for latency in (None, *LATENCIES):
                figures = await rounds(server.url, latency)
                title = "no advisor" if latency is None else f"advisor, model {latency:g} s"
                print(f"{title}:")
                print(line("/agent -> card", figures["card"], " s"))
                if latency is not None:
                    print(line("card -> advice on it", figures["advice"], " s"))
                    added = [a - latency for a in figures["advice"]]
                    print(line("  of which the bot's (minus the model's)", added, " s"))
                print(line("Slack calls per run", figures["calls"], ""))
        finally:
            server.stop()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
