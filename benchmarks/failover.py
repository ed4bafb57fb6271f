"""What waiting for a replica costs (issue #21): `python -m benchmarks.failover`, in `make
bench-more`.

A primary, one replica and a sentinel (`bot.testing.cluster.LocalSentinel`), the bot on
`redis+sentinel://` (in process, the Slack stand-in, signed requests), with
`APPROVAL_BOT_REDIS_WAIT_REPLICAS` 0 and then 1 (every transition script answers only once
the replica holds its writes: `WAIT` in the same round trip). `RUNS` runs paused on one call
each, approved one at a time, each once the bot is idle again. Printed per setting: the click's
acknowledgement (its HTTP response: acks come first, before any Redis write), the time from
the click until the call is decided in Redis (the decision's transition, answered once the
replica holds it), and until the run's output is in Slack, p50 / p90 (ms).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from agents import set_tracing_disabled

from benchmarks.decisions import percentile
from benchmarks.storage import paused_runs_bot
from bot.slack.blocks import APPROVE
from bot.store import keys
from bot.testing.cluster import LocalSentinel
from bot.testing.harness import wait_until

RUNS = 30


async def one_setting(url: str, wait_replicas: int) -> tuple[list[float], list[float], list[float]]:
    """Ack, click-to-decided (the call's status in Redis) and click-to-output times (ms) of
    `RUNS` decisions, one at a time."""
    bot = paused_runs_bot(url, RUNS)
    bot.overrides["redis_wait_replicas"] = wait_replicas
    acks: list[float] = []
    decided: list[float] = []
    outputs: list[float] = []
    async with bot:
        for i in range(RUNS):
            await bot.slack.command(f"run a{i} clean", user="U1", channel="C1")
        cards = await bot.wait_for_approvals(RUNS, timeout=120)
        await bot.idle(60)
        for card in cards:
            done = sum(m.text == "ok" for m in bot.slack_api.messages.values())
            started = time.perf_counter()
            sent = await bot.slack.click(
                APPROVE, card.button_value(APPROVE), user="U2", channel=card.channel
            )
            acks.append((time.perf_counter() - started) * 1000)
            assert sent.status == 200
            key = keys.call_key(card.button_value(APPROVE))
            while await bot.runtime.redis.hget(key, "status") == b"pending":  # type: ignore[misc]
                pass  # (a round trip a look: about 0.1 ms)
            decided.append((time.perf_counter() - started) * 1000)
            await wait_until(
                lambda d=done: sum(m.text == "ok" for m in bot.slack_api.messages.values()) > d,  # type: ignore[misc]
                timeout=30,
                what="the run's output",
            )
            outputs.append((time.perf_counter() - started) * 1000)
            await bot.idle(30)
    return acks, decided, outputs


async def measure() -> None:
    set_tracing_disabled(True)
    figures: dict[int, tuple[list[float], list[float], list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        sentinel = LocalSentinel(Path(tmp))
        await asyncio.to_thread(sentinel.start)
        try:
            for wait_replicas in (0, 1, 0, 1):  # twice each, interleaved: the machine drifts
                measured = await one_setting(sentinel.url, wait_replicas)
                kept = figures.setdefault(wait_replicas, ([], [], []))
                for into, values in zip(kept, measured, strict=True):
                    into.extend(values)
        finally:
            sentinel.stop()
    print(f"Redis via Sentinel (a primary and one replica), {RUNS * 2} decisions one at a time:")
    for wait_replicas, columns in figures.items():
        shown = "; ".join(
            f"{name} p50 / p90 {statistics.median(v):.1f} / {percentile(v, 0.9):.1f} ms"
            for name, v in zip(
                ("click ack", "click -> decided", "click -> output"), columns, strict=True
            )
        )
        print(f"  APPROVAL_BOT_REDIS_WAIT_REPLICAS={wait_replicas}: {shown}")


if __name__ == "__main__":
    asyncio.run(measure())
