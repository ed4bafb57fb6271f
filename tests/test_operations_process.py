"""Operating the bot as real processes: the worker's and Socket Mode's metrics and health port,
JSON logs, log levels, Bolt's start-up warning, and a shutdown that fits its budget."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest

from bot.slack.blocks import APPROVE
from bot.store.connection import EmbeddedRedis
from bot.testing.harness import BOT_TOKEN, SIGNING_SECRET, wait_until
from bot.testing.requests import SlackRequests
from bot.testing.slack_api import FakeSlackAPI
from tests.forkserver import ForkedProcess
from tests.processes import (
    ROOT,
    bot_env,
    fork_with_ports,
    free_port,
    ledger,
    running_bot,
    stop_process,
)
from tests.test_operations import METRICS


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "stderr.log"
    yield path


def spawn(args: list[str], env: dict[str, str], stderr: Path) -> ForkedProcess:
    with stderr.open("ab") as sink:
        return fork_with_ports(args, env=env, cwd=ROOT, stderr=sink.fileno())


def read(path: Path) -> str:
    return path.read_text()


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.text()


async def wait_ready(process: subprocess.Popen[bytes], base: str) -> None:
    async def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"the process exited with {process.returncode}")
        try:
            return (await get(f"{base}/readyz"))[0] == 200
        except aiohttp.ClientError:
            return False

    await wait_until(ready, timeout=30, what=f"{base}/readyz")


async def terminate(process: subprocess.Popen[bytes], within: float) -> float:
    """SIGTERM; the seconds until it exited (fails if it takes longer than `within`)."""
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        code = await asyncio.to_thread(process.wait, within)
    except subprocess.TimeoutExpired:
        stop_process(process)
        raise AssertionError(f"still running {within}s after SIGTERM") from None
    assert code == 0
    return time.monotonic() - started


@asynccontextmanager
async def own_redis(tmp_path: Path) -> AsyncIterator[EmbeddedRedis]:
    server = EmbeddedRedis(tmp_path / "redis")
    await server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_worker_serves_metrics_health_and_readiness_and_logs_json(
    slack: FakeSlackAPI, policy_file: Path, tmp_path: Path, logs: Path
) -> None:
    async with own_redis(tmp_path) as redis_server:
        env = bot_env(
            slack, policy_file, tmp_path, REDIS_URL=redis_server.url, APPROVAL_BOT_LOG_FORMAT="json"
        )
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        worker = spawn(["worker", "--metrics-port", str(port)], env, logs)
        try:
            await wait_ready(worker, base)
            assert (await get(f"{base}/healthz"))[0] == 200
            status, text = await get(f"{base}/metrics")
            assert status == 200
            for name in METRICS:
                assert f"# TYPE {name} " in text
            redis_server.stop()
            assert (await get(f"{base}/readyz"))[0] == 503
            assert (await get(f"{base}/healthz"))[0] == 200  # alive while Redis is away
            await terminate(worker, within=30)
        finally:
            stop_process(worker)
    lines = [line for line in read(logs).splitlines() if line.strip()]
    entries = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all({"time", "level", "logger", "message"} <= set(e) for e in entries)
    assert any("taking jobs" in e["message"] and e["level"] == "INFO" for e in entries)
    assert any(e["message"].startswith("metrics and health on") for e in entries)
    assert BOT_TOKEN not in read(logs)


async def test_socket_mode_serves_metrics_and_health_on_its_port(
    slack: FakeSlackAPI, policy_file: Path, tmp_path: Path, redis_url: str, logs: Path
) -> None:
    env = bot_env(slack, policy_file, tmp_path, REDIS_URL=redis_url, SLACK_APP_TOKEN="xapp-test")
    env.pop("SLACK_SIGNING_SECRET")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    bot = spawn(["serve", "--socket", "--metrics-port", str(port)], env, logs)
    try:
        await wait_ready(bot, base)
        assert (await get(f"{base}/healthz"))[0] == 200
        assert "approval_bot_decisions_total" in (await get(f"{base}/metrics"))[1]
        assert slack.sockets  # and it is connected to Slack
        await terminate(bot, within=30)
    finally:
        stop_process(bot)


async def test_serve_starts_without_bolt_token_warning_and_log_level_is_honoured(
    slack: FakeSlackAPI, policy_file: Path, tmp_path: Path, redis_url: str, logs: Path
) -> None:
    env = bot_env(slack, policy_file, tmp_path, REDIS_URL=redis_url)  # SLACK_BOT_TOKEN is set
    port = free_port()
    bot = spawn(["serve", "--http", "--port", str(port)], env, logs)
    try:
        await wait_ready(bot, f"http://127.0.0.1:{port}")
        await terminate(bot, within=30)
    finally:
        stop_process(bot)
    text = read(logs)
    assert "serving Slack on" in text
    assert "will be unused" not in text
    # --log-level WARNING (after the command) hides the INFO lines.
    quiet_logs = tmp_path / "quiet.log"
    port = free_port()
    quiet = spawn(
        ["serve", "--http", "--port", str(port), "--log-level", "warning"], env, quiet_logs
    )
    try:
        await wait_ready(quiet, f"http://127.0.0.1:{port}")
        await terminate(quiet, within=30)
    finally:
        stop_process(quiet)
    assert "serving Slack on" not in read(quiet_logs)


async def test_sigterm_with_a_hung_job_exits_within_the_drain_budget(
    slack: FakeSlackAPI, policy_file: Path, tmp_path: Path, redis_url: str
) -> None:
    env = bot_env(
        slack,
        policy_file,
        tmp_path,
        REDIS_URL=redis_url,
        TEST_BLOCK="during_tool",  # the approved tool hangs
        APPROVAL_BOT_DRAIN_SECONDS="3",
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}/slack/events"
    async with running_bot(env, port) as bot, SlackRequests(url, SIGNING_SECRET) as requests:
        await requests.command("/var/log/app", user="U1", channel="C1")
        [approval] = await wait_until(lambda: slack.approval_messages(), what="approval message")
        await requests.click(APPROVE, approval.button_value(APPROVE), user="U2", channel="C1")
        await wait_until(
            lambda: any(e["event"] == "blocked" for e in ledger(tmp_path)), what="the hung tool"
        )
        # The tool hangs for ever: that the process exits at all is the budget cutting the drain
        # short (the bound is generous: closing Redis and exiting take a loaded machine long).
        await terminate(bot, within=30)


async def test_a_worker_whose_metrics_port_is_taken_says_so_and_keeps_working(
    slack: FakeSlackAPI, policy_file: Path, tmp_path: Path, redis_url: str, logs: Path
) -> None:
    """Several workers on one machine: the second cannot have the port, and still runs."""
    env = bot_env(slack, policy_file, tmp_path, REDIS_URL=redis_url)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    first = spawn(["worker", "--metrics-port", str(port)], env, tmp_path / "first.log")
    second = None
    try:
        await wait_ready(first, base)
        second = spawn(["worker", "--metrics-port", str(port)], env, logs)
        # A worker's start imports the SDK (seconds of CPU on a loaded machine).
        await wait_until(
            lambda: "Going on without /metrics" in read(logs), timeout=40, what="the warning"
        )
        assert second.poll() is None
        await terminate(second, within=30)
        await terminate(first, within=30)
    finally:
        stop_process(first)
        if second is not None:
            stop_process(second)
    assert f"cannot serve /metrics on 127.0.0.1:{port}" in read(logs)
