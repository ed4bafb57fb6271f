"""Python processes for tests, forked from a process that has already imported the bot.

A fresh `python -m bot ...` spends 4-5 CPU-seconds importing the Agents SDK, openai, Bolt and
the rest before it does anything (a `python -m pytest` in a project of its own, with the test
kit's plugin, as much again); the suite starts some hundred of them, which on a two-core CI
machine was about half of all the CPU the tests used. So each pytest worker starts one fork
server (once, lazily): a single-threaded process that imports the bot's modules (and pytest)
and then, for each request, forks a child that becomes `python -m <module> <args>` or
`python <script> <args>` in the given directory with the given environment and standard
streams. The child is a real, separate process (its own pid, signals, exit code, files); only
the imports are shared, copy-on-write.

What a fresh interpreter would do differently is made the same in the child: the environment is
replaced, `sys.path` starts with the working directory (`-m`) or the script's directory and the
environment's PYTHONPATH, import caches are dropped (tests write modules), `tempfile` looks for
its directory again, `random` is reseeded. Nothing read from the environment at import time is
preloaded (`bot.examples` is not).

A request may carry bound sockets besides the standard streams: the child gets them from file
descriptor 3 on with LISTEN_FDS / LISTEN_PID set, as systemd passes them, and the bot serves on
the one bound to the address it is told (`bot.listening`), so no other process can take a
test's port between choosing and serving it.

The server is the child's parent, so it reaps it and sends its exit status back over the
request's connection; `ForkedProcess` is the `subprocess.Popen` subset the tests use. How a
console script finds its modules is tested here too: the child's `sys.path` starts as an
interpreter's would for that script (tests/test_trip_ups.py fails if the bot stops putting the
working directory on it).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import importlib
import io
import json
import os
import random
import runpy
import select
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The bot, and pytest with the test kit's plugin (tests that run pytest in a project of its own).
PRELOAD = (
    "bot.cli", "bot.runtime", "bot.checks", "bot.sandbox.server", "bot.store.connection",
    "pytest", "bot.testing.pytest_plugin",
)  # fmt: skip
_HEADER = struct.Struct("!I")
MAX_FDS = 16  # stdin, stdout, stderr and listening sockets


# The server ------------------------------------------------------------------------------------


def _recv_exact(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _run(argv: list[str]) -> None:
    """What `python <argv>` runs: `-m module args` or `script args`."""
    if argv[:1] == ["-m"]:
        sys.argv = [argv[1], *argv[2:]]  # argv[0] becomes the module's file, as python sets it
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        runpy.run_path(argv[0], run_name="__main__")


def _child(request: dict[str, Any], fds: list[int], base_path: list[str]) -> None:
    """In the forked child: become `python <argv>`; never returns."""
    code = 1
    try:
        # Out of the way first (a received descriptor may have a number a target takes), then
        # stdin, stdout, stderr, and any listening sockets from 3 on, as systemd passes them.
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in fds]
        for fd in fds:
            os.close(fd)
        for target, fd in enumerate(high):
            os.dup2(fd, target)
            os.close(fd)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        if len(fds) > 3:  # the bot serves on them (`bot.listening`)
            os.environ.update(LISTEN_FDS=str(len(fds) - 3), LISTEN_PID=str(os.getpid()))
        argv: list[str] = request["argv"]
        extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        # `python -m` looks in the working directory first, `python script` beside the script.
        first = request["cwd"] if argv[0] == "-m" else os.path.dirname(os.path.abspath(argv[0]))
        sys.path[:] = [first, *extra, *base_path]
        importlib.invalidate_caches()
        tempfile.tempdir = None  # found again from this environment's TMPDIR
        random.seed()
        if request["env"].get("PYTHONUNBUFFERED"):
            for stream in (sys.stdout, sys.stderr):
                if isinstance(stream, io.TextIOWrapper):
                    stream.reconfigure(line_buffering=True)
        try:
            _run(argv)
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
            if not isinstance(exit_.code, int | None):
                print(exit_.code, file=sys.stderr)
    except BaseException:  # whatever it is, the test reads it on stderr
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()  # what the interpreter's exit would run (logging's flush)
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code if isinstance(code, int) else 1)


def serve(address: str) -> None:
    """Import the bot, then fork a child per request until the parent goes away."""
    for name in PRELOAD:
        importlib.import_module(name)
    base_path = [p for p in sys.path[1:] if p != str(ROOT)]
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(64)
    print("ready", flush=True)
    children: dict[int, socket.socket] = {}
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    while os.getppid() == parent:
        for _key, _ in selector.select(timeout=0.02):
            conn, _ = listener.accept()
            try:
                head, fds, _flags, _addr = socket.recv_fds(conn, _HEADER.size, MAX_FDS)
                head += _recv_exact(conn, _HEADER.size - len(head))
                request = json.loads(_recv_exact(conn, _HEADER.unpack(head)[0]))
            except Exception:  # a client that went away
                conn.close()
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                selector.close()
                listener.close()
                for other in children.values():
                    other.close()
                conn.close()
                _child(request, fds, base_path)
            for fd in fds:
                os.close(fd)
            conn.sendall(f"pid {pid}\n".encode())
            children[pid] = conn
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
                conn.close()


# The client ------------------------------------------------------------------------------------


SHARED = "TEST_FORK_SERVER"  # the address of a server all of a session's workers share


def start_server() -> tuple[subprocess.Popen[bytes], str]:
    """A fork server, starting (not yet ready: `wait_ready`); its process and address."""
    directory = tempfile.mkdtemp(prefix="bot-forkserver-")
    address = os.path.join(directory, "socket")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k != SHARED}
    env["PYTHONPATH"] = str(ROOT)
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.forkserver", address],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
    )  # fmt: skip
    return process, address


def wait_ready(process: subprocess.Popen[bytes]) -> None:
    assert process.stdout is not None
    if process.stdout.readline().strip() != b"ready":
        raise RuntimeError("the test fork server did not start (see stderr)")


def stop_server(process: subprocess.Popen[bytes], address: str) -> None:
    """Stop the server and remove the folder of its socket (a run leaves nothing in /tmp)."""
    if process.poll() is None:
        process.kill()
        process.wait(timeout=10)
    shutil.rmtree(os.path.dirname(address), ignore_errors=True)


class _Server:
    """The fork server this process uses: the session's (the xdist controller starts one for
    all its workers: tests/conftest.py), or one of its own, started on first use."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.process: subprocess.Popen[bytes] | None = None
        self.address = ""

    def ensure(self) -> str:
        if os.environ.get(SHARED):
            return os.environ[SHARED]
        with self.lock:
            if self.process is not None and self.process.poll() is None:
                return self.address
            self.process, self.address = start_server()
            wait_ready(self.process)
            atexit.register(self.stop)
            return self.address

    def stop(self) -> None:
        if self.process is not None:
            stop_server(self.process, self.address)


def _connect(address: str, timeout: float = 120.0) -> socket.socket:
    """A connection to the server at `address`; the session's may still be importing."""
    deadline = time.monotonic() + timeout
    while True:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(address)
            return conn
        except (FileNotFoundError, ConnectionRefusedError):
            conn.close()
            if time.monotonic() > deadline:
                raise RuntimeError(f"no test fork server at {address}") from None
            time.sleep(0.05)


_SERVER = _Server()


class ForkedProcess:
    """The part of `subprocess.Popen`'s interface the tests use, for a forked bot."""

    def __init__(self, args: list[str], conn: socket.socket, pid: int) -> None:
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self._conn = conn
        self._buffer = b""

    def _read_exit(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._conn], [], [], left)
            if not ready:
                return
            chunk = self._conn.recv(256)
            if not chunk:  # the server went away without a status
                self.returncode = -signal.SIGKILL
                break
            self._buffer += chunk
            if b"\n" in self._buffer:
                line = self._buffer.split(b"\n", 1)[0].decode()
                self.returncode = int(line.split()[1])
        self._conn.close()

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read_exit(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._read_exit(timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def fork_python(
    argv: list[str], *, env: dict[str, str], cwd: Path | str, stdout: int | None = None,
    stderr: int | None = None, listeners: Sequence[socket.socket] = (),
) -> ForkedProcess:  # fmt: skip
    """`python <argv>` (`-m module ...` or `script ...`) in `cwd` with exactly `env`; stdin is
    /dev/null, stdout and stderr are the given file descriptors (this process's own by
    default). `listeners` are bound sockets the child gets as systemd would pass them (fd 3
    on, LISTEN_FDS): a server asked to listen on one's address serves on it (`bot.listening`)."""
    conn = _connect(_SERVER.ensure())
    payload = json.dumps({"argv": list(argv), "env": dict(env), "cwd": str(cwd)}).encode()
    with open(os.devnull, "rb") as devnull:
        fds = [devnull.fileno(), sys.stdout.fileno() if stdout is None else stdout,
               sys.stderr.fileno() if stderr is None else stderr,
               *(sock.fileno() for sock in listeners)]  # fmt: skip
        socket.send_fds(conn, [_HEADER.pack(len(payload))], fds)
    conn.sendall(payload)
    line = b""
    while not line.endswith(b"\n"):
        chunk = conn.recv(1)
        if not chunk:
            raise RuntimeError("the test fork server closed the connection")
        line += chunk
    return ForkedProcess([sys.executable, *argv], conn, int(line.split()[1]))


def fork_bot(
    args: list[str], *, env: dict[str, str], cwd: Path | str, stdout: int | None = None,
    stderr: int | None = None, listeners: Sequence[socket.socket] = (),
) -> ForkedProcess:  # fmt: skip
    """`python -m bot <args>`: see `fork_python`."""
    return fork_python(
        ["-m", "bot", *args], env=env, cwd=cwd, stdout=stdout, stderr=stderr, listeners=listeners
    )


def run_python(
    argv: list[str], *, env: dict[str, str], cwd: Path | str, timeout: float = 60,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Like `subprocess.run([python, *argv], capture_output=True, text=True)`, forked (see
    `fork_python`), but the output as written (no newline translation: a CR stays a CR)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = fork_python(argv, env=env, cwd=cwd, stdout=out.fileno(), stderr=err.fileno())
        try:
            code = process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
            raise
        out.seek(0)
        err.seek(0)
        result = subprocess.CompletedProcess(
            [sys.executable, *argv], code,
            out.read().decode(errors="replace"), err.read().decode(errors="replace"),
        )  # fmt: skip
        if check:
            result.check_returncode()
        return result


def run_bot(
    args: list[str], *, env: dict[str, str], cwd: Path | str, timeout: float = 60,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """`python -m bot <args>`: see `run_python`."""
    return run_python(["-m", "bot", *args], env=env, cwd=cwd, timeout=timeout, check=check)


if __name__ == "__main__":
    serve(sys.argv[1])
