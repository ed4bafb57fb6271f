"""Count the bot's Redis round trips (`BENCH_ROUNDTRIPS=1 make bench`, and the tests that hold
a decision's and a run's counts below their goals).

A round trip is one write to a Redis connection (a pipeline is one, whatever it holds); each is
counted under the names of the commands it sends. Two kinds are set apart, for they do not
depend on what the bot is asked to do but on how long it runs: a poll that found nothing (the
projector's, the App Home publisher's and the timers' look at their index, a worker's read of
the job stream: their reply is empty), and the periodic upkeep (the sweeper). What is left is
what the bot's work cost, whatever the machine's speed. (A new connection's handshake is
counted apart too: `SETUP`.)

In-process (tests, benchmarks): `counting()` installs the counter; `RoundTrips.snapshot()`
before and after a phase. As a program (`python -m benchmarks.roundtrips <bot's arguments>`)
it starts the bot with every round trip counted; SIGUSR1 writes the counts so far as JSON to
the file named by BENCH_ROUNDTRIPS_FILE. With BENCH_ROUNDTRIPS_CALLERS set, each name also
says which of the bot's functions sent it (the innermost three), to find what a round trip is
for.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from redis.asyncio.connection import AbstractConnection

SCRIPTS: dict[str, str] = {}  # sha1 -> script file name
BOT = str(Path(__file__).resolve().parents[1] / "bot") + os.sep
# Functions whose round trips are polls: an empty reply means it found nothing to do.
POLLS = ("Outbox.claim", "HomeIndex.claim", "JobQueue.read", "JobQueue.reclaim",
         "WebhookOutbox.")  # fmt: skip
# Periodic upkeep, whatever the traffic (counted apart): the sweeper, the timers' loop (its
# look at the earliest timer finds calls' expiries hours away), the webhook sender's.
UPKEEP = ("Sweeper.", "Timers.timers_forever", "WebhookSender.", "PolicySource.")
# A test's or benchmark's own looks at the bot (the harness's waits): not the bot's work.
OBSERVER = ("BotHarness.",)
# A new connection's handshake (redis-py's CLIENT SETINFO, and HELLO, AUTH, SELECT): the pool
# opens a connection when more callers than ever before wait at once, which depends on what
# ran before (and how busy the machine is), not on what an operation does (counted apart).
# So does redis-py's health check, a PING before the next command on a connection left idle
# longer than its `health_check_interval` (30 s): on a busy machine a test's phases can be
# that far apart (sent with `check_health=False`, which no command of the bot's is).
SETUP = ("CLIENT", "HELLO", "AUTH", "SELECT")
HEALTH_CHECK = "PING"


def _shape(key: str) -> str:
    """A key without its ids: `ab:{<id>}:outbox` for `ab:{0123...}:outbox`."""
    return re.sub(r"[0-9a-f]{16}[^:}]*", "<id>", key)


def _scripts() -> None:
    root = Path(__file__).resolve().parents[1] / "bot" / "store" / "lua"
    prelude = (root / "_outbox.lua").read_bytes()
    take = b"local function take(KEYS, ARGV)\n" + (root / "take_job.lua").read_bytes() + b"\nend\n"
    take_next = b"local function next_jobs(KEYS, ARGV)\n"
    take_next += (root / "take_next.lua").read_bytes() + b"\nend\n"
    pace = b"local function pace(KEYS, ARGV)\n" + (root / "pace.lua").read_bytes() + b"\nend\n"
    for path in root.glob("*.lua"):
        body = path.read_bytes()
        for text in (body, prelude + b"\n" + body, prelude + body, take + body,
                     take + take_next + body, pace + body):  # fmt: skip
            SCRIPTS[hashlib.sha1(text).hexdigest()] = path.stem


def _name(packed: Any) -> str:
    """The command names in a packed write: `*<n>\\r\\n$<len>\\r\\n<NAME>...`."""
    chunks = packed if isinstance(packed, list | tuple) else [packed]
    data = b"".join(c if isinstance(c, bytes) else bytes(c) for c in chunks)
    names = []
    for part in data.split(b"\r\n*")[:8]:
        fields = part.split(b"\r\n")
        if len(fields) > 2:
            name = fields[2].decode(errors="replace").upper()
            if name == "EVALSHA" and len(fields) > 8:  # the script and its first key
                key = fields[8].decode(errors="replace")
                name += f"({SCRIPTS.get(fields[4].decode(), fields[4][:8].decode())} {_shape(key)})"
            elif name.startswith("H") and len(fields) > 4:  # a hash command: its key
                name += f"({_shape(fields[4].decode(errors='replace'))})"
            names.append(name)
    return "+".join(names)


def _callers() -> list[str]:
    """The bot's functions on the stack, innermost first (a coroutine's awaiting chain)."""
    found: list[str] = []
    frame: FrameType | None = sys._getframe(3)
    while frame is not None:
        if frame.f_code.co_filename.startswith(BOT):
            found.append(frame.f_code.co_qualname)
        frame = frame.f_back
    return found


def _empty(reply: Any) -> bool:
    """A poll's reply that found nothing: nil, an empty list, or XAUTOCLAIM's `0-0, [], []`."""
    if reply is None or reply == [] or reply == {}:
        return True
    if isinstance(reply, list | tuple) and reply and reply[0] in (b"0-0", "0-0"):
        return all(not part for part in reply[1:])
    return False


@dataclass
class RoundTrips:
    """Round trips so far, by name: the work's, the empty polls', the upkeep's."""

    work: Counter[str] = field(default_factory=Counter)
    polls: Counter[str] = field(default_factory=Counter)
    upkeep: Counter[str] = field(default_factory=Counter)
    setup: Counter[str] = field(default_factory=Counter)
    callers: bool = bool(os.environ.get("BENCH_ROUNDTRIPS_CALLERS"))

    def snapshot(self) -> Counter[str]:
        """The work's round trips so far (subtract two snapshots for a phase's)."""
        return Counter(self.work)

    def count(self, connection: Any, packed: Any, check_health: bool = True) -> None:
        chain = _callers()
        name = _name(packed) + (f" [{' <- '.join(chain[:3])}]" if self.callers else "")
        if any(c.startswith(OBSERVER) for c in chain):
            return
        if name.startswith(SETUP) or (not check_health and _name(packed) == HEALTH_CHECK):
            self.setup[name] += 1
            return
        if any(c.startswith(UPKEEP) for c in chain):
            self.upkeep[name] += 1
            return
        if any(c.startswith(POLLS) for c in chain):
            # A poll is counted when its reply is read, not when it is sent: one in flight
            # when a phase's snapshot is taken (the projector's or App Home's next look at
            # its index, sent while the test sees the bot idle; more likely on a busy
            # machine) would else count in that phase, its empty reply read after it.
            connection._roundtrip = name
            return
        connection._roundtrip = None
        self.work[name] += 1

    def replied(self, connection: Any, reply: Any) -> None:
        """A poll's reply: found nothing (an empty reply), or work (anything else, an error
        reply too)."""
        name = getattr(connection, "_roundtrip", None)
        if name is None:
            return
        connection._roundtrip = None
        (self.polls if _empty(reply) else self.work)[name] += 1


COUNTS = RoundTrips()
_send = AbstractConnection.send_packed_command
_read = AbstractConnection.read_response


async def _counted(self: AbstractConnection, command: Any, check_health: bool = True) -> None:
    COUNTS.count(self, command, check_health)
    await _send(self, command, check_health)


async def _replied(self: AbstractConnection, *args: Any, **kwargs: Any) -> Any:
    try:
        reply = await _read(self, *args, **kwargs)
    except Exception as error:  # an error reply (raised by redis-py) is a reply too
        COUNTS.replied(self, error)
        raise
    COUNTS.replied(self, reply)
    return reply


def install() -> RoundTrips:
    """Count every round trip of this process from now on."""
    if AbstractConnection.send_packed_command is not _counted:
        _scripts()
        AbstractConnection.send_packed_command = _counted  # type: ignore[method-assign]
        AbstractConnection.read_response = _replied  # type: ignore[method-assign]
    return COUNTS


@contextlib.contextmanager
def counting() -> Iterator[RoundTrips]:
    """Count every round trip of this process while in the block (then no more)."""
    installed = AbstractConnection.send_packed_command is _counted
    yield install()
    if not installed:
        AbstractConnection.send_packed_command = _send  # type: ignore[method-assign]
        AbstractConnection.read_response = _read  # type: ignore[method-assign]


def _dump(signum: int, frame: FrameType | None) -> None:
    with open(os.environ["BENCH_ROUNDTRIPS_FILE"], "w") as out:
        json.dump(COUNTS.work, out)


if __name__ == "__main__":
    install()
    signal.signal(signal.SIGUSR1, _dump)
    from bot.cli import main

    sys.exit(main())
