"""What a tool will receive: a call's arguments read as the tool reads them, as plain JSON.

The policy judges what the tool will receive, not the text the model wrote: a decorated
function tool's parameters are validated by pydantic, leniently (`"50000"` and `"5e4"` become
the float 50000.0, a default fills a parameter the model left out), so a rule that compared the
text would judge something else than what runs. Here the arguments go through the tool's own
parameter model, by the SDK's own approval hook: the invoker's `prepare_arguments` (the
`__agents_prepare_arguments__` the SDK sets on a `function_tool`'s `on_invoke_tool`, which
`agents.util._approvals` calls before a `needs_approval` callable). It validates only
parameter models that run no user code (plain fields, lists, dicts, unions, literals,
defaults): for those, what it returns is exactly what the tool is called with. The values are
put back under their parameters' names with the tool function's signature (`inspect.Signature
.bind`, the inverse of the call the SDK makes).

Where the bot cannot know more without running the tool's own code (a parameter that is a
model of the application's, a custom validator; a tool that is not a decorated function: an
agent used as a tool, an MCP tool, a hosted MCP call), the arguments are read as the JSON they
are, which the tool then reads itself; a rule that finds the wrong type there cannot be
decided (`bot.service.policy.conditions`), so it never approves.

JSON has no NaN or infinity (RFC 8259), but Python's `json` (and so the SDK) reads `NaN`,
`Infinity`, `-Infinity`, and `1e999` as a float that is not finite, and pydantic turns the
strings `"inf"` and `"nan"` into one. Such a value is refused where it enters (`NotFinite`).
"""

from __future__ import annotations

import inspect
import json
import math
from dataclasses import dataclass
from typing import Any

from agents import FunctionTool


class NonFiniteNumber(ValueError):
    """A number JSON cannot hold (NaN, Infinity, or too large for a float)."""


@dataclass(frozen=True)
class Received:
    """The arguments the tool receives, by name, as plain JSON values."""

    arguments: dict[str, Any]


@dataclass(frozen=True)
class NotFinite:
    """The tool would receive a number JSON cannot hold (NaN or an infinity) at `where`."""

    where: str
    """The argument's path, e.g. `args.amount` (`args`: somewhere in the arguments)."""


@dataclass(frozen=True)
class Unknown:
    """What the tool would receive cannot be read (`why`, in words)."""

    why: str


Reading = Received | NotFinite | Unknown


def _no_constant(name: str) -> Any:
    raise NonFiniteNumber(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NonFiniteNumber(f"{text} is too large for a number")
    return value


def loads_json(text: str) -> Any:
    """`text` as JSON as RFC 8259 has it: `NaN`, `Infinity`, `-Infinity` and a number too
    large for a float (`1e999`) raise `NonFiniteNumber`; anything else not JSON, ValueError."""
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite)


def non_finite_at(value: Any, path: str = "args") -> str | None:
    """The path of the first float in `value` that is not finite (None: there is none)."""
    if isinstance(value, float):
        return None if math.isfinite(value) else path
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = non_finite_at(item, f"{path}.{key}")
        if found is not None:
            return found
    return None


def read_json(arguments: str | None) -> Reading:
    """JSON arguments as the tool reads them when it reads them itself: an object."""
    text = arguments or ""
    try:
        value = loads_json(text) if text else {}
    except NonFiniteNumber:
        try:  # where it is, for the sentence that refuses it
            where = non_finite_at(json.loads(text)) or "args"
        except ValueError:
            where = "args"
        return NotFinite(where)
    except (ValueError, RecursionError):
        return Unknown("the arguments are not valid JSON")
    if not isinstance(value, dict):
        return Unknown("the arguments are not a JSON object")
    return Received(value)


def receive(tool: Any, arguments: str | None) -> Reading:
    """What `tool` (a tool of the agent that made the call, or None when it is not one of its
    function tools) will receive for `arguments` (the model's JSON text)."""
    raw = read_json(arguments)
    if not isinstance(raw, Received) or not isinstance(tool, FunctionTool):
        return raw
    prepared = _prepared(tool, arguments or "")
    if prepared is None:
        return raw
    where = non_finite_at(prepared)
    if where is not None:
        return NotFinite(where)
    return Received(prepared)


def _prepared(tool: FunctionTool, arguments: str) -> dict[str, Any] | None:
    """The parameters' values after the tool's own validation, by name, when the SDK validates
    them without running user code; None when it does not (or the arguments do not
    validate: the tool would refuse them; a person sees them as sent)."""
    invoker = inspect.unwrap(tool.on_invoke_tool)  # the journal wraps it (functools.wraps)
    prepare = getattr(invoker, "prepare_arguments", None)
    wrapped = getattr(invoker, "_get_wrapped_callable", None)
    if not callable(prepare) or not callable(wrapped):
        return None
    try:
        prepared = prepare(arguments, tool.name)
        function = wrapped()
        signature = inspect.signature(function)
    except Exception:  # the ordinary invocation path reports what is wrong, after approval
        return None
    names = list((tool.params_json_schema.get("properties") or {}).keys())
    args, kwargs = list(prepared.args), dict(prepared.kwargs)
    if names and not args and not kwargs:  # validation skipped (user code) or refused
        return None
    parameters = list(signature.parameters.values())
    lead: list[Any] = []
    if (
        parameters
        and parameters[0].name not in names
        and parameters[0].kind
        in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        )
    ):
        lead = [None]  # the run context, which the SDK passes first and the schema omits
    try:
        bound = signature.bind(*lead, *args, **kwargs)
    except TypeError:
        return None
    values: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        if name not in names:
            continue
        kind = signature.parameters[name].kind
        values[name] = list(value) if kind == inspect.Parameter.VAR_POSITIONAL else value
    plain = _plain(values)
    return plain if isinstance(plain, dict) and set(plain) == set(names) else None


_MISSING = object()


def _plain(value: Any) -> Any:
    """`value` as plain JSON values (what data-only validation produces); `_MISSING` inside
    when something is not (the caller then reads the arguments as sent)."""
    if value is None or type(value) in (bool, int, str, float):
        return value
    if type(value) in (list, tuple):
        items = [_plain(v) for v in value]
        return _MISSING if any(i is _MISSING for i in items) else items
    if type(value) is dict and all(type(k) is str for k in value):
        plain = {k: _plain(v) for k, v in value.items()}
        return _MISSING if any(v is _MISSING for v in plain.values()) else plain
    return _MISSING
