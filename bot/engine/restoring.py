"""The SDK's restore of a stored state without work it need not do (#32).

`RunState.from_json` of openai-agents 0.24 costs about 0.9 ms of CPU a resume of the minimal
run; two parts of it are done again each time for nothing:

- `_validate_run_state_json_value` walks the whole tree it is given (some 260 values) to check
  that it is built of JSON's own types only: dicts with text keys, lists, text, integers,
  floats, booleans and None (0.12 ms). A tree that `json.loads` has just made with its default
  hooks is built of exactly those; the bot's `restored_from` marks the one tree it parsed
  itself (its task put back, permanent decisions emptied: text and lists, nothing else) and
  the check answers it at once. Any other tree, from anyone, is walked as before.
- `agents.usage` builds a pydantic `TypeAdapter` of a token-details model each time it reads
  a usage record (four a resume, 30 us each); a `TypeAdapter` of a type does not change once
  built, so `install` gives that module one kept per type.

Each is installed only for the SDK version the bot pins (`bot.engine.identities.SDK`), whose
functions were read for the above. Nothing else of the SDK changes.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterator
from typing import Any

import agents.run_state as run_state
import agents.usage as usage
from pydantic import TypeAdapter

from bot.engine.identities import pinned

_INSTALLED = "_approval_bot_restoring"
# The tree the bot has just parsed from JSON text, while the SDK restores it.
_PARSED: contextvars.ContextVar[object] = contextvars.ContextVar("approval_bot_parsed")


@contextlib.contextmanager
def restored_from(parsed: dict[str, Any]) -> Iterator[None]:
    """While the SDK restores `parsed`, it is known to be JSON's own types: made by
    `json.loads` (default hooks) and changed only by putting in text, lists or None."""
    token = _PARSED.set(parsed)
    try:
        yield
    finally:
        _PARSED.reset(token)


def _checked(sdk: Callable[[object], None]) -> Callable[[object], None]:
    def _validate_run_state_json_value(value: object) -> None:
        if value is _PARSED.get(None):
            return
        sdk(value)

    setattr(_validate_run_state_json_value, _INSTALLED, sdk)
    return _validate_run_state_json_value


@functools.cache
def _kept_adapter(kind: Any) -> TypeAdapter[Any]:
    return TypeAdapter(kind)


def _adapter(kind: Any, *args: Any, **kwargs: Any) -> TypeAdapter[Any]:
    """A `TypeAdapter` of `kind`, the one kept for it where it is asked for by type alone."""
    if args or kwargs:
        return TypeAdapter(kind, *args, **kwargs)
    try:
        return _kept_adapter(kind)
    except TypeError:  # a type that cannot be a key
        return TypeAdapter(kind)


setattr(_adapter, _INSTALLED, TypeAdapter)


def install() -> bool:
    """Replace both where the SDK calls them (once; True when they are in place). Another SDK
    version keeps its own."""
    if not pinned("state restores"):
        return False
    current = run_state._validate_run_state_json_value
    if getattr(current, _INSTALLED, None) is None:
        run_state._validate_run_state_json_value = _checked(current)  # type: ignore[assignment]
    names = vars(usage)  # the module's own `TypeAdapter`, which its functions call by name
    if getattr(names["TypeAdapter"], _INSTALLED, None) is None:
        names["TypeAdapter"] = _adapter
    return True


def sdk_validate(value: object) -> None:
    """The SDK's own check of a state's JSON tree (for checking the one installed)."""
    current = run_state._validate_run_state_json_value
    getattr(current, _INSTALLED, current)(value)
