"""`serve --http --processes 2`: two whole bots forked by a supervisor, sharing one listening
socket, as real processes over real HTTP with signed requests and a real redis-server.

Which process handles a request is whichever accepts its connection first; to make that
certain, a test stops (SIGSTOP) every other serving process while a new keep-alive connection
is answered once: only one process could have accepted it, and every later request on that
connection goes to the same process."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlencode

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bot.processes import (
    PER_CORE_AT_MOST,
    cgroup_cpu_quota,
    cores,
    metrics_directory,
    process_count,
)
from bot.slack.blocks import APPROVE
from bot.testing.harness import SIGNING_SECRET, wait_until
from bot.testing.requests import SlackRequests, signature_headers
from bot.testing.slack_api import FakeSlackAPI
from tests.forkserver import ForkedProcess
from tests.processes import bot_env, executions, free_port, running_bot
from tests.test_process import redis_servers_on

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc; parent-death signal: Linux"
)


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command's name (None: no such process)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def serving(supervisor: int) -> list[int]:
    """The supervisor's serving processes (its children but the embedded redis-server)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        pid = int(stat.parent.name)
        fields = _stat(pid)
        if fields and fields[1] == str(supervisor) and fields[0] != "Z":
            try:
                if (stat.parent / "comm").read_text().strip() != "redis-server":
                    found.append(pid)
            except OSError:
                continue
    return sorted(found)


def gone(pid: int) -> bool:
    fields = _stat(pid)
    return fields is None or fields[0] in ("Z", "X")  # (a zombie has stopped)


class Pinned:
    """One keep-alive HTTP/1.1 connection to the bot: every request on it goes to the process
    that accepted it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def send(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {len(body)}"]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        await self.writer.drain()
        status = int((await self.reader.readline()).split()[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    async def form(self, fields: dict[str, str]) -> int:
        """POST signed form `fields` to /slack/events, as Slack sends them; the status."""
        body = urlencode(fields).encode()
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            **signature_headers(body, SIGNING_SECRET),
        }
        status, _ = await self.send("POST", "/slack/events", body, headers)
        return status

    async def command(self, text: str, *, user: str) -> int:
        return await self.form(SLACK.command_fields(text, user=user, channel="C1"))

    async def click(self, value: str, *, user: str) -> int:
        payload = SLACK.click_payload(APPROVE, value, user=user, channel="C1")
        return await self.form({"payload": json.dumps(payload)})

    def close(self) -> None:
        self.writer.close()


SLACK = SlackRequests("", SIGNING_SECRET)  # (builds the signed requests' fields only)


async def pinned(port: int, to: int, others: list[int]) -> Pinned:
    """A connection accepted by serving process `to`: the `others` are stopped until it was
    answered once."""
    for pid in others:
        os.kill(pid, signal.SIGSTOP)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        connection = Pinned(reader, writer)
        status, _ = await connection.send("GET", "/healthz")
        assert status == 200
    finally:
        for pid in others:
            os.kill(pid, signal.SIGCONT)
    return connection


async def answers(session: aiohttp.ClientSession, url: str) -> bool:
    try:
        async with session.get(url) as response:
            return response.status == 200 and "approval_bot_" in await response.text()
    except aiohttp.ClientError:
        return False


async def two_serving(bot: ForkedProcess) -> list[int]:
    return list(await wait_until(lambda: len(found := serving(bot.pid)) == 2 and found))


async def the_output(slack: FakeSlackAPI, path: str) -> None:
    """Wait for the run's output: the tool deleted `path`."""
    await wait_until(
        lambda: any(f"tool said: deleted {path}" in m.text for m in slack.messages.values()),
        what="the run's output",
    )


async def test_a_decision_clicked_on_two_processes_at_once_is_consumed_once(
    slack: FakeSlackAPI, policy_file: Path, tmp_path: Path, redis_url: str
) -> None:
    env = bot_env(slack, policy_file, tmp_path, REDIS_URL=redis_url)
    port, metrics = free_port(), free_port()
    async with running_bot(env, port, "--processes", "2", "--metrics-port", str(metrics)) as bot:
        first, second = await two_serving(bot)
        # The serving processes' operations endpoints, on the metrics port.
        async with aiohttp.ClientSession() as session:
            url = f"http://127.0.0.1:{metrics}/metrics"
            await wait_until(lambda: answers(session, url), what="its /metrics")
        on_first = await pinned(port, first, [second])
        on_second = await pinned(port, second, [first])
        try:
            assert await on_second.command("/var/log/app", user="U1") == 200
            [card] = await wait_until(lambda: slack.approval_messages(), what="the card")
            value = card.button_value(APPROVE)
            # Two approvers click at once, each on another process: both are acknowledged.
            assert await asyncio.gather(
                on_first.click(value, user="U2"), on_second.click(value, user="U3")
            ) == [200, 200]
            await the_output(slack, "/var/log/app")
        finally:
            on_first.close()
            on_second.close()
        # The decision was consumed once: one approver's, the tool ran once. (A lone pass posts
        # the output before it updates the card: the card's update may come just after.)
        [card] = await wait_until(
            lambda: [c for c in slack.approval_messages() if "Approved by" in c.all_text()],
            what="the decided card",
        )
        deciders = [u for u in ("U2", "U3") if f"Approved by <@{u}>" in card.all_text()]
        assert len(deciders) == 1, card.all_text()
        assert serving(bot.pid) == [first, second]  # neither failed meanwhile
    assert executions(tmp_path) == [("start", "/var/log/app"), ("end", "/var/log/app")]


async def test_a_killed_serving_process_is_started_again_and_a_signal_stops_them_all(
    slack: FakeSlackAPI, policy_file: Path, tmp_path: Path
) -> None:
    """No REDIS_URL: the supervisor starts one embedded redis-server for both, and stops it
    last."""
    env = bot_env(slack, policy_file, tmp_path)
    data_dir = (tmp_path / "data").resolve()
    port = free_port()
    async with running_bot(env, port, "--processes", "2") as bot:
        first, second = await two_serving(bot)
        assert len(redis_servers_on(data_dir)) == 1
        os.kill(first, signal.SIGKILL)
        await wait_until(lambda: gone(first), what="the killed process to be gone")
        survivor = second

        def started_again() -> int | None:
            others = [pid for pid in serving(bot.pid) if pid not in (first, survivor)]
            return others[0] if others else None

        new = await wait_until(started_again, what="a serving process started again")
        # The new process serves: the run's command and click are its (the jobs and messages
        # whichever process's worker and projector takes them first: stopping the other for
        # longer would leave a job Redis handed to its blocked read waiting for its lease).
        connection = await pinned(port, new, [survivor])
        try:
            assert await connection.command("/srv/old", user="U1") == 200
            [card] = await wait_until(lambda: slack.approval_messages(), what="the card")
            assert await connection.click(card.button_value(APPROVE), user="U2") == 200
            await the_output(slack, "/srv/old")
        finally:
            connection.close()
        bot.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(bot.wait, 60) == 0
        assert gone(survivor) and gone(new)
        assert redis_servers_on(data_dir) == []  # stopped after them
    assert executions(tmp_path) == [("start", "/srv/old"), ("end", "/srv/old")]


async def test_a_killed_supervisors_serving_processes_stop(
    slack: FakeSlackAPI, policy_file: Path, tmp_path: Path, redis_url: str
) -> None:
    env = bot_env(slack, policy_file, tmp_path, REDIS_URL=redis_url)
    async with running_bot(env, free_port(), "--processes", "2") as bot:
        children = await two_serving(bot)
        # Its directory is named for it, and no supervisor sweeps it while it runs.
        assert len(metrics_dirs_of(bot.pid)) == 1
        bot.send_signal(signal.SIGKILL)
        await asyncio.to_thread(bot.wait, 10)
        await wait_until(lambda: all(gone(pid) for pid in children), what="them to stop")
    # No `finally` ran: its directory is left until the next supervisor sweeps it (this one,
    # or another test's started meanwhile: either way gone once a new one has started).
    new = metrics_directory()
    try:
        assert metrics_dirs_of(bot.pid) == []
        assert metrics_dirs_of(os.getpid()) == [Path(new)]
    finally:
        shutil.rmtree(new)


def metrics_dirs_of(supervisor: int) -> list[Path]:
    """The metrics directories of `supervisor` (in /dev/shm, else the temporary directory)."""
    pattern = f"approval-bot-metrics-{supervisor}-*"
    return [*Path("/dev/shm").glob(pattern), *Path(tempfile.gettempdir()).glob(pattern)]


def samples(text: str, name: str) -> dict[str, float]:
    """The values of `name` in an exposition `text`, by their labels (as `k=v,...`)."""
    return {
        ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


async def scraped(port: int, to: int, others: list[int], path: str = "/metrics") -> tuple[int, str]:
    """`path` on the metrics `port` as answered by serving process `to` (the others stopped
    until it accepted the connection)."""
    connection = await pinned(port, to, others)
    try:
        status, body = await connection.send("GET", path)
        return status, body.decode()
    finally:
        connection.close()


def commands_acked(text: str) -> float:
    return samples(text, "approval_bot_ack_seconds_count").get("kind=command", 0.0)


def serving_pids(text: str) -> set[int]:
    found = samples(text, "approval_bot_serving")
    return {int(labels.removeprefix("pid=")) for labels, value in found.items() if value == 1}


async def test_the_metrics_port_serves_the_whole_bot_and_keeps_a_restarted_processs_counts(
    slack: FakeSlackAPI, policy_file: Path, tmp_path: Path, redis_url: str
) -> None:
    """Each process acknowledges one command; whichever process answers the one metrics port
    counts both. A killed process's counts stay in the totals; its own gauges leave them."""
    env = bot_env(slack, policy_file, tmp_path, REDIS_URL=redis_url)
    port, metrics_port = free_port(), free_port()
    async with running_bot(
        env, port, "--processes", "2", "--metrics-port", str(metrics_port)
    ) as bot:
        first, second = await two_serving(bot)

        async def whole(to: int, other: int) -> str:
            status, text = await scraped(metrics_port, to, [other])
            assert status == 200
            return text

        for to, other in ((first, second), (second, first)):
            connection = await pinned(port, to, [other])
            try:
                assert await connection.command("help", user="U1") == 200
            finally:
                connection.close()

        async def both_counted(to: int, other: int) -> str | None:
            text = await whole(to, other)
            return text if commands_acked(text) == 2 else None

        for to, other in ((first, second), (second, first)):
            text = await wait_until(
                lambda to=to, other=other: both_counted(to, other),
                what="both commands",
            )
            assert serving_pids(text) == {first, second}
            # The Redis-backed gauges once, not once per process.
            assert list(samples(text, "approval_bot_pending_calls")) == [""]
        os.kill(first, signal.SIGKILL)
        await wait_until(lambda: gone(first), what="the killed process to be gone")
        new = await wait_until(
            lambda: next((p for p in serving(bot.pid) if p not in (first, second)), None),
            what="a serving process started again",
        )

        async def back_to_two() -> str | None:
            text = await whole(second, new)
            return text if serving_pids(text) == {second, new} else None

        text = await wait_until(back_to_two, what="the new process serving")
        assert commands_acked(text) == 2  # the killed process's command still counted
        assert {k for k, v in samples(text, "approval_bot_slack_auth_ok").items() if v} == {
            f"pid={second}",
            f"pid={new}",
        }


def test_a_process_starting_beside_one_that_is_creating_its_metrics_file_starts(
    tmp_path: Path,
) -> None:
    """prometheus_client creates a process's file for a kind of metric empty and sizes it a
    moment later; a process sharing the directory then (or scraping it) must not fail on it:
    two serving processes starting together made one of them exit at its start. Its own
    process: `share` is once per process."""
    (tmp_path / "counter_4000001.db").touch()  # another process's, being created
    (tmp_path / "gauge_liveall_4000001.db").touch()
    code = (
        "import sys\n"
        "from bot import metrics\n"
        "metrics.share(sys.argv[1])\n"
        "metrics.decided('approve')\n"
        "text, _ = metrics.render()\n"
        "assert 'approval_bot_decisions_total{outcome=\"approve\"} 1.0' in text.decode(), text\n"
        "assert metrics.others_unready() == {}\n"
        "print('shared')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout.strip()) == (0, "shared"), done.stderr[-2000:]


async def test_readyz_answers_for_every_serving_process(
    slack: FakeSlackAPI, policy_file: Path, tmp_path: Path, redis_url: str
) -> None:
    """Slack refuses the token to one process's auth.test (the first asked): the other
    process, although ready itself, answers 503 on /readyz and names it, on both ports."""
    asked: list[str] = []

    def first_auth_test(method: str, _: dict[str, object]) -> bool:
        asked.append(method)
        return method == "auth.test" and asked.count("auth.test") == 1

    slack.fail_when, slack.fail_error = first_auth_test, "invalid_auth"
    env = bot_env(
        slack, policy_file, tmp_path, REDIS_URL=redis_url,
        APPROVAL_BOT_SLACK_AUTH_RETRY_SECONDS="3600",
    )  # fmt: skip
    port, metrics_port = free_port(), free_port()
    async with running_bot(
        env, port, "--processes", "2", "--metrics-port", str(metrics_port)
    ) as bot:
        first, second = await two_serving(bot)

        async def both_serving() -> str | None:
            _, text = await scraped(metrics_port, first, [second])
            return text if serving_pids(text) == {first, second} else None

        text = await wait_until(both_serving, what="both serving")
        refused = [k for k, v in samples(text, "approval_bot_slack_auth_ok").items() if not v]
        [bad] = [int(labels.removeprefix("pid=")) for labels in refused]
        [good] = [pid for pid in (first, second) if pid != bad]
        for where in (port, metrics_port):
            status, body = await scraped(where, good, [bad], "/readyz")
            said = json.loads(body)
            assert status == 503, said
            assert said["redis"] == "up" and said["slack"] == "up"  # its own
            assert said["processes"] == {f"pid {bad}": "slack does not accept the token"}
        status, body = await scraped(metrics_port, bad, [good], "/readyz")
        assert status == 503 and json.loads(body)["slack"] == "token refused: invalid_auth"


def test_one_per_core_is_at_most_the_cgroups_cpu_quota(tmp_path: Path) -> None:
    """A container limited to 1.5 CPUs on a large host serves in 2 processes, not one per the
    host's cores."""
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_quota(v2) == 1.5
    (v2 / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_quota(v2) is None
    v1 = tmp_path / "v1" / "cpu,cpuacct"
    v1.mkdir(parents=True)
    (v1 / "cpu.cfs_quota_us").write_text("200000\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_quota(tmp_path / "v1") == 2.0
    (v1 / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_cpu_quota(tmp_path / "v1") is None
    assert cgroup_cpu_quota(tmp_path / "none") is None
    assert process_count(6) == 6 and process_count(0) == min(cores(), PER_CORE_AT_MOST) >= 1
