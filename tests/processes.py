"""Running the bot and its workers as real processes, for tests that kill them."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp

from bot.testing.harness import BOT_TOKEN, SIGNING_SECRET, fast_environment, wait_until
from bot.testing.slack_api import FakeSlackAPI

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bot_env(slack: FakeSlackAPI, policy_file: Path, tmp_path: Path, **extra: str) -> dict[str, str]:
    prefixes = ("SLACK_", "APPROVAL_BOT_", "REDIS", "TEST_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    env.update(
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_SIGNING_SECRET=SIGNING_SECRET,
        SLACK_API_URL=slack.url,
        APPROVAL_BOT_AGENTS="tests.stateless_agents:agents",
        APPROVAL_BOT_POLICY=str(policy_file),
        APPROVAL_BOT_DATA_DIR=str(tmp_path / "data"),
        TEST_LEDGER=str(tmp_path / "ledger.jsonl"),
        PYTHONPATH=str(ROOT),
        OPENAI_API_KEY="unused",
        OPENAI_AGENTS_DISABLE_TRACING="1",
        APPROVAL_BOT_ENV_FILE="",  # a developer's .env must not change what a test runs
        TEST_HOME=str(tmp_path),
        APPROVAL_BOT_METRICS_PORT="0",  # tests that want the ops port name a free one
    )
    env.update(fast_environment())  # short windows and polls; `extra` may set them back

    env.update(extra)
    return env


def start_process(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """`python -m bot ...` in the test's own directory (never the repo, where a .env may be)."""
    return subprocess.Popen(
        [sys.executable, "-m", "bot", *args],
        cwd=env.get("TEST_HOME", ROOT),
        env=env,
        stdin=subprocess.DEVNULL,
    )


def stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(timeout=30)


@asynccontextmanager
async def running_bot(
    env: dict[str, str], port: int, *extra: str
) -> AsyncIterator[subprocess.Popen[bytes]]:
    """`approval-bot serve --http` on `port`, healthy before the block runs."""
    process = start_process(
        ["serve", "--http", "--host", "127.0.0.1", "--port", str(port), *extra], env
    )
    try:
        async with aiohttp.ClientSession() as session:

            async def healthy() -> bool:
                if process.poll() is not None:
                    raise RuntimeError(f"the bot exited with {process.returncode}")
                try:
                    async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                        return response.status == 200
                except aiohttp.ClientError:
                    return False

            await wait_until(healthy, timeout=30, what="the bot's /healthz")
        yield process
    finally:
        stop_process(process)


def ledger(tmp_path: Path) -> list[dict[str, str]]:
    path = tmp_path / "ledger.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def executions(tmp_path: Path) -> list[tuple[str, str]]:
    """(event, path) of every tool start and end, in order."""
    return [(e["event"], e["path"]) for e in ledger(tmp_path) if e["event"] in ("start", "end")]
