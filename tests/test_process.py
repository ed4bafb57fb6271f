"""The bot as a real process: `approval-bot serve`, killed and restarted while a run waits."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from pathlib import Path

import pytest

from bot.slack.blocks import APPROVE
from bot.store.connection import EmbeddedRedis
from bot.testing.harness import BOT_TOKEN, SIGNING_SECRET, wait_until
from bot.testing.requests import SlackRequests
from bot.testing.slack_api import FakeSlackAPI
from tests.forkserver import run_bot
from tests.processes import bot_env, executions, free_port, running_bot


async def test_sigkill_while_waiting_then_a_new_process_resumes(
    slack: FakeSlackAPI, policy_file: Path, tmp_path: Path, redis_url: str
) -> None:
    # The killed process may hold the run's delivery lease: the new one delivers once it expires,
    # so the lease is short here (a real deployment waits up to one lease, 30 s by default).
    env = bot_env(
        slack, policy_file, tmp_path, REDIS_URL=redis_url, APPROVAL_BOT_JOB_LEASE_SECONDS="2"
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}/slack/events"
    async with running_bot(env, port) as first, SlackRequests(url, SIGNING_SECRET) as requests:
        assert (await requests.command("/var/log/app", user="U1", channel="C1")).status == 200
        [approval] = await wait_until(lambda: slack.approval_messages(), what="approval message")
        first.send_signal(signal.SIGKILL)
        await asyncio.to_thread(first.wait, 10)
    port = free_port()  # the new process's
    url = f"http://127.0.0.1:{port}/slack/events"
    async with running_bot(env, port), SlackRequests(url, SIGNING_SECRET) as requests:
        sent = await requests.click(
            APPROVE, approval.button_value(APPROVE), user="U2", channel="C1"
        )
        assert sent.status == 200
        await wait_until(
            lambda: any(
                "tool said: deleted /var/log/app" in m.text for m in slack.messages.values()
            ),
            what="the resumed run's output",
        )
    assert executions(tmp_path) == [("start", "/var/log/app"), ("end", "/var/log/app")]


async def test_embedded_redis_keeps_pending_approvals_across_a_restart(
    slack: FakeSlackAPI, policy_file: Path, tmp_path: Path
) -> None:
    """Without REDIS_URL the bot runs its own redis-server with AOF in the data directory."""
    env = bot_env(slack, policy_file, tmp_path)
    port = free_port()
    url = f"http://127.0.0.1:{port}/slack/events"
    async with running_bot(env, port) as first, SlackRequests(url, SIGNING_SECRET) as requests:
        await requests.command("/srv/old", user="U1", channel="C1")
        [approval] = await wait_until(lambda: slack.approval_messages(), what="approval message")
        first.send_signal(signal.SIGTERM)  # a clean stop also stops the embedded redis-server
        # Wait off the event loop: the Slack stand-in the bot is still talking to runs on it.
        assert await asyncio.to_thread(first.wait, 30) == 0
    assert (tmp_path / "data" / "appendonlydir").is_dir()
    port = free_port()  # the new process's
    url = f"http://127.0.0.1:{port}/slack/events"
    async with running_bot(env, port), SlackRequests(url, SIGNING_SECRET) as requests:
        await requests.click(APPROVE, approval.button_value(APPROVE), user="U3", channel="C1")
        await wait_until(
            lambda: any("tool said: deleted /srv/old" in m.text for m in slack.messages.values()),
            what="the resumed run's output",
        )
        # The audit export finds the running bot's own redis-server (no second server).
        exported = run_bot(["audit", "--since", "1h"], cwd=tmp_path, env=env, check=True)
        kinds = [json.loads(line)["kind"] for line in exported.stdout.splitlines()]
        assert kinds[:2] == ["run_started", "paused"] and "run_finished" in kinds
    assert executions(tmp_path) == [("start", "/srv/old"), ("end", "/srv/old")]


async def test_serve_refuses_to_start_without_a_valid_policy(
    slack: FakeSlackAPI, tmp_path: Path
) -> None:
    bad = tmp_path / "policy.yml"
    bad.write_text("channels:\n  general:\n    approvers: []\n")
    env = bot_env(slack, bad, tmp_path, REDIS_URL="redis://127.0.0.1:1/0")
    env.pop("SLACK_SIGNING_SECRET")
    # (It stops before it would serve: the port is never bound.)
    result = run_bot(["serve", "--http", "--port", str(free_port())], cwd=tmp_path, env=env)
    assert result.returncode == 1
    assert "'general' is not a channel id" in result.stderr
    assert "approvers: List should have at least 1 item" in result.stderr
    assert "SLACK_SIGNING_SECRET is not set" in result.stderr
    assert BOT_TOKEN not in result.stderr + result.stdout


async def test_serve_without_redis_says_how_to_get_one(
    slack: FakeSlackAPI, policy_file: Path, tmp_path: Path
) -> None:
    env = bot_env(slack, policy_file, tmp_path)
    env["PATH"] = str(tmp_path / "empty-bin")  # no redis-server anywhere
    # (It stops before it would serve: the port is never bound.)
    result = run_bot(["serve", "--http", "--port", str(free_port())], cwd=tmp_path, env=env)
    assert result.returncode == 1
    assert "no `redis-server` is on PATH" in result.stderr
    assert "apt-get install redis-server" in result.stderr and "REDIS_URL" in result.stderr


async def test_a_redis_server_left_by_a_killed_bot_is_stopped_before_a_new_one(
    tmp_path: Path,
) -> None:
    first = EmbeddedRedis(tmp_path)
    await first.start()
    assert first.process is not None
    # The bot is SIGKILLed: its redis-server (in its own session) keeps running.
    second = EmbeddedRedis(tmp_path)
    await second.start()
    try:
        assert first.process.wait(timeout=10) == 0  # shut down cleanly, AOF written
        assert await EmbeddedRedis.running_url(tmp_path) == second.url
    finally:
        second.stop()
        first.stop()


async def test_an_embedded_redis_whose_port_was_taken_first_starts_on_another(
    tmp_path: Path,
) -> None:
    """The port was free when chosen, and another server took it before redis-server bound
    it: the bot's Redis starts on another port, and the bot never talks to the other server."""
    server = EmbeddedRedis(tmp_path)
    with socket.socket() as other:
        other.bind(("127.0.0.1", server.port))
        other.listen()  # accepts, never answers
        taken = server.port
        await server.start()
        try:
            assert server.port != taken
            assert await EmbeddedRedis.running_url(tmp_path) == server.url
        finally:
            server.stop()


def redis_servers_on(data_dir: Path) -> list[int]:
    """Pids of the redis-server processes keeping their data in `data_dir` (their cwd)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if (proc / "comm").read_text().strip() == "redis-server" and Path(
                os.readlink(proc / "cwd")
            ) == data_dir:
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal: Linux")
async def test_a_killed_bots_embedded_redis_server_goes_with_it(
    slack: FakeSlackAPI, policy_file: Path, tmp_path: Path
) -> None:
    env = bot_env(slack, policy_file, tmp_path)
    data_dir = (tmp_path / "data").resolve()
    async with running_bot(env, free_port()) as bot:
        assert len(redis_servers_on(data_dir)) == 1
        bot.send_signal(signal.SIGKILL)
        await asyncio.to_thread(bot.wait, 10)
        await wait_until(lambda: not redis_servers_on(data_dir), what="redis-server to exit")
    assert await EmbeddedRedis.running_url(data_dir) is None
    assert "Redis is now ready to exit" in (data_dir / "redis.log").read_text()  # clean stop
