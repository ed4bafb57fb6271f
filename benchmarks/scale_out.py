"""Scaled out, as an operator runs it (issue #21): `python -m benchmarks.scale_out`.

Three `approval-bot serve --http --no-worker` replicas and two `approval-bot worker` processes
on a three-node Redis Cluster (`bot.testing.cluster.LocalCluster`), the Slack stand-in in a
process of its own enforcing Slack's limits (`chat.postMessage` about 1/s per channel with a
small burst, `chat.update` Tier 3 per workspace: 429 with `Retry-After` beyond them). 200 runs
are started across 4 channels through the replicas in turn, then their 200 Approve clicks are
sent all at once (200 in flight), spread over the replicas. The bot paces itself to the same
rates (its buckets shared in Redis by every replica).

Slack's rates are scaled by SCALE (default 10: posts 10/s per channel, 500 updates a minute),
bot and stand-in alike, so the run takes a minute rather than ten; the pacing is the same
arithmetic at any scale.

Printed: executions lost (approved, never run) and doubled (run twice), from the tool's own
ledger; the 429s Slack answered (and how many after the first second of the burst); the time
from the first click until every card shows its decision, and until every run's output is
posted; Web API calls per decision.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import redis.asyncio as aioredis

from benchmarks.decisions import (
    NO_START_LIMITS,
    SLOW,
    Process,
    burst,
    click_body,
    command_body,
    free_port,
    healthy,
    until,
)
from benchmarks.peers import SIGNING_SECRET, TOKEN
from bot.store import keys
from bot.store.queue import GROUP, STREAM
from bot.store.scripts import text
from bot.testing.cluster import LocalCluster

CHANNELS = ("C1", "C2", "C3", "C4")


class Deployment:
    """The replicas and workers, their stand-in, and the cluster, each process by its pid."""

    def __init__(self, tmp: Path, scale: float, replicas: int, workers: int) -> None:
        self.tmp, self.scale = tmp, scale
        self.cluster = LocalCluster(tmp / "cluster")
        self.ledger = tmp / "ledger.txt"
        self.replicas, self.workers = replicas, workers
        self.processes: list[Process] = []
        self.urls: list[str] = []
        self.api_url = ""
        self.session = aiohttp.ClientSession()
        self.first_command = 0.0

    def env(self) -> dict[str, str]:
        policy = self.tmp / "policy.yml"
        policy.write_text(
            "channels:\n" + "".join(f"  {c}:\n    approvers: [U2]\n" for c in CHANNELS)
        )
        return {
            **{k: "" for k in os.environ if k.startswith(("SLACK_", "APPROVAL_BOT_"))},
            "APPROVAL_BOT_ENV_FILE": "",
            "SLACK_BOT_TOKEN": TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_URL": self.api_url,
            "REDIS_URL": self.cluster.url,
            "APPROVAL_BOT_AGENTS": "benchmarks.bench_agents:approvals",
            "APPROVAL_BOT_POLICY": str(policy),
            "APPROVAL_BOT_METRICS_PORT": "0",
            "OPENAI_API_KEY": "unused",
            "BENCH_LEDGER": str(self.ledger),
            **NO_START_LIMITS,
            # Slack's limits as the bot paces itself, at the stand-in's scale
            "APPROVAL_BOT_SLACK_POSTS_PER_SECOND": f"{1.0 * self.scale:g}",
            "APPROVAL_BOT_SLACK_UPDATES_PER_MINUTE": f"{50.0 * self.scale:g}",
        }

    async def start(self) -> None:
        await asyncio.to_thread(self.cluster.start)
        standin = Process(["-m", "benchmarks.peers", "standin", f"{self.scale:g}"])
        self.processes.append(standin)
        self.api_url = (await standin.first_line()).rstrip("/") + "/"
        env = {k: v for k, v in self.env().items() if v or k == "APPROVAL_BOT_ENV_FILE"}
        level = os.environ.get("BENCH_LOG", "WARNING")
        for _ in range(self.replicas):
            port = free_port()
            args = ["-m", "bot", "--log-level", level, "serve", "--http", "--port", str(port)]
            # (a replica is one process here: the replicas are what is measured)
            self.processes.append(Process([*args, "--no-worker", "--processes", "1"], env))
            self.urls.append(f"http://127.0.0.1:{port}/slack/events")
        for _ in range(self.workers):
            args = ["-m", "bot", "--log-level", level, "worker", "--metrics-port", "0"]
            self.processes.append(Process(args, env))
        for url in self.urls:
            health = url.replace("/slack/events", "/healthz")
            await until(lambda h=health: healthy(self.session, h), 60 * SLOW, "a replica")  # type: ignore[misc]

    async def stop(self) -> None:
        for process in reversed(self.processes):
            await process.stop()
        await self.session.close()
        await asyncio.to_thread(self.cluster.stop)

    async def state(self) -> dict[str, Any]:
        async with self.session.get(self.api_url + "bench.state") as response:
            data: dict[str, Any] = await response.json()
            return data

    async def results(self) -> dict[str, float]:
        async with self.session.get(self.api_url + "bench.results") as response:
            data: dict[str, Any] = await response.json()
            return {str(k): float(v) for k, v in data["results"].items()}

    async def start_runs(self, count: int) -> dict[str, tuple[str, str]]:
        """`count` runs, across the channels and the replicas in turn: {approval id: (run id,
        channel)} once every card is posted."""
        sent = asyncio.Semaphore(16)

        async def command(i: int) -> None:
            channel = CHANNELS[i % len(CHANNELS)]
            body, headers = command_body(f"release {i} to {channel}", channel)
            url = self.urls[i % len(self.urls)]
            async with sent, self.session.post(url, data=body, headers=headers) as response:
                assert response.status == 200, await response.text()

        self.first_command = time.monotonic()
        await asyncio.gather(*(command(i) for i in range(count)))

        async def all_posted() -> bool:
            return len((await self.state())["cards"]) >= count

        await until(all_posted, (60 + count / 2) * SLOW, f"{count} cards")
        cards: dict[str, str] = (await self.state())["cards"]
        client = aioredis.RedisCluster.from_url(self.cluster.url)
        try:
            out = {}
            for approval_id, run_id in cards.items():
                channel = await client.hget(keys.run_key(run_id), "channel_id")
                out[approval_id] = (run_id, text(channel or b""))
        finally:
            await client.aclose()
        return out

    async def settled(self) -> bool:
        """No message due or being delivered, no job queued or running."""
        client = aioredis.RedisCluster.from_url(self.cluster.url)
        try:
            due = await client.zcard(keys.OUTBOX_INDEX)
            pending = await client.xpending(STREAM, GROUP)
            return int(due) == 0 and int(pending["pending"]) == 0
        finally:
            await client.aclose()

    def executions(self) -> Counter[str]:
        if not self.ledger.exists():
            return Counter()
        return Counter(line for line in self.ledger.read_text().splitlines() if line)


async def measure(runs: int, scale: float, replicas: int, workers: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        deployment = Deployment(Path(tmp), scale, replicas, workers)
        try:
            await deployment.start()
            cards = await deployment.start_runs(runs)
            before = await deployment.state()
            bodies = [
                click_body(approval_id, channel=channel)
                for approval_id, (_, channel) in cards.items()
            ]
            # 200 in flight, spread over the replicas (a load balancer's round robin)
            per_replica = [bodies[i :: len(deployment.urls)] for i in range(len(deployment.urls))]
            first_click = time.monotonic()
            loads = await asyncio.gather(
                *(
                    burst(url, share, max(1, runs // len(deployment.urls)))
                    for url, share in zip(deployment.urls, per_replica, strict=True)
                )
            )
            run_ids = {run_id for run_id, _ in cards.values()}

            async def all_shown() -> bool:
                state = await deployment.state()
                updated = state["cards_updated"]
                shown = sum(a in updated and updated[a] > first_click for a in cards)
                return shown == len(cards) and run_ids <= set(await deployment.results())

            await until(all_shown, (120 + runs) * SLOW, "every card and output")
            shown_at = time.monotonic()
            await until(deployment.settled, (120 + runs) * SLOW, "every message delivered")
            settled_at = time.monotonic()
            # a moment more: anything still to come (a second execution, a late 429) comes
            await asyncio.sleep(2.0)
            state = await deployment.state()
            results = await deployment.results()
            executed = deployment.executions()
            approved_targets = {
                f"release {i} to {CHANNELS[i % len(CHANNELS)]}" for i in range(runs)
            }
            limited = [t for t in state["limited_at"] if t >= first_click]
            calls = {
                m: n - before["methods"].get(m, 0)
                for m, n in state["methods"].items()
                if m in ("chat.postMessage", "chat.update")
            }
            return {
                "runs": runs,
                "clicks_ok": sum(len(load.latencies) for load in loads),
                "lost": len(approved_targets - set(executed)),
                "doubled": sum(1 for n in executed.values() if n > 1),
                "limited_starts": len([t for t in state["limited_at"] if t < first_click]),
                "limited_starts_late": len(
                    [
                        t
                        for t in state["limited_at"]
                        if deployment.first_command + 1 < t < first_click
                    ]
                ),
                "settled_s": max(settled_at, shown_at) - first_click,
                "limited": len(limited),
                "limited_late": len([t for t in limited if t > first_click + 1.0]),
                "cards_shown_s": max(state["cards_updated"][a] for a in cards) - first_click,
                "outputs_s": max(results[r] for r in run_ids) - first_click,
                "calls_per_decision": sum(calls.values()) / runs,
                "calls": calls,
            }
        finally:
            await deployment.stop()


def report(f: dict[str, Any], scale: float, replicas: int, workers: int) -> str:
    return "\n".join(
        [
            f"Scale-out ({replicas} serve --no-worker replicas + {workers} workers on a "
            f"3-node Redis Cluster; Slack's limits enforced by the stand-in at {scale:g}x "
            f"Slack's rates; {f['runs']} runs over {len(CHANNELS)} channels, their clicks all "
            "at once):",
            f"  clicks answered 200 within 3 s: {f['clicks_ok']} of {f['runs']}",
            f"  executions lost: {f['lost']}; executed twice: {f['doubled']}",
            f"  429s from Slack during the burst: {f['limited']} "
            f"({f['limited_late']} after its first second); while the runs started: "
            f"{f['limited_starts']} ({f['limited_starts_late']} after their first second)",
            f"  every card shows its decision after {f['cards_shown_s']:.1f} s "
            f"(about {f['cards_shown_s'] * scale:.0f} s at Slack's real rates); every output "
            f"posted after {f['outputs_s']:.1f} s; every run message up to date (nothing "
            f"left to deliver) after {f['settled_s']:.1f} s",
            f"  Web API calls per decision: {f['calls_per_decision']:.2f} "
            + ", ".join(f"({m} {n})" for m, n in f["calls"].items()),
        ]
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--scale", type=float, default=10.0)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    figures = await measure(args.runs, args.scale, args.replicas, args.workers)
    print(report(figures, args.scale, args.replicas, args.workers))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    asyncio.run(main())
