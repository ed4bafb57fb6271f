"""Running the bot and its workers as real processes, for tests that kill them."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp

from bot.testing.harness import BOT_TOKEN, SIGNING_SECRET, fast_environment, wait_until
from bot.testing.slack_api import FakeSlackAPI
from tests.forkserver import ForkedProcess, fork_bot

ROOT = Path(__file__).resolve().parents[1]


# Ports for the bots these tests start: below the kernel's ephemeral range (32768 and up), where
# every outgoing connection takes its local port (CI saw a bot fail to bind a port the kernel had
# handed out as "free", then given to a connection), and a block of them per pytest-xdist worker,
# so two workers never pick the same one.
PORTS_FROM, PORTS_PER_WORKER = 20_000, 1_500
_next_port = 0


def free_port() -> int:
    """A port nothing listens on, that no other test worker will pick."""
    global _next_port
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    base = PORTS_FROM + (int(worker) if worker.isdigit() else 0) % 8 * PORTS_PER_WORKER
    for _ in range(PORTS_PER_WORKER):
        port = base + _next_port
        _next_port = (_next_port + 1) % PORTS_PER_WORKER
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {base}..{base + PORTS_PER_WORKER}")


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


def start_process(args: list[str], env: dict[str, str]) -> ForkedProcess:
    """`python -m bot ...` in the test's own directory (never the repo, where a .env may be),
    forked from the test fork server (see `tests.forkserver`)."""
    return fork_bot(args, env=env, cwd=env.get("TEST_HOME", ROOT))


def stop_process(process: ForkedProcess) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(timeout=30)


@asynccontextmanager
async def running_bot(env: dict[str, str], port: int, *extra: str) -> AsyncIterator[ForkedProcess]:
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
