"""Jobs per second through the Redis Streams work queue, with 1 and 2 worker processes.

Each job starts a run of an agent whose (scripted) model answers at once, so the figure is the
bot's own cost per job: taking it, running the SDK, recording the end, posting the output to the
local Slack stand-in, acknowledging. Run: `.venv/bin/python benchmarks/queue_throughput.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis.asyncio as aioredis

from bot.store import keys
from bot.store.connection import EmbeddedRedis
from bot.store.queue import JobQueue
from bot.store.records import RunRecord
from bot.store.runs import RunStore, now
from bot.testing.slack_api import FakeSlackAPI

ROOT = Path(__file__).resolve().parents[1]


async def measure(workers: int, jobs: int, redis_url: str, slack: FakeSlackAPI, tmp: Path) -> float:
    client = aioredis.Redis.from_url(redis_url)
    await client.flushall()
    store = RunStore(client, retention_seconds=3600)
    queue = JobQueue(client, lease_seconds=30)
    await queue.ensure_group()
    policy = tmp / "policy.yml"
    policy.write_text("channels:\n  C1:\n    approvers: [U2]\n")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVAL_BOT_"))},
        "SLACK_BOT_TOKEN": "xoxb-bench",
        "SLACK_API_URL": slack.url,
        "REDIS_URL": redis_url,
        "APPROVAL_BOT_AGENTS": "benchmarks.bench_agents:agents",
        "APPROVAL_BOT_POLICY": str(policy),
        "APPROVAL_BOT_WORKER_CONCURRENCY": "16",
        "OPENAI_API_KEY": "unused",
        "APPROVAL_BOT_METRICS_PORT": "0",  # several workers on one machine
        "PYTHONPATH": str(ROOT),
    }
    command = [
        sys.executable,
        "-m",
        "bot",
        "--log-level",
        os.environ.get("BENCH_LOG", "WARNING"),
        "worker",
    ]
    procs = [
        subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL)  # noqa: ASYNC220
        for _ in range(workers)
    ]
    try:
        await asyncio.sleep(3)  # let the workers import and connect
        thread_ts = slack._chat_postMessage({"channel": "C1", "text": "bench"})["ts"]
        runs = []
        for i in range(jobs):
            stamp = float(now())
            run = RunRecord(
                run_id=keys.new_run_id(), team_id="T1", user_id="U1", channel_id="C1",
                agent_name="bench", task=f"job {i}", owner=f"bench:{i}", message_ts=thread_ts,
                created_at=stamp, updated_at=stamp,
            )  # fmt: skip
            await store.create_run(run)
            runs.append(run)
        started = time.perf_counter()
        pipe = client.pipeline(transaction=False)
        for run in runs:
            pipe.xadd("ab:jobs", {"kind": "start", "run_id": run.run_id, "execution": run.owner})
        await pipe.execute()
        while True:
            pipe = client.pipeline(transaction=False)
            for run in runs:
                pipe.hget(keys.run_key(run.run_id), "status")
            statuses = await pipe.execute()
            if all(s == b"finished" for s in statuses):
                break
            await asyncio.sleep(0.02)
        elapsed = time.perf_counter() - started
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:  # wait without blocking the loop: the Slack stand-in runs on it
            await asyncio.to_thread(proc.wait, 60)
        await client.aclose()
    return jobs / elapsed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=400)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedRedis(Path(tmp) / "redis")
        await server.start()
        try:
            async with FakeSlackAPI() as slack:
                for workers in (1, 2):
                    rate = await measure(workers, args.jobs, server.url, slack, Path(tmp))
                    print(
                        f"{workers} worker process(es): {rate:.0f} jobs/s ({args.jobs} start jobs)"
                    )
        finally:
            server.stop()


if __name__ == "__main__":
    asyncio.run(main())
