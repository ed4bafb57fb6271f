"""`serve --http` in several processes on one listening socket: each a whole bot (Bolt, an
in-process worker, the projector, the timers), so a click is handled end to end by whichever
process accepted its connection, with no hop between processes on its way.

Why: one Python process does at most one core of work, and a decision costs 15-17 ms of CPU
(most of it the Agents SDK's resume), so a burst of 200 decisions takes at least 3 s in one
process whatever else it does. Every piece of state is in Redis behind owner-checked, atomic
transitions, so processes that share a Redis share the work safely (as replicas do).

The supervisor (the process `serve` started as) validates the configuration, starts the
embedded `redis-server` when there is no REDIS_URL (one for all of them, stopped last), binds
the listening socket (or takes the one handed over: `bot.listening`), and forks the serving
processes, which inherit the socket and accept from it in turn: connections that arrive while
one is busy are taken by another, and none is refused while a process restarts (the socket
stays open in the supervisor). It binds the metrics port the same way (APPROVAL_BOT_METRICS_PORT,
`--metrics-port`): every serving process answers `/metrics`, `/healthz` and `/readyz` on it,
and each answers for the whole, since their metrics are kept in files of a directory the
supervisor makes for them (`bot.metrics.share`; in /dev/shm where there is one) and removes
when it exits. It then only waits:

- SIGTERM or SIGINT: passed on as SIGTERM to every serving process, each of which stops as a
  single bot does (finishing its requests and jobs within APPROVAL_BOT_DRAIN_SECONDS); then the
  embedded Redis stops, and the supervisor exits 0. One that has not stopped within that budget
  and `KILL_AFTER` more seconds is killed (its jobs are taken over after their lease, as after
  any crash).
- A serving process that exits unasked (a crash, the out-of-memory killer) is started again at
  once. If `FAILING_IN_A_ROW` exit within `QUICK_EXIT_SECONDS` of their start one after
  another (it cannot start: Redis unreachable, a port it cannot serve), every process is
  stopped and the supervisor exits 1, so that the platform's restart policy sees the failure.
  The exited process's own gauges leave the metrics; its counts stay in them.
- If the supervisor itself is killed, each serving process is sent SIGTERM by the kernel (Linux
  `PR_SET_PDEATHSIG`) and stops as above.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import gc
import logging
import math
import mmap
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bot import metrics
from bot.config import Settings
from bot.listening import SHARED_BACKLOG, handed_socket
from bot.store.connection import EmbeddedRedis, die_with_parent

log = logging.getLogger(__name__)

QUICK_EXIT_SECONDS = 10.0  # a serving process that exits sooner than this did not start
FAILING_IN_A_ROW = 3  # that many quick exits one after another stop the whole
KILL_AFTER = 10.0  # seconds past the drain budget before a serving process is killed
SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGCHLD}
# "One per core" stops here: a host without a CPU quota may have dozens of cores, and each
# process is some 60 MB of its own after a burst (140 MB resident, the rest shared with the
# supervisor: benchmarks/decisions.py), a worker's slots and a pool of Redis connections. Four
# serve some 250 decisions a second at 15 ms of CPU each; more is the operator's choice.
PER_CORE_AT_MOST = 4


def process_count(setting: int) -> int:
    """How many serving processes `setting` (APPROVAL_BOT_PROCESSES or `--processes`) asks
    for: 0 means one per core this process may use (`cores`), at most `PER_CORE_AT_MOST`."""
    return setting if setting > 0 else min(cores(), PER_CORE_AT_MOST)


def cores() -> int:
    """The cores this process may run on (its CPU affinity), at most its cgroup's CPU quota
    rounded up (a container limited to 1.5 CPUs on a 64-core host: 2)."""
    try:
        count = len(os.sched_getaffinity(0))
    except AttributeError:  # (not on every platform)
        count = os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    if quota is not None:
        count = min(count, math.ceil(quota))
    return max(1, count)


def cgroup_cpu_quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The CPUs the cgroup's quota allows (cgroup v2 `cpu.max`, or v1 `cpu.cfs_quota_us` /
    `cpu.cfs_period_us`); None when unlimited or unknown."""
    with contextlib.suppress(OSError, ValueError):
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    for folder in (root / "cpu", root / "cpu,cpuacct"):
        with contextlib.suppress(OSError, ValueError):
            quota_us = int((folder / "cpu.cfs_quota_us").read_text())
            period_us = int((folder / "cpu.cfs_period_us").read_text())
            return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us
    return None


def listening_socket(host: str, port: int) -> socket.socket:
    """The socket the serving processes share: the one handed over for `host`:`port`, if any,
    else one bound here (address reuse on, as aiohttp binds it)."""
    sock = handed_socket(host, port)
    if sock is None:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    sock.listen(SHARED_BACKLOG)
    sock.set_inheritable(False)  # the serving processes are forked: they have it anyway
    return sock


class InFlight:
    """The Slack requests each serving process has in flight, in memory the supervisor shares
    with them (an anonymous shared mapping made before they are forked): one 8-byte slot per
    process, written by that process only, read by the others. A lull in one process's work is
    a moment with none in flight in any (`bot.service.foreground`)."""

    def __init__(self, count: int) -> None:
        self._memory = mmap.mmap(-1, 8 * count)  # (MAP_SHARED: the forked processes' too)
        self.slots = (ctypes.c_int64 * count).from_buffer(self._memory)

    def of(self, index: int) -> ProcessInFlight:
        """Serving process `index`'s view (its slot cleared: a process started again)."""
        self.slots[index] = 0
        return ProcessInFlight(self.slots, index)


class ProcessInFlight:
    """One serving process's side of `InFlight` (a `bot.service.foreground.Elsewhere`)."""

    def __init__(self, slots: ctypes.Array[ctypes.c_int64], index: int) -> None:
        self.slots, self.index = slots, index

    def publish(self, count: int) -> None:
        self.slots[self.index] = count

    def others(self) -> int:
        return sum(self.slots) - self.slots[self.index]


@dataclass(frozen=True)
class Serving:
    """What a serving process is given: the shared socket, its index (0 .. count - 1), the
    others' requests in flight, the directory of everyone's metrics, and the shared socket of
    the metrics port (None: none)."""

    sock: socket.socket
    index: int
    elsewhere: ProcessInFlight
    metrics_dir: str
    ops_sock: socket.socket | None = None


METRICS_DIR_PREFIX = "approval-bot-metrics-"


def metrics_directory() -> str:
    """A new directory for the serving processes' metrics: in memory (/dev/shm) where it can
    be, the values being written at every move; else the system's temporary directory. Its
    name carries this supervisor's pid, and the directories of supervisors that are gone
    (killed with SIGKILL: no `finally` ran) are removed first, so that memory is not kept by
    a directory nobody will read."""
    shm = "/dev/shm"
    where = shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None
    remove_orphaned_metrics(where or tempfile.gettempdir())
    return tempfile.mkdtemp(prefix=f"{METRICS_DIR_PREFIX}{os.getpid()}-", dir=where)


def remove_orphaned_metrics(parent: str) -> list[str]:
    """Remove the metrics directories in `parent` whose supervisor (the pid in their name) is
    no longer running; the ones removed. A directory whose pid is alive is kept, whoever
    runs it now (another bot's, or a pid reused: safe either way)."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            pid = entry.name.removeprefix(METRICS_DIR_PREFIX).split("-", 1)[0]
            if entry.name.startswith(METRICS_DIR_PREFIX) and pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


@dataclass
class Child:
    """A serving process: its pid and when it was started (monotonic)."""

    pid: int
    started: float = field(default_factory=time.monotonic)


class Supervisor:
    """Forks `count` serving processes, each running `serve(settings, Serving(...))` (returns
    its exit code), and restarts or stops them as the module's docstring says."""

    def __init__(
        self,
        settings: Settings,
        sock: socket.socket,
        count: int,
        serve: Callable[[Settings, Serving], int],
        *,
        metrics_dir: str,
        ops_sock: socket.socket | None = None,
    ) -> None:
        self.settings, self.sock, self.count, self.serve = settings, sock, count, serve
        self.metrics_dir, self.ops_sock = metrics_dir, ops_sock
        self.in_flight = InFlight(count)
        self.children: dict[int, Child] = {}  # by index (0 .. count - 1)
        self.failing = 0  # quick exits one after another
        self.stopping = False
        self._preexec = die_with_parent()  # made here: it names this process as the parent

    def _fork(self, index: int) -> None:
        serving = Serving(
            self.sock, index, self.in_flight.of(index), self.metrics_dir, self.ops_sock
        )
        pid = os.fork()
        if pid == 0:  # the serving process: never returns
            code = 1
            try:
                signal.pthread_sigmask(signal.SIG_SETMASK, set())
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # as a single bot has them
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.default_int_handler)
                if self._preexec is not None:
                    self._preexec()  # SIGTERM when the supervisor dies
                code = self.serve(self.settings, serving)
            except BaseException:
                log.exception("serving process %d failed", os.getpid())
            finally:  # what an interpreter's exit runs (logs flushed, the SDK's traces sent),
                # never the supervisor's code after the fork (its embedded Redis's stop)
                with contextlib.suppress(BaseException):
                    atexit._run_exitfuncs()
                os._exit(code)
        self.children[index] = Child(pid)
        log.info("serving process %d of %d started: pid %d", index + 1, self.count, pid)

    def run(self) -> int:
        """Serve until SIGTERM / SIGINT (0), or until serving processes keep failing at their
        start (1)."""
        signal.signal(signal.SIGCHLD, lambda *_: None)  # (queued while blocked, not ignored)
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        gc.collect()
        gc.freeze()  # shared with the serving processes, copy-on-write: left alone by their GC
        for index in range(self.count):
            self._fork(index)
        code = 0
        while not self.stopping:
            received = signal.sigtimedwait(SIGNALS, 1.0)
            if received is not None and received.si_signo != signal.SIGCHLD:
                log.info("stopping %d serving processes", len(self.children))
                break
            if not self._reap_and_restart():
                code = 1
                break
        self._stop_all()
        return code

    def _reap_and_restart(self) -> bool:
        """Start again each serving process that exited; False when they keep failing."""
        for index, child in list(self.children.items()):
            pid, status = os.waitpid(child.pid, os.WNOHANG)
            if pid == 0:
                continue
            lived = time.monotonic() - child.started
            log.warning(
                "serving process %d (pid %d) exited (%s) after %.1f s; starting it again",
                index + 1, pid, _exit_text(status), lived,
            )  # fmt: skip
            del self.children[index]
            metrics.forget(pid, self.metrics_dir)
            self.failing = self.failing + 1 if lived < QUICK_EXIT_SECONDS else 0
            if self.failing >= FAILING_IN_A_ROW:
                log.error(
                    "%d serving processes in a row exited within %.0f s of their start: stopping",
                    self.failing, QUICK_EXIT_SECONDS,
                )  # fmt: skip
                return False
            self._fork(index)
        return True

    def _stop_all(self) -> None:
        """SIGTERM to every serving process; wait for them within the drain budget (and
        `KILL_AFTER`), then kill what is left."""
        self.stopping = True
        for child in self.children.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.settings.drain_seconds + KILL_AFTER
        while self.children and time.monotonic() < deadline:
            for index, child in list(self.children.items()):
                if os.waitpid(child.pid, os.WNOHANG)[0]:
                    del self.children[index]
            if self.children:
                signal.sigtimedwait(SIGNALS, 0.1)
        for child in self.children.values():
            log.warning("serving process %d did not stop: killed", child.pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)
            os.waitpid(child.pid, 0)
        self.children.clear()


def _exit_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {signal.Signals(os.WTERMSIG(status)).name}"
    return f"code {os.waitstatus_to_exitcode(status)}"


def ops_socket(host: str, port: int) -> socket.socket | None:
    """The metrics port's socket, shared by the serving processes (None when `port` is 0, or
    when it cannot be bound: said, and the bot serves without it, as a single one does)."""
    if port == 0:
        return None
    try:
        sock = listening_socket(host, port)
    except OSError as exc:
        log.warning(
            "cannot serve /metrics on %s:%d (%s). Choose another with --metrics-port or "
            "APPROVAL_BOT_METRICS_PORT (0: none). Going on without /metrics, /healthz and "
            "/readyz there (the Slack port has them).",
            host, port, exc.strerror or exc,
        )  # fmt: skip
        return None
    log.info("metrics and health of all %s on http://%s:%d (/metrics, /healthz, /readyz)",
             "serving processes", host, sock.getsockname()[1])  # fmt: skip
    return sock


def supervise(
    settings: Settings,
    host: str,
    port: int,
    count: int,
    serve: Callable[[Settings, Serving], int],
    *,
    metrics_host: str = "127.0.0.1",
    metrics_port: int = 0,
) -> int:
    """Serve with `count` processes on `host`:`port`, and their metrics as one on
    `metrics_host`:`metrics_port` (0: none; see the module's docstring); the exit code."""
    embedded: EmbeddedRedis | None = None
    if settings.redis_url is None:  # one embedded server for all of them
        embedded = EmbeddedRedis(settings.data_dir)
        asyncio.run(embedded.start())
        settings = settings.model_copy(update={"redis_url": embedded.url})
    metrics_dir = metrics_directory()
    ops_sock: socket.socket | None = None
    try:
        sock = listening_socket(host, port)
        try:
            bound = sock.getsockname()[1]
            log.info("serving Slack on http://%s:%d/slack/events in %d processes",
                     host, bound, count)  # fmt: skip
            ops_sock = ops_socket(metrics_host, metrics_port)
            supervisor = Supervisor(
                settings, sock, count, serve, metrics_dir=metrics_dir, ops_sock=ops_sock
            )
            return supervisor.run()
        finally:
            sock.close()
            if ops_sock is not None:
                ops_sock.close()
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)
        if embedded is not None:
            embedded.stop()
