"""What every store module shares about Redis: the Lua scripts' text, replies' text, the
timestamp format, and the outbox mark written inside a MULTI."""

from __future__ import annotations

import time
from importlib import resources
from typing import Any

from bot.store import keys


def script(name: str) -> str:
    """The text of `bot/store/lua/<name>.lua`."""
    return (resources.files("bot.store") / "lua" / f"{name}.lua").read_text(encoding="utf-8")


def marking(name: str) -> str:
    """A transition script that marks messages in its run's outbox (see `_outbox.lua`)."""
    return script("_outbox") + script(name)


def text(value: Any) -> str:
    """A Redis reply item as text (bytes are UTF-8; lone surrogates survive the round trip)."""
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else str(value)


def now() -> str:
    """Timestamps are Unix seconds with millisecond precision, as strings (Redis-native)."""
    return f"{time.time():.3f}"


def mark(pipe: Any, run_id: str, target: str, retention: int) -> None:
    """Inside a MULTI: `target` must show the state this transaction writes."""
    outbox = keys.outbox_key(run_id)
    pipe.hincrby(outbox, target, 1)
    pipe.hsetnx(outbox, target + "@", now())
    pipe.expire(outbox, retention)
