"""The cost of a decision, the bot against its floors, in one run (`make bench`; issue #9).

Three programs on one machine, each in its own process, receive the same signed `block_actions`
clicks over HTTP from this load generator:

- a bare slack-bolt AsyncApp whose only listener acks (`benchmarks/peers.py bare`): the floor
  for acknowledging a click with Bolt on aiohttp with signature verification;
- the bot (`approval-bot serve --http` as it serves by default: APPROVAL_BOT_PROCESSES whole
  bots, each with its in-process worker), where every click approves a distinct paused run of
  a minimal agent (one call that needs approval, then an answer);
- the SDK alone, in this process: `RunState.from_string` + `approve` + `Runner.run` on the same
  minimal run, the floor for decision -> final output: each right after the one before (warm,
  the issue's floor) and, beside it, each after 0.5 s asleep (as cold as the bot's resumes one
  at a time, which come seconds apart).

The Slack Web API is the stand-in (`bot.testing.slack_api`), in a process of its own; the
model is scripted (`benchmarks/bench_agents.py`); Redis is a local `redis-server`. Slack's
pacing is off in the bot (these figures are the bot's, not Slack's limits).

Figures:
- click ack p50 / p99 at 50 and 200 clicks in flight, acks per second, clicks lost (not 200,
  or not answered within Slack's 3 s); bot / bare ratios, measured in rounds (`--rounds`):
  in each, at each number in flight, the bare app and the bot get a burst of the same clicks
  one right after the other, in turn first, each after `IDLE_BEFORE` s of quiet; the ratio
  is the median of the rounds' ratios, printed with their lowest and highest (the machine's
  noise), and the load generator collects no garbage while it sends a burst;
- decision -> final output, one decision at a time: from sending the click to the stand-in
  receiving the run's final output post; minus the SDK's own resume, that is the bot's overhead;
  measured in turns with the SDK's warm resume and the floor's own path (`one_at_a_time`), so
  that the machine's drift moves the three alike;
- bot CPU (user + system, from /proc) per completed decision, from the first click until every
  resumed run is finished and Slack shows it all;
- Web API calls per decision in each burst for the runs' messages (chat.update and
  chat.postMessage; goal <= 3 at any burst size), and apart, the requester's notices the burst
  cost and the other calls (a notice's conversations.open);
- Web API calls per decision one at a time, connections opened to the Web API; Redis bytes
  per paused run (MEMORY USAGE of the run's keys), with a minimal task and with a
  150-character task whose call has 100 characters of arguments.

Each figure is printed beside its floor (the bare app's, the SDK's own resume, or the floor of
`benchmarks/floor.py`: the one `make bench` measured just before, else measured here first) and
the goal issue #32 part 2 holds it to: CPU per completed decision at most 1.5x the floor;
decision -> final output one at a time, p50 at most 2x the SDK's resume p50; 200 clicks at once,
p99 to final output at most 1.5x (200 x floor / cores); acks p99 at most 1.5x the bare app's.

Environment: BENCH_LOG (the bot's log level), BENCH_PROFILE (a folder: py-spy profiles of the
bot per phase), BENCH_BOT (what follows `python` to start the bot, default `-m bot`),
BENCH_NOTICE (the requester's message: dm, the default, ephemeral or off), BENCH_PROCESSES (n:
`serve --processes n`; CPU is summed over the serving processes), BENCH_WORKERS (n: the bot
serves with no worker of its own and n `worker` processes run beside it; CPU is summed over
them), BENCH_SLOW (a factor for the waits, on a machine busy with more), BENCH_LOOP
(uvloop: the bot's APPROVAL_BOT_EVENT_LOOP), BENCH_BOT_ENV ("NAME=value ...": the bot's
settings, e.g. an A/B of one), BENCH_ROUNDTRIPS (set: the bot's Redis round
trips per decision one at a time, beyond its idle polling, and per second idle, by command;
`benchmarks/roundtrips.py`; BENCH_ROUNDTRIPS_CALLERS: by the bot's functions that sent them).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import aiohttp
import redis.asyncio as aioredis
from agents import Runner, RunState, set_tracing_disabled

from benchmarks.bench_agents import approve_and_run, deployer
from benchmarks.peers import SIGNING_SECRET, TOKEN, floor_state_key
from benchmarks.storage import BUDGET, CASES, paused_run_bytes

if TYPE_CHECKING:
    from benchmarks.floor import InTurns
from bot.config import Settings
from bot.slack.blocks import APPROVE
from bot.store import keys
from bot.store.connection import EmbeddedRedis
from bot.store.queue import GROUP, STREAM
from bot.testing.requests import signature_headers

ROOT = Path(__file__).resolve().parents[1]
# Each burst of the acks' rounds comes after this long with nothing sent to its receiver, the
# bare app's and the bot's alike.
IDLE_BEFORE = 0.5
SLACK_DEADLINE = 3.0  # Slack shows an error for a click not acknowledged within 3 s
SLOW = float(os.environ.get("BENCH_SLOW") or 1)  # longer waits on a machine busy with more
CHANNEL = "C1"
PROSE = (
    "please check the nightly backup of the billing database on db-7 and if the restore "
    "test from yesterday failed again rotate the credentials then open an incident with "
    "the storage team and summarise what you changed for the on call engineer"
)
# One person starts every run of a benchmark: no start limits.
NO_START_LIMITS = {
    name: "0"
    for name in (
        "APPROVAL_BOT_USER_STARTS_PER_MINUTE", "APPROVAL_BOT_USER_START_BURST",
        "APPROVAL_BOT_CHANNEL_STARTS_PER_MINUTE", "APPROVAL_BOT_CHANNEL_START_BURST",
        "APPROVAL_BOT_USER_OPEN_RUNS", "APPROVAL_BOT_CHANNEL_OPEN_RUNS",
    )
}  # fmt: skip
# How long the requester's notice waits for other decisions to join it (the bot's default).
NOTICE_WAIT = float(Settings.model_fields["requester_notice_seconds"].default)
REALISTIC_TASK = PROSE[:150]  # its call's arguments: the first 100 characters (see the model)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc; no psutil needed)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_mb(pid: int) -> tuple[float, float, float]:
    """A process's resident memory (RSS), its proportional share of it (PSS: each page shared
    with other processes, as forked ones share the supervisor's, divided among them) and what
    it alone holds (private: what one more such process costs), in MB, from
    /proc/<pid>/smaps_rollup."""
    kb: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, _, rest = line.partition(":")
        value = rest.split()
        if len(value) == 2 and value[1] == "kB":
            kb[name] = int(value[0])
    private = kb.get("Private_Clean", 0) + kb.get("Private_Dirty", 0)
    return kb.get("Rss", 0) / 1024, kb.get("Pss", 0) / 1024, private / 1024


def children(pid: int) -> list[int]:
    """The processes `pid` started that still run (a `serve --processes n`'s serving ones)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return sorted(found)


def click_body(
    approval_id: str, user: str = "U2", channel: str = CHANNEL
) -> tuple[bytes, dict[str, str]]:
    payload = {
        "type": "block_actions",
        "team": {"id": "T0TEST", "domain": "example"},
        "user": {"id": user, "username": user.lower(), "team_id": "T0TEST"},
        "api_app_id": "A0TEST",
        "token": "unused",
        "trigger_id": secrets.token_hex(8),
        "container": {"type": "message", "message_ts": "", "channel_id": channel},
        "channel": {"id": channel, "name": "ops"},
        "message": {"ts": "", "text": ""},
        "response_url": "https://hooks.slack.invalid/actions/1",
        "actions": [
            {
                "type": "button",
                "action_id": APPROVE,
                "block_id": "decision",
                "value": approval_id,
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }
    body = urlencode({"payload": json.dumps(payload)}).encode()
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        **signature_headers(body, SIGNING_SECRET),
    }
    return body, headers


def command_body(text: str, channel: str = CHANNEL) -> tuple[bytes, dict[str, str]]:
    """A signed `/agent <text>` slash command from U1 in `channel`."""
    fields = {
        "token": "unused", "team_id": "T0TEST", "team_domain": "example",
        "channel_id": channel, "channel_name": channel.lower(), "user_id": "U1",
        "user_name": "u1", "command": "/agent", "text": text,
        "api_app_id": "A0TEST", "trigger_id": secrets.token_hex(8),
        "response_url": "https://hooks.slack.invalid/commands/1",
    }  # fmt: skip
    body = urlencode(fields).encode()
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        **signature_headers(body, SIGNING_SECRET),
    }
    return body, headers


@dataclass
class Load:
    """Acks of one burst of clicks."""

    in_flight: int
    latencies: list[float] = field(default_factory=list)  # ms, of the clicks answered 200 in 3 s
    lost: int = 0
    elapsed: float = 0.0
    cpu: float = 0.0  # CPU seconds of the receiving process over the burst (and what followed)
    ack_cpu: float = 0.0  # of which until the last click was answered
    # Seconds from the first click until every decision was recorded, every resumed run
    # finished and every message delivered (the bot's, not the bare app's).
    settle: float = 0.0
    notes: int = 0  # clicks told "still working" (not decided within the ack budget)
    methods: dict[str, int] = field(default_factory=dict)  # Web API calls of the bot's, by method
    notices: int = 0  # the requester's notices (one person started every run)
    # s from sending each click to the stand-in receiving its run's final output post
    outputs: list[float] = field(default_factory=list)
    shares: list[float] = field(default_factory=list)  # CPU s of each bot process over it

    def per_decision(self, method: str | None) -> float:
        """Web API calls per decision for the runs' messages by `method` (the requester's
        notices apart), or (None) of every other method (a notice's conversations.open)."""
        named = ("chat.update", "chat.postMessage")
        if method == "chat.postMessage":
            count = self.methods.get(method, 0) - self.notices
        elif method:
            count = self.methods.get(method, 0)
        else:
            count = sum(n for m, n in self.methods.items() if m not in named)
        return count / self.clicks if self.clicks else 0.0

    @property
    def clicks(self) -> int:
        return len(self.latencies) + self.lost

    def p(self, q: float) -> float:
        return percentile(self.latencies, q) if self.latencies else float("nan")

    def output_p(self, q: float) -> float:
        return percentile(self.outputs, q) if self.outputs else float("nan")

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.elapsed if self.elapsed else 0.0


def merged(loads: list[Load]) -> Load:
    """Bursts at one number in flight (rounds of it) as one: their clicks, CPU, times and
    calls summed."""
    whole = Load(loads[0].in_flight)
    for load in loads:
        whole.latencies += load.latencies
        whole.outputs += load.outputs
        whole.lost += load.lost
        whole.elapsed += load.elapsed
        whole.cpu += load.cpu
        whole.ack_cpu += load.ack_cpu
        whole.settle += load.settle
        whole.notes += load.notes
        whole.notices += load.notices
        for method, n in load.methods.items():
            whole.methods[method] = whole.methods.get(method, 0) + n
        if len(load.shares) == len(whole.shares) or not whole.shares:
            whole.shares = [a + b for a, b in zip(whole.shares or [0.0] * len(load.shares),
                                                  load.shares, strict=True)]  # fmt: skip
    return whole


@dataclass
class Round:
    """One round of the acks at one number in flight: a burst of clicks to the bare app and
    one of the same size and shape to the bot, one right after the other (`bare_first`)."""

    bare: Load
    bot: Load
    bare_first: bool

    def ratio(self, q: float) -> float:
        """The bot's ack percentile `q` over the bare app's, in this round."""
        return self.bot.p(q) / self.bare.p(q)


def ratios(rounds: list[Round], q: float) -> tuple[float, float, float]:
    """The median of the rounds' ratios at percentile `q`, their lowest and their highest."""
    each = [r.ratio(q) for r in rounds]
    return statistics.median(each), min(each), max(each)


async def burst(
    url: str,
    bodies: list[tuple[bytes, dict[str, str]]],
    in_flight: int,
    sent: list[float] | None = None,
) -> Load:
    """Send every click, `in_flight` at a time, each on its own connection slot (as many
    connections as clicks in flight, kept alive); `sent` gets when each was sent (monotonic)."""
    load = Load(in_flight)
    todo = iter(enumerate(bodies))
    if sent is not None:
        sent[:] = [0.0] * len(bodies)
    connector = aiohttp.TCPConnector(limit=in_flight)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def sender() -> None:
            for i, (body, headers) in todo:
                started = time.perf_counter()
                if sent is not None:
                    sent[i] = time.monotonic()
                try:
                    async with session.post(url, data=body, headers=headers) as response:
                        await response.read()
                        ok = response.status == 200
                except (aiohttp.ClientError, TimeoutError):
                    ok = False
                took = time.perf_counter() - started
                if ok and took <= SLACK_DEADLINE:
                    load.latencies.append(took * 1000)
                else:
                    load.lost += 1

        # The load generator is the clock: a garbage collection of its own heap mid-burst
        # (tens of ms) would count against every click in flight, in whichever arm it fell.
        gc.collect()
        gc.disable()
        started = time.perf_counter()
        try:
            await asyncio.gather(*(sender() for _ in range(in_flight)))
        finally:
            gc.enable()
        load.elapsed = time.perf_counter() - started
    return load


class Process:
    """A child process this benchmark started (and stops, by its own pid)."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def first_line(self) -> str:
        assert self.proc.stdout is not None
        return (await asyncio.to_thread(self.proc.stdout.readline)).strip()

    async def stop(self) -> None:
        self.proc.terminate()
        await asyncio.to_thread(self.proc.wait, 30)


class Profile:
    """`py-spy record` of the bot's processes over one phase, when BENCH_PROFILE names a folder
    (py-spy must be on PATH or beside this Python); collapsed stacks in
    BENCH_PROFILE/<phase>.txt (the serving process) and <phase>.worker<i>.txt."""

    def __init__(self, pids: list[int], phase: str) -> None:
        self.pids, self.phase = pids, phase
        self.procs: list[subprocess.Popen[bytes]] = []

    async def __aenter__(self) -> Profile:
        folder = os.environ.get("BENCH_PROFILE")
        if folder:
            spy = Path(sys.executable).with_name("py-spy")
            for i, pid in enumerate(self.pids):
                name = f"{self.phase}.worker{i}.txt" if i else f"{self.phase}.txt"
                out = Path(folder) / name
                self.procs.append(subprocess.Popen(  # noqa: ASYNC220
                    [str(spy) if spy.exists() else "py-spy", "record", "-p", str(pid), "-r",
                     "250", "-f", "raw", "-o", str(out)], stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                ))  # fmt: skip
            await asyncio.sleep(1.0)  # attached
        return self

    async def __aexit__(self, *exc: object) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGINT)
            await asyncio.to_thread(proc.wait, 30)


async def until(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        await asyncio.sleep(0.05)


async def healthy(session: aiohttp.ClientSession, url: str) -> bool:
    try:
        async with session.get(url) as response:
            return response.status == 200
    except aiohttp.ClientError:
        return False


# The floors ---------------------------------------------------------------------------------


class BareApp:
    """The bare Bolt app (`benchmarks/peers.py bare`) in a process of its own: the floor of an
    ack."""

    def __init__(self, api_url: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/slack/events"
        self.process = Process(["-m", "benchmarks.peers", "bare", str(self.port), api_url])

    async def start(self) -> None:
        """Serving, and warmed up (100 clicks, 10 in flight)."""
        await self.process.first_line()
        await burst(self.url, [click_body(f"warm-{i}") for i in range(100)], 10)

    async def burst(self, bodies: list[tuple[bytes, dict[str, str]]], in_flight: int) -> Load:
        before = cpu_seconds(self.process.pid)
        load = await burst(self.url, bodies, in_flight)
        load.cpu = load.ack_cpu = cpu_seconds(self.process.pid) - before
        return load

    async def stop(self) -> None:
        await self.process.stop()


async def bare_floor(api_url: str, clicks: dict[int, int]) -> dict[int, Load]:
    """The bare app's acks of `clicks[in_flight]` clicks at each number in flight."""
    bare = BareApp(api_url)
    try:
        await bare.start()
        loads = {}
        for in_flight, n in clicks.items():
            loads[in_flight] = await bare.burst([click_body(f"A{i}") for i in range(n)], in_flight)
        return loads
    finally:
        await bare.stop()


SDK_IDLE = 0.5  # s asleep before the SDK's resume "after idle", as the bot's one at a time are


@dataclass
class SdkResumes:
    """The SDK's own resume of the minimal run, ms, measured first, in this process before the
    bot starts: `warm` (wall) and `cpu` each right after a run of the same agent, back to back:
    the issue's goal divides by `warm`; `idle` (wall) each after SDK_IDLE s asleep, as cold as
    the bot's resumes one at a time (the machine's other processes have had its caches)."""

    warm: list[float]
    cpu: list[float]
    idle: list[float]


async def _sdk_resumes(
    samples: int, idle: float, warmup: int = 5
) -> tuple[list[float], list[float]]:
    """ms of wall time and of CPU of `samples` SDK resumes (`from_string` + `approve` +
    `Runner.run`), each `idle` s after its run paused (0: right after), back to back, after
    `warmup` more that are not counted."""
    agent = deployer()
    taken, cpu = [], []
    for i in range(samples + warmup):
        paused = await Runner.run(agent, f"deploy v{i}")
        stored = paused.to_state().to_string()
        if idle:
            await asyncio.sleep(idle)
        started, processed = time.perf_counter(), time.process_time()
        output = await approve_and_run(agent, await RunState.from_string(agent, stored))
        taken.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - processed) * 1000)
        assert output == "done"
    return taken[warmup:], cpu[warmup:]


async def sdk_resumes(samples: int) -> SdkResumes:
    """The SDK's own resume of the minimal run, warm (each right after the one before) then
    after SDK_IDLE s asleep each. Not alternately: a warm one right after a cold one is itself
    partly cold (5.8 -> 8.8 ms p50 when they alternated)."""
    warm, cpu = await _sdk_resumes(samples, 0.0)
    idle, _ = await _sdk_resumes(samples, SDK_IDLE)
    return SdkResumes(warm, cpu, idle)


class FloorPath:
    """The floor's own decision path (`benchmarks/peers.py floorpath`: Bolt's ack, 9 Redis
    round trips, the SDK's streamed resume, 3 Web API calls, one after another) in a process
    of its own, clicked one at a time as the bot is: how soon the bot's output could be shown
    on this machine, the bot's own cost aside (the SDK's warm resume alone leaves out the
    rest of the floor and that the process is cold, as every one-at-a-time click finds it)."""

    def __init__(self, api_url: str, redis_url: str) -> None:
        self.api_url, self.redis_url = api_url, redis_url
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/slack/events"

    async def start(self, clicks: int) -> None:
        """Its process, with `clicks` paused runs for it to resume, as the bot's wait for
        theirs."""
        agent = deployer()
        self.redis = aioredis.Redis.from_url(self.redis_url)
        self.ids = [f"floor-{i}" for i in range(clicks)]
        for i, approval_id in enumerate(self.ids):
            paused = await Runner.run(agent, f"deploy f{i}")
            await self.redis.set(floor_state_key(approval_id), paused.to_state().to_string())
        self.process = Process(
            ["-m", "benchmarks.peers", "floorpath", str(self.port), self.api_url, self.redis_url]
        )
        await self.process.first_line()
        self.session = aiohttp.ClientSession()

    async def clicks(self, n: int) -> list[float]:
        """Click -> output shown (ms) of its next `n` paused runs, each clicked once the one
        before has made its 3 Web API calls."""
        taken = []
        for approval_id in self.ids[:n]:
            body, headers = click_body(approval_id)
            started = time.monotonic()
            async with self.session.post(self.url, data=body, headers=headers) as response:
                assert response.status == 200
            shown = await self._standin("bench.result", run_id=approval_id)
            taken.append((float(shown["at"]) - started) * 1000)

            async def done(run_id: str = approval_id) -> bool:
                return int((await self._standin("bench.state"))["calls"].get(run_id, 0)) >= 3

            await until(done, 30 * SLOW, "the floor path's messages")
        del self.ids[:n]
        return taken

    async def _standin(self, method: str, **params: str) -> dict[str, Any]:
        async with self.session.get(self.api_url + method, params=params) as response:
            data: dict[str, Any] = await response.json()
            return data

    async def stop(self) -> None:
        await self.session.close()
        await self.process.stop()
        await self.redis.delete(*(await self.redis.keys("floor:*")) or ["floor:none"])
        await self.redis.aclose()


BLOCK = 6  # one-at-a-time clicks (or SDK resumes) in a row, the first of them not counted


@dataclass
class Serial:
    """The one-at-a-time figures, ms: the bot's clicks to output, its Web API calls and CPU per
    click; the SDK's warm resumes (wall, CPU); the floor's own path's clicks; the Web API
    connections the bot opened."""

    bot: list[float] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)  # until all it caused is shown
    cpu_output: list[float] = field(default_factory=list)  # until its output is shown
    sdk: list[float] = field(default_factory=list)
    sdk_cpu: list[float] = field(default_factory=list)
    path: list[float] = field(default_factory=list)
    connections: int = 0
    clicked: int = 0  # the bot's clicks, those not counted too


async def one_at_a_time(bot: Bot, path: FloorPath, samples: int) -> Serial:
    """The bot and the floor's own path one at a time, with the SDK's resume between them, in
    turns of `BLOCK` (the first of each turn not counted: it follows the others' work), about
    `samples` of each counted, after a turn of each that warms up: the machine's drift over the
    minutes this takes moves them alike. (The SDK's resume in turns is colder than back to back:
    the goal stays against `sdk_resumes`, measured first.)"""
    turns = -(-samples // (BLOCK - 1))
    runs = await bot.paused_runs((turns + 1) * BLOCK, lambda i: f"deploy s{i}")
    await path.start((turns + 1) * BLOCK)
    out = Serial()
    try:
        for turn in range(turns + 1):
            counted = 1 if turn else BLOCK  # the first turn warms up
            sdk, sdk_cpu = await _sdk_resumes(BLOCK - counted, 0.0, warmup=counted)
            taken, calls, connections, (cpu_output, cpu) = await bot.one_at_a_time(
                runs[turn * BLOCK : (turn + 1) * BLOCK]
            )
            path_taken = await path.clicks(BLOCK)
            out.sdk += sdk
            out.sdk_cpu += sdk_cpu
            out.bot += taken[counted:]
            out.calls += calls[counted:]
            out.cpu += cpu[counted:]
            out.cpu_output += cpu_output[counted:]
            out.path += path_taken[counted:]
            out.connections += connections
            out.clicked += len(taken)
    finally:
        await path.stop()
    return out


# The bot ------------------------------------------------------------------------------------


class Bot:
    """The bot in a process of its own, and what the stand-in saw of it."""

    def __init__(
        self, redis_url: str, api_url: str, tmp: Path, *, processes: int | None = None
    ) -> None:
        """`processes`: `serve --processes`; None: BENCH_PROCESSES, else the bot's default
        (APPROVAL_BOT_PROCESSES unset)."""
        self.redis_url, self.api_url = redis_url, api_url
        bench = os.environ.get("BENCH_PROCESSES")
        self.processes = processes if processes is not None else int(bench) if bench else None
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/slack/events"
        policy = tmp / "policy.yml"
        policy.write_text(f"channels:\n  {CHANNEL}:\n    approvers: [U2]\n")
        self.env = {
            **{k: "" for k in os.environ if k.startswith(("SLACK_", "APPROVAL_BOT_"))},
            "APPROVAL_BOT_ENV_FILE": "",
            "SLACK_BOT_TOKEN": TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_URL": api_url,
            "REDIS_URL": redis_url,
            "APPROVAL_BOT_AGENTS": "benchmarks.bench_agents:approvals",
            "APPROVAL_BOT_POLICY": str(policy),
            "APPROVAL_BOT_METRICS_PORT": "0",
            "OPENAI_API_KEY": "unused",
            **NO_START_LIMITS,  # one person starts every run; Slack's pacing off
            "APPROVAL_BOT_SLACK_POSTS_PER_SECOND": "100000",
            "APPROVAL_BOT_SLACK_UPDATES_PER_MINUTE": "6000000",
            # the requester's message (its own Web API calls and a projector pass per run)
            "APPROVAL_BOT_REQUESTER_NOTICE": os.environ.get("BENCH_NOTICE") or "dm",
            "APPROVAL_BOT_EVENT_LOOP": os.environ.get("BENCH_LOOP", ""),  # uvloop: installed
            # BENCH_BOT_ENV="NAME=value ...": settings of the bot's (an A/B of one of them)
            **dict(kv.split("=", 1) for kv in os.environ.get("BENCH_BOT_ENV", "").split()),
        }
        self.env = {k: v for k, v in self.env.items() if v or k == "APPROVAL_BOT_ENV_FILE"}
        self.process: Process | None = None
        self.workers: list[Process] = []
        self.topology = ""  # what serves (printed with the figures)
        self.roundtrips_file = tmp / "roundtrips.json"
        self.redis = aioredis.Redis.from_url(redis_url)
        self.session = aiohttp.ClientSession()

    async def start(self) -> None:
        """The serving process (`serve --http`), with its in-process worker, or with
        BENCH_WORKERS=n without one, and n `worker` processes beside it (the second core)."""
        level = os.environ.get("BENCH_LOG", "WARNING")
        bot = os.environ.get("BENCH_BOT", "-m bot").split()  # e.g. a script that wraps it
        if os.environ.get("BENCH_ROUNDTRIPS"):
            bot = ["-m", "benchmarks.roundtrips"]
        workers = int(os.environ.get("BENCH_WORKERS") or 0)
        args = [*bot, "--log-level", level, "serve", "--http", "--port", str(self.port)]
        if os.environ.get("BENCH_ROUNDTRIPS"):  # (counted per process: one serving process)
            args += ["--processes", "1"]
        elif self.processes is not None:
            args += ["--processes", str(self.processes)]
        self.process = Process([*args, "--no-worker"] if workers else args, self.counted(0))
        for i in range(workers):
            worker = [*bot, "--log-level", level, "worker", "--metrics-port", "0"]
            self.workers.append(Process(worker, self.counted(i + 1)))
        health = f"http://127.0.0.1:{self.port}/healthz"
        await until(lambda: healthy(self.session, health), 60, "the bot to serve")
        serving = len(children(self.pid)) or 1
        self.topology = (
            f"serve --http --no-worker and {workers} worker process(es)" if workers else
            f"serve --http in {serving} process(es), each with its worker"
        )  # fmt: skip

    def counted(self, i: int) -> dict[str, str]:
        """The environment of bot process `i`, with where it writes its round trips."""
        return {**self.env, "BENCH_ROUNDTRIPS_FILE": str(self.roundtrips_file.with_suffix(f".{i}"))}

    async def stop(self) -> None:
        for process in [*self.workers, *([self.process] if self.process else [])]:
            await process.stop()
        await self.session.close()
        await self.redis.aclose()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def pids(self) -> list[int]:
        """The serving process, then the worker processes; a `serve` in several processes
        (BENCH_PROCESSES, APPROVAL_BOT_PROCESSES) is its serving processes, not their
        supervisor."""
        return [*(children(self.pid) or [self.pid]), *(w.pid for w in self.workers)]

    def cpu(self) -> float:
        """CPU seconds so far of every bot process (the supervisor's, which only waits, too)."""
        pids = {self.pid, *self.pids}
        return sum(cpu_seconds(pid) for pid in pids)

    async def roundtrips(self) -> dict[str, int]:
        """The bot's Redis round trips so far, by command, over its processes (BENCH_ROUNDTRIPS
        only)."""
        total: dict[str, int] = {}
        for i, pid in enumerate(self.pids):
            path = self.roundtrips_file.with_suffix(f".{i}")
            path.unlink(missing_ok=True)
            os.kill(pid, signal.SIGUSR1)
            await until(lambda p=path: asyncio.sleep(0, p.exists()), 10, "the counts")  # type: ignore[misc]
            await asyncio.sleep(0.05)  # written
            for name, n in json.loads(path.read_text()).items():
                total[name] = total.get(name, 0) + n
        return total

    async def standin(self, method: str, **params: str) -> dict[str, Any]:
        async with self.session.get(self.api_url + method, params=params) as response:
            data: dict[str, Any] = await response.json()
            return data

    async def settled(self) -> bool:
        """Nothing left to do: no job queued or running, no message due or being delivered."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.zcard(keys.OUTBOX_INDEX)
        pipe.xpending(STREAM, GROUP)
        due, pending = await pipe.execute()
        groups: Any = await self.redis.xinfo_groups(STREAM)
        lag = sum(int(dict(g).get("lag") or dict(g).get(b"lag") or 0) for g in groups)
        return due == 0 and int(pending["pending"]) == 0 and lag == 0

    async def finished(self, run_ids: list[str]) -> int:
        """How many of these runs have finished."""
        pipe = self.redis.pipeline(transaction=False)
        for run_id in run_ids:
            pipe.hget(keys.run_key(run_id), "status")
        return sum(status == b"finished" for status in await pipe.execute())

    async def paused_runs(self, count: int, task: Callable[[int], str]) -> list[tuple[str, str]]:
        """Start `count` runs and wait for all their cards: [(approval id, run id)]."""
        known = set((await self.standin("bench.state"))["cards"])
        async with aiohttp.ClientSession() as session:
            sent = asyncio.Semaphore(16)

            async def command(i: int) -> None:
                body, headers = command_body(task(i))
                async with sent, session.post(self.url, data=body, headers=headers) as response:
                    assert response.status == 200, await response.text()

            await asyncio.gather(*(command(i) for i in range(count)))
        cards: dict[str, str] = {}

        async def all_shown() -> bool:
            nonlocal cards
            seen = (await self.standin("bench.state"))["cards"]
            cards = {a: r for a, r in seen.items() if a not in known}
            return len(cards) >= count and await self.settled()

        await until(all_shown, (30 + count / 5) * SLOW, f"{count} paused runs")
        return list(cards.items())

    async def burst(self, runs: list[tuple[str, str]], in_flight: int) -> Load:
        bodies = [click_body(approval_id) for approval_id, _ in runs]
        state = await self.standin("bench.state")
        notes, methods, notices = state["notes"], state["methods"], state["notices"]
        outputs = state["outputs"]
        before, each = self.cpu(), {pid: cpu_seconds(pid) for pid in self.pids}
        started = time.perf_counter()
        sent: list[float] = []
        load = await burst(self.url, bodies, in_flight, sent)
        load.ack_cpu = self.cpu() - before
        run_ids = [run_id for _, run_id in runs]

        async def done() -> bool:  # (decisions may wait for a lull: the queue alone says little)
            return await self.finished(run_ids) == len(load.latencies) and await self.settled()

        # The outputs first, told by the stand-in: polling Redis for the runs meanwhile (a read
        # of every run each 50 ms) took the load generator and Redis some 0.15 s of CPU over
        # 200 at once, on the cores the bot shares (#32).
        wait = (60 + len(runs) / 5) * SLOW
        count = str(outputs + len(load.latencies))
        params, within = {"count": count, "timeout": str(wait)}, aiohttp.ClientTimeout(wait + 30)
        async with self.session.get(self.api_url + "bench.outputs", params=params,
                                    timeout=within) as response:  # fmt: skip
            await response.read()
        with contextlib.suppress(TimeoutError):
            await until(done, (60 + len(runs) / 5) * SLOW, "the resumed runs")
        load.settle = time.perf_counter() - started
        load.cpu = self.cpu() - before
        with contextlib.suppress(OSError):  # (a process that ended meanwhile: none)
            load.shares = [cpu_seconds(pid) - was for pid, was in each.items()]
        finished = await self.finished(run_ids)
        results = (await self.standin("bench.results"))["results"]
        load.outputs = [results[r] - t for r, t in zip(run_ids, sent, strict=True) if r in results]
        state = await self.standin("bench.state")
        load.notes = state["notes"] - notes
        load.notices = state["notices"] - notices
        load.methods = {m: n - methods.get(m, 0) for m, n in state["methods"].items()}
        load.methods = {m: n for m, n in load.methods.items() if n}
        load.lost += len(runs) - len(load.latencies) - load.lost  # (never: clicks all counted)
        if finished != len(load.latencies):
            print(f"  note: {finished} of {len(runs)} runs finished", file=sys.stderr)
        return load

    async def one_at_a_time(
        self, runs: list[tuple[str, str]]
    ) -> tuple[list[float], list[int], int, tuple[list[float], list[float]]]:
        """Decision -> final output (ms) and Web API calls per decision, one click at a time,
        each once the bot is idle again; the Web API connections it opened meanwhile; and the
        bot's CPU (ms) from each click until its output is shown, and until everything it
        caused is shown."""
        taken, calls, cpu, cpu_output = [], [], [], []
        peers = (await self.standin("bench.state"))["peers"]
        async with aiohttp.ClientSession() as session:
            for approval_id, run_id in runs:
                before = (await self.standin("bench.state"))["calls"].get(run_id, 0)
                body, headers = click_body(approval_id)
                spent = self.cpu()
                started = time.monotonic()
                async with session.post(self.url, data=body, headers=headers) as response:
                    assert response.status == 200
                shown = await self.standin("bench.result", run_id=run_id)
                taken.append((float(shown["at"]) - started) * 1000)
                cpu_output.append((self.cpu() - spent) * 1000)
                await until(self.settled, 30 * SLOW, "the run's messages")
                cpu.append((self.cpu() - spent) * 1000)
                calls.append((await self.standin("bench.state"))["calls"][run_id] - before)
        connections = (await self.standin("bench.state"))["peers"] - peers
        return taken, calls, connections, (cpu_output, cpu)


# The acks, in rounds --------------------------------------------------------------------


async def ack_rounds(
    bare: BareApp,
    bot: Bot,
    clicks: dict[int, int],
    rounds: int,
    counting: bool = False,
    floor: InTurns | None = None,
) -> dict[int, list[Round]]:
    """The bare app's and the bot's acks in alternating rounds: in each round, at each number
    in flight, a burst of `clicks[in_flight] // rounds` clicks to each, one right after the
    other (the bot's once it has settled from what came before, the bare app's while the bot
    idles), the bare app first in every other pair. The same click bodies but for their ids
    (the bare app's carry the bot's approval ids), the same connections per burst, the same
    machine within seconds: what moves the machine moves both, and the rounds' ratios show
    how much it moves. After each of the bot's bursts, a turn of the `floor`'s (`InTurns`)."""
    out: dict[int, list[Round]] = {in_flight: [] for in_flight in clicks}
    for r in range(rounds):
        for j, (in_flight, n) in enumerate(clicks.items()):
            size = max(1, n // rounds)
            runs = await bot.paused_runs(size, lambda i, f=in_flight, r=r: f"deploy c{f}-{r}-{i}")  # type: ignore[misc]
            bodies = [click_body(approval_id) for approval_id, _ in runs]
            bare_first = (r + j) % 2 == 0
            loads: dict[str, Load] = {}
            for arm in ("bare", "bot") if bare_first else ("bot", "bare"):
                await asyncio.sleep(IDLE_BEFORE)
                if arm == "bare":
                    loads[arm] = await bare.burst(bodies, in_flight)
                    continue
                before = await bot.roundtrips() if counting else {}
                async with Profile(bot.pids, f"burst{in_flight}-{r}"):
                    loads[arm] = await bot.burst(runs, in_flight)
                if counting:
                    print_burst_roundtrips(f"{in_flight} in flight", size, before,
                                           await bot.roundtrips())  # fmt: skip
                if floor is not None:
                    await floor.turn()
            out[in_flight].append(Round(loads["bare"], loads["bot"], bare_first))
    return out


def print_rounds(rounds: dict[int, list[Round]]) -> None:
    """Each round's ack p50 / p99, bare app and bot, and their ratios; then per number in
    flight the median ratio and its spread (lowest-highest) over the rounds."""
    print("acks in rounds (ms; p50 / p99, bare app then bot; which went first):")
    for in_flight, each in rounds.items():
        for i, r in enumerate(each):
            first = "bare" if r.bare_first else "bot"
            print(f"  {in_flight:3d} in flight, round {i + 1} ({first} first, "
                  f"{r.bot.clicks} clicks): bare {ms(r.bare.p(0.5))} / {ms(r.bare.p(0.99))}, "
                  f"bot {ms(r.bot.p(0.5))} / {ms(r.bot.p(0.99))}: {r.ratio(0.5):.2f}x / "
                  f"{r.ratio(0.99):.2f}x")  # fmt: skip
    for in_flight, each in rounds.items():
        p50, p99 = ratios(each, 0.5), ratios(each, 0.99)
        print(f"  {in_flight:3d} in flight, median of {len(each)} rounds: p50 {p50[0]:.2f}x "
              f"({p50[1]:.2f}-{p50[2]:.2f}), p99 {p99[0]:.2f}x ({p99[1]:.2f}-{p99[2]:.2f}); "
              f"lost {sum(r.bare.lost for r in each)} / {sum(r.bot.lost for r in each)}, "
              f"told 'still working' {sum(r.bot.notes for r in each)}")  # fmt: skip
        bare, bot = merged([r.bare for r in each]), merged([r.bot for r in each])
        print(f"       pooled p99 bare {ms(bare.p(0.99))}, bot {ms(bot.p(0.99))} ms; CPU per "
              f"click until the last was answered: bare {1000 * bare.ack_cpu / bare.clicks:.2f}, "
              f"bot {1000 * bot.ack_cpu / bot.clicks:.2f} ms")  # fmt: skip


# Storage ------------------------------------------------------------------------------------


async def storage_figures(redis_url: str) -> dict[str, int]:
    """The figures of `benchmarks.storage.paused_run_bytes` (it runs a bot of its own: call it
    with no other bot on `redis_url`)."""
    figures = await paused_run_bytes(redis_url)
    out: dict[str, int] = {}
    for name in ("minimal", "realistic"):
        out[name], out[f"{name}_keys"] = figures[name]["bytes"], figures[name]["keys"]
    return out


def print_roundtrips(
    before: dict[str, int],
    after: dict[str, int],
    idle: dict[str, int],
    n: int,
    phase_s: float,
    idle_s: float,
) -> None:
    """Round trips per decision (one at a time, beyond what the bot sends idle over as long)
    and per second idle, by the commands each sent."""
    rest = {k: (idle.get(k, 0) - after.get(k, 0)) / idle_s for k in idle}
    per = {k: (after.get(k, 0) - before.get(k, 0) - rest.get(k, 0) * phase_s) / n for k in after}
    print(f"Redis round trips per decision, one at a time, beyond idle polling "
          f"({phase_s / n:.2f} s each): {sum(per.values()):.1f}")  # fmt: skip
    for name, count in sorted(per.items(), key=lambda kv: -kv[1]):
        if abs(count) >= 0.1:
            print(f"  {count:5.2f}  {name}")
    print(f"Redis round trips per second, idle: {sum(rest.values()):.1f}")
    for name, count in sorted(rest.items(), key=lambda kv: -kv[1]):
        if count:
            print(f"  {count:5.2f}  {name}")


def print_burst_roundtrips(
    what: str, n: int, before: dict[str, int], after: dict[str, int]
) -> None:
    """Round trips per decision of a burst (from its first click until it settled), and of
    them the projector passes' ends (`Outbox.end_pass`; with BENCH_ROUNDTRIPS_CALLERS, whose
    names say which function sent them): passes per decision."""
    spent = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    ends = sum(v for k, v in spent.items() if "Outbox.end_pass" in k)
    line = f"Redis round trips per decision, burst {what} ({n}): {sum(spent.values()) / n:.1f}"
    if os.environ.get("BENCH_ROUNDTRIPS_CALLERS"):
        line += f"; projector passes (their ends) per decision: {ends / n:.2f}"
    print(line)


# The table ----------------------------------------------------------------------------------


def ms(value: float) -> str:
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def report(
    rounds: dict[int, list[Round]],
    serial: Serial,
    sdks: SdkResumes,
    storage: dict[str, int],
    at_once: Load,
    turns: InTurns,
) -> None:
    """The table: each figure beside its floor (the bare app, the SDK's resume, or the floor
    of `benchmarks/floor.py`, measured again in turns with the bursts: `InTurns`) and the goal
    of issue #32 part 2 it is held to."""
    from benchmarks.floor import BURST_GOAL, CPU_GOAL, LATENCY_GOAL, ROUND_TRIPS, WEB_API_CALLS

    rows: list[tuple[str, str, str, str, str]] = []
    bare = {f: merged([r.bare for r in each]) for f, each in rounds.items()}
    bot = {f: merged([r.bot for r in each]) for f, each in rounds.items()}
    for in_flight in sorted(bot):
        b, o = bare[in_flight], bot[in_flight]
        for q, goal in ((0.5, ""), (0.99, "<= 1.5x")):
            mid, low, high = ratios(rounds[in_flight], q)
            rows.append((
                f"click ack p{q * 100:.0f}, {in_flight} in flight (ms; ratio: median of "
                f"{len(rounds[in_flight])} rounds')", ms(b.p(q)), ms(o.p(q)),
                f"{mid:.2f}x ({low:.2f}-{high:.2f})", goal,
            ))  # fmt: skip
        rows.append((
            f"acks/s, {in_flight} in flight ({o.clicks} clicks)", f"{b.rate:.0f}",
            f"{o.rate:.0f}", f"{o.rate / b.rate:.2f}x", ">= 1,000",
        ))  # fmt: skip
        rows.append((f"clicks lost, {in_flight} in flight", str(b.lost), str(o.lost), "", "0"))
        rows.append((
            f"  burst settled: all decided, resumed, shown (s; {o.clicks} clicks)", "",
            f"{o.settle:.2f}", "", "",
        ))  # fmt: skip
        rows.append(("  clicks told 'still working' (not decided within the ack budget)", "",
                     str(o.notes), "", ""))  # fmt: skip
        update, post = o.per_decision("chat.update"), o.per_decision("chat.postMessage")
        rows.append((
            "  Web API calls per decision, its messages (chat.update + chat.postMessage)", "",
            f"{update + post:.2f} = {update:.2f} + {post:.2f}", "", "<= 3",
        ))  # fmt: skip
        rows.append((
            "  requester notices in the burst (one person started every run); other calls", "",
            f"{o.notices}; {o.per_decision(None) * o.clicks:.0f}", "", "",
        ))  # fmt: skip
    sdk, sdk_cpu, floor_path, calls = sdks.warm, sdks.cpu, serial.path, serial.calls
    n = at_once.clicks
    rows.append((
        f"decision -> final output p50, {n} clicks at once (s)", "", f"{at_once.output_p(0.5):.2f}",
        "", "",
    ))  # fmt: skip
    first, floor = turns.first, turns.floor()
    bound, p99 = floor.at_once(n), at_once.output_p(0.99)
    rows.append((
        f"decision -> final output p99, {n} clicks at once (s; {len(at_once.outputs)} shown; "
        f"the floor in turns)", f"floor {bound:.2f}", f"{p99:.2f}", f"{p99 / bound:.2f}x",
        f"<= {BURST_GOAL:g}x = {floor.burst_goal(n):.2f}",
    ))  # fmt: skip
    rows.append((
        "  against the floor measured first (benchmarks/floor.py)",
        f"floor {first.at_once(n):.2f}", f"{p99:.2f}", f"{p99 / first.at_once(n):.2f}x", "",
    ))  # fmt: skip
    burst_cpu = at_once.cpu / max(n, 1) * 1000
    rows.append((f"  CPU per decision of those {n} (ms)", f"floor {floor.bot:.1f}",
                 f"{burst_cpu:.1f}", f"{burst_cpu / floor.bot:.1f}x", ""))  # fmt: skip
    bot_med, sdk_med = statistics.median(serial.bot), statistics.median(sdk)
    rows.append((
        f"decision -> final output p50, one at a time (ms; {len(serial.bot)}; the SDK's: back "
        f"to back, first)", f"SDK {ms(sdk_med)}", ms(bot_med), f"{bot_med / sdk_med:.1f}x",
        f"<= {LATENCY_GOAL:g}x = {ms(LATENCY_GOAL * sdk_med)}",
    ))  # fmt: skip
    turns_med = statistics.median(serial.sdk)
    rows.append((
        f"  the SDK's resume in turns with the bot's clicks and the floor path's (ms; "
        f"{len(serial.sdk)})", f"SDK {ms(turns_med)}", ms(bot_med),
        f"{bot_med / turns_med:.1f}x", "",
    ))  # fmt: skip
    idle_med = statistics.median(sdks.idle)
    rows.append((
        f"  the SDK's resume {SDK_IDLE:g} s idle first, as the bot's (ms; {len(sdks.idle)})",
        f"SDK {ms(idle_med)}", ms(bot_med), f"{bot_med / idle_med:.1f}x", "",
    ))  # fmt: skip
    path_med = statistics.median(floor_path)
    rows.append((
        f"  the floor's own path one at a time: bare ack, {ROUND_TRIPS} round trips, the SDK's "
        f"resume, {WEB_API_CALLS} Web API calls (ms; {len(floor_path)})",
        f"SDK {ms(sdk_med)}", ms(path_med), f"{path_med / sdk_med:.1f}x", "",
    ))  # fmt: skip
    rows.append((
        "  the bot against the floor's own path", f"path {ms(path_med)}", ms(bot_med),
        f"{bot_med / path_med:.2f}x", "",
    ))  # fmt: skip
    rows.append(("  minus the SDK's own resume: overhead p50 (ms)", "", ms(bot_med - sdk_med),
                 "", ""))  # fmt: skip
    p90 = percentile(serial.bot, 0.9) - percentile(sdk, 0.9)
    rows.append(("  overhead p90 (ms)", "", ms(p90), "", ""))
    clicks = sum(o.clicks for o in bot.values())
    cpu = sum(o.cpu for o in bot.values()) / clicks * 1000
    bare_cpu = sum(b.cpu for b in bare.values()) / sum(b.clicks for b in bare.values()) * 1000
    rows.append((f"CPU per completed decision (ms; {clicks}; the floor in turns)",
                 f"floor {floor.bot:.1f}", f"{cpu:.1f}", f"{cpu / floor.bot:.2f}x",
                 f"<= {CPU_GOAL:g}x = {floor.cpu_goal():.1f}"))  # fmt: skip
    rows.append(("  against the floor measured first (benchmarks/floor.py)",
                 f"floor {first.bot:.1f}", f"{cpu:.1f}", f"{cpu / first.bot:.2f}x",
                 ""))  # fmt: skip
    rows.append((
        f"  the floor in turns with the bursts ({turns.turns} turns: the SDK's resume "
        f"{floor.sdk_streamed:.2f} ({min(turns.sdk):.2f}-{max(turns.sdk):.2f}) against "
        f"{first.sdk_streamed:.2f} ms first)",
        f"first {first.bot:.2f}", f"{floor.bot:.2f}", f"{floor.bot / first.bot:.2f}x", "",
    ))  # fmt: skip
    # (/proc counts 10 ms ticks: means, not medians)
    one, shown = statistics.mean(serial.cpu_output), statistics.mean(serial.cpu)
    rows.append((f"  CPU per decision, one at a time, to its output (ms; {len(serial.cpu)})",
                 f"floor {floor.bot:.1f}", f"{one:.1f}", f"{one / floor.bot:.2f}x",
                 ""))  # fmt: skip
    rows.append((
        f"  and until all it caused is shown: the requester's notice waits "
        f"{NOTICE_WAIT:g} s for others to join it, the polls meanwhile count (ms)",
        "", f"{shown:.1f}", "", "",
    ))  # fmt: skip
    rows.append(("  of which Bolt's ack, at least (ms; the bare app's)", "", f"{bare_cpu:.1f}",
                 "", ""))  # fmt: skip
    rows.append(("  of which the SDK's own resume, at least (ms)", "",
                 f"{statistics.median(sdk_cpu):.1f}", "", ""))  # fmt: skip
    rows.append(("Web API calls per decision (one at a time)", "", f"{statistics.mean(calls):.1f}",
                 "", ""))  # fmt: skip
    rows.append((f"Web API connections opened, {serial.clicked} decisions one at a time", "",
                 str(serial.connections), "", ""))  # fmt: skip
    for name, (task, _) in CASES.items():  # the goal of #32: the task's length + 2 KB
        what = "minimal task" if name == "minimal" else "150-char task, 100-char args"
        goal = f"<= {len(task) + BUDGET:,} (task + 2 KB)"
        rows.append((f"Redis per paused run, {what} (bytes)", "",
                     f"{storage[name]:,} in {storage[name + '_keys']} keys", "", goal))  # fmt: skip
    head = ("measure", "bare / SDK / floor", "bot", "ratio", "goal")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(5)]
    for row in [head, tuple("-" * w for w in widths), *rows]:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in
                        enumerate(zip(row, widths, strict=True))).rstrip())  # fmt: skip


def print_memory(
    memory: dict[int, tuple[float, float, float]], pids: list[int], started: int
) -> None:
    """Each bot process's memory after the bursts (`memory_mb`; `pids`: the bot's processes
    then, `started`: the one the benchmark started, a supervisor when it is not one of them):
    what a process costs, for APPROVAL_BOT_PROCESSES and a container's memory limit."""
    each = [memory[pid] for pid in pids if pid in memory]
    line = " / ".join(f"{rss:.0f} ({pss:.0f}, {private:.0f})" for rss, pss, private in each)
    print(f"(memory after the bursts, MB, RSS (PSS, private): each bot process {line}", end="")
    if started in memory and started not in pids:
        rss, pss, private = memory[started]
        print(f"; the supervisor {rss:.0f} ({pss:.0f}, {private:.0f})", end="")
    total = sum(pss for _, pss, _ in memory.values())
    print(f"; in all (PSS) {total:.0f})")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clicks-50", type=int, default=400, help="clicks at 50 in flight")
    parser.add_argument("--clicks-200", type=int, default=800, help="clicks at 200 in flight")
    parser.add_argument("--serial", type=int, default=30, help="decisions one at a time")
    parser.add_argument("--at-once", type=int, default=200,
                        help="clicks sent all at once: decision -> final output")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=4,
                        help="rounds of the acks, bare app and bot alternately (the clicks at "
                             "each number in flight are split among them)")  # fmt: skip
    parser.add_argument(
        "--acks-only",
        action="store_true",
        help="only the acks' rounds (no SDK, one at a time, at once, storage)",
    )
    args = parser.parse_args()
    from benchmarks import floor as floors  # (it imports this module)

    began = time.perf_counter()
    floor = floors.latest()  # `make bench` measured it a moment ago
    if floor is None:
        floor = await floors.measure(100)
        floor.save()
    set_tracing_disabled(True)
    clicks = {50: args.clicks_50, 200: args.clicks_200}
    memory: dict[int, tuple[float, float, float]] = {}
    serving: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedRedis(Path(tmp) / "redis")
        await server.start()
        standin = Process(["-m", "benchmarks.peers", "standin"])
        try:
            api_url = await standin.first_line()
            bare = BareApp(api_url)
            await bare.start()
            if args.acks_only:
                bot = Bot(server.url, api_url, Path(tmp))
                try:
                    await bot.start()
                    print_rounds(await ack_rounds(bare, bot, clicks, args.rounds))
                finally:
                    await bot.stop()
                    await bare.stop()
                print(f"(the bot: {bot.topology}; {time.perf_counter() - began:.0f} s)")
                return
            sdks = await sdk_resumes(args.serial)
            bot = Bot(server.url, api_url, Path(tmp))
            try:
                await bot.start()
                counting = bool(os.environ.get("BENCH_ROUNDTRIPS"))
                before = await bot.roundtrips() if counting else {}
                phase = time.monotonic()
                async with Profile(bot.pids, "serial"):
                    serial = await one_at_a_time(bot, FloorPath(api_url, server.url), args.serial)
                if counting:
                    phase = time.monotonic() - phase
                    after = await bot.roundtrips()
                    await asyncio.sleep(2.0)
                    idle = await bot.roundtrips()
                    print_roundtrips(before, after, idle, serial.clicked, phase, 2.0)
                turns = floors.InTurns(floor, server.url, api_url, standin.pid)
                await turns.start()
                rounds = await ack_rounds(bare, bot, clicks, args.rounds, counting, turns)
                await bare.stop()
                runs = await bot.paused_runs(args.at_once, lambda i: f"deploy once-{i}")
                await turns.turn()  # (the at once's own floor: just before and just after)
                before = await bot.roundtrips() if counting else {}
                async with Profile(bot.pids, "at_once"):
                    at_once = await bot.burst(runs, args.at_once)
                await turns.turn()
                await turns.stop()
                if counting:
                    print_burst_roundtrips(f"{args.at_once} at once", args.at_once, before,
                                           await bot.roundtrips())  # fmt: skip
                serving = bot.pids
                with contextlib.suppress(OSError):
                    memory = {pid: memory_mb(pid) for pid in {bot.pid, *serving}}
            finally:
                await bot.stop()
                await bare.stop()
            storage = await storage_figures(server.url)
        finally:
            await standin.stop()
            server.stop()
    print_rounds(rounds)
    report(rounds, serial, sdks, storage, at_once, turns)
    shares = " / ".join(f"{100 * c / max(sum(at_once.shares), 1e-9):.0f}%" for c in at_once.shares)
    print(f"(the bot: {bot.topology}; their shares of the {at_once.clicks} at once's CPU: "
          f"{shares})")  # fmt: skip
    if memory:
        print_memory(memory, serving, bot.pid)
    notice = os.environ.get("BENCH_NOTICE") or "dm"
    print(f"(requester notice: {notice}, BENCH_NOTICE=dm|ephemeral|off; 2 cores shared by "
          f"Redis, the bot, the stand-in and the load generator; "
          f"{time.perf_counter() - began:.0f} s)")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
