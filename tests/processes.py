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


# Ports for the servers these tests start. A port chosen as "free" and bound later by the bot
# could be taken meanwhile (by another test worker, by another suite running on the same
# machine, by an outgoing connection given it as its local port), so each is bound here at once
# (to port 0: the kernel's choice) and the socket itself is handed to the process that serves
# on it (`bot.listening`: as systemd's socket activation does). Until then nothing listens on
# it: a connection is refused, as to a port nothing serves.
_HELD: dict[int, socket.socket] = {}
PORT_OPTIONS = ("--port", "--metrics-port")


def free_port() -> int:
    """A port bound (not listened on) by this process until a server started with it takes the
    socket: `start_process` / `listeners_for` hand it to a bot started with `--port` or
    `--metrics-port` set to it, `take_socket` to a server of the test's own. One port, one
    server: a bot restarted needs a new port (the same one named again is not handed over, so
    the bot tries to bind it itself, as a second worker on a taken metrics port does)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    _HELD[port] = sock
    return port


def take_socket(port: int) -> socket.socket:
    """The bound socket of `port` (from `free_port`), for the caller to serve on (aiohttp:
    `web.SockSite(runner, sock)`); no longer held here."""
    return _HELD.pop(port)


def listeners_for(args: list[str]) -> list[socket.socket]:
    """The held sockets of the ports `args` tells a bot to listen on (taken: the caller hands
    them to the child and closes its own copies)."""
    wanted = [args[i + 1] for i, arg in enumerate(args[:-1]) if arg in PORT_OPTIONS]
    return [_HELD.pop(int(port)) for port in wanted if port.isdigit() and int(port) in _HELD]


def fork_with_ports(
    args: list[str], *, env: dict[str, str], cwd: Path | str, stdout: int | None = None,
    stderr: int | None = None,
) -> ForkedProcess:  # fmt: skip
    """`fork_bot`, handing the child the sockets of the ports its arguments name."""
    listeners = listeners_for(args)
    try:
        return fork_bot(args, env=env, cwd=cwd, stdout=stdout, stderr=stderr, listeners=listeners)
    finally:
        for sock in listeners:
            sock.close()  # the child has its own copy


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
        APPROVAL_BOT_PROCESSES="1",  # one serving process (tests/test_serving_processes.py: more)
    )
    env.update(fast_environment())  # short windows and polls; `extra` may set them back

    env.update(extra)
    return env


def start_process(args: list[str], env: dict[str, str]) -> ForkedProcess:
    """`python -m bot ...` in the test's own directory (never the repo, where a .env may be),
    forked from the test fork server (see `tests.forkserver`), given its ports' sockets."""
    return fork_with_ports(args, env=env, cwd=env.get("TEST_HOME", ROOT))


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
