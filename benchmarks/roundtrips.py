"""Start the bot with every Redis round trip counted (`BENCH_ROUNDTRIPS=1 make bench`).

A round trip is one write to a Redis connection (a pipeline is one, whatever it holds); each is
counted under the names of the commands it sends. SIGUSR1 writes the counts so far as JSON to
the file named by BENCH_ROUNDTRIPS_FILE. With BENCH_ROUNDTRIPS_CALLERS set, each name also
says which of the bot's functions sent it (the innermost three), to find what a round trip is
for. Then the bot runs as `python -m bot` would.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import sys
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

from redis.asyncio.connection import AbstractConnection

COUNTS: Counter[str] = Counter()
SCRIPTS: dict[str, str] = {}  # sha1 -> script file name


def _shape(key: str) -> str:
    """A key without its ids: `ab:{<run>}:outbox` for `ab:{0123...}:outbox`."""
    return re.sub(r"[0-9a-f]{16}[^:}]*", "<id>", key)


def _scripts() -> None:
    root = Path(__file__).resolve().parents[1] / "bot" / "store" / "lua"
    prelude = (root / "_outbox.lua").read_bytes()
    for path in root.glob("*.lua"):
        body = path.read_bytes()
        for text in (body, prelude + b"\n" + body, prelude + body):
            SCRIPTS[hashlib.sha1(text).hexdigest()] = path.stem


_send = AbstractConnection.send_packed_command


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


BOT = str(Path(__file__).resolve().parents[1] / "bot") + os.sep
CALLERS = bool(os.environ.get("BENCH_ROUNDTRIPS_CALLERS"))


def _callers() -> str:
    """The innermost three functions of the bot on the stack (a coroutine's awaiting chain)."""
    found: list[str] = []
    frame = sys._getframe(2)
    while frame is not None and len(found) < 3:
        if frame.f_code.co_filename.startswith(BOT):
            found.append(frame.f_code.co_qualname)
        frame = frame.f_back  # type: ignore[assignment]
    return " <- ".join(found)


async def _counted(self: AbstractConnection, command: Any, check_health: bool = True) -> None:
    COUNTS[_name(command) + (f" [{_callers()}]" if CALLERS else "")] += 1
    await _send(self, command, check_health)


def _dump(signum: int, frame: FrameType | None) -> None:
    with open(os.environ["BENCH_ROUNDTRIPS_FILE"], "w") as out:
        json.dump(COUNTS, out)


AbstractConnection.send_packed_command = _counted  # type: ignore[method-assign]
signal.signal(signal.SIGUSR1, _dump)
_scripts()

if __name__ == "__main__":
    from bot.cli import main

    sys.exit(main())
