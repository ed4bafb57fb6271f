"""The SDK's tool-invocation identities, each computed once (#32).

openai-agents 0.24 names every tool call by an identity (its type, call id, the scope an
approval covers, and a SHA-256 fingerprint of what the call does: its tool and arguments) and
compares identities to match approvals, outputs and pending calls: about 40 times in a resume
of a run paused on one call (restoring and checking the state, `approve`, the streamed turn,
the tool's run). Each time, `tool_invocation_identity_and_scope` dumps the call's pydantic model
three times, parses and normalizes its arguments and hashes two JSON documents: about a fifth
of the resume's CPU (1 ms of 5.3 in a plain process), always for the same few calls.

The SDK's function reads its call only through `_unwrap_hosted_mcp_approval` (three times), which
returns the call as a plain mapping (a model's `model_dump(exclude_none, exclude_unset)`, a hosted
MCP request merged with its provider data) and returns such a mapping unchanged. So the SDK's own
function, given that mapping instead of the call, computes exactly what it computes for the call.
`install` replaces it, for the SDK version the bot pins, with one that unwraps once and calls the
SDK's own function with the mapping, keeping its answer for mappings of plain text and integer
fields (a function call's, for one) and the same keyword arguments: the answer, a tuple of
strings, is a function of those alone. Anything else (nested fields, floats, long arguments) is
computed each time, as before. Nothing else of the SDK changes.

Finding the kept answer does not dump the call where its key is provably the one its dump gives:
for a function call, an exact `ResponseFunctionToolCall` (the model's own class, no subclass)
with no extra fields, its key is read from the model itself (`_function_call_fields`): the
fields it was given (pydantic's `exclude_unset`), in the model's order, leaving out those that
are None (`exclude_none`), each a text (the boolean `async_`, a boolean), which a dump returns
as it is; `_unwrap_hosted_mcp_approval` returns such a dump unchanged (it is not a hosted
call). Anything else (another class, extra fields, a field of another type, a `caller`) is
dumped as before. A call found thus costs no `model_dump` (36 a resume of the minimal run),
nor does computing an answer not yet kept (the SDK's function is given the mapping of those
fields). The SDK's `tool_invocation_call_id` (a call's type and call id), which its modules
ask directly another 32 times a resume, dumping the call each time, is given that mapping in
their place too; it reads the call only through `_unwrap_hosted_mcp_approval`, which returns a
mapping unchanged, so it answers what it answers for the call.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any, TypeVar

import agents
import agents._tool_invocation as invocation
import agents.agent_tool_state as agent_tool_state
import agents.result as result
import agents.run_context as run_context
import agents.run_internal.items as run_items
import agents.run_internal.session_persistence as session_persistence
import agents.run_internal.tool_planning as tool_planning
import agents.run_internal.turn_resolution as turn_resolution
import agents.run_state as run_state
import agents.tool_context as tool_context
import pydantic
from agents import RunContextWrapper, RunState, ToolApprovalItem
from agents.run_internal.run_steps import NextStepInterruption
from openai.types.responses import ResponseFunctionToolCall

from bot.engine.identities import SDK, pinned

_INSTALLED = "_approval_bot_once"
_T = TypeVar("_T")
# The modules that call the SDK's function by a name of their own.
_CALLERS = (invocation, run_context, run_state, turn_resolution, tool_context, agent_tool_state)
# And those that call its functions that read a call only as a mapping (a model as its dump),
# by name: each is given a plain function call's mapping in place of the call (`_read`).
_CALL_ID_CALLERS = (run_context, run_state, turn_resolution, tool_planning)
_READERS: dict[str, tuple[Any, ...]] = {
    "tool_invocation_call_id": _CALL_ID_CALLERS,
    "tool_output_identity": (
        run_context, run_state, turn_resolution, tool_planning, run_items, session_persistence,
        result,
    ),
    "tool_invocation_approval_scope": (run_context,),
}  # fmt: skip
# Answers kept (each a few hundred bytes with its key), and the longest text field kept: a
# resume asks about its few calls dozens of times within milliseconds.
KEPT = 2048
_LONGEST = 4096

Identity = tuple[str, str, str, str] | None
CallId = tuple[str, str | None] | None
_Key = tuple[Any, ...]
_Fields = tuple[tuple[str, type, Any], ...]
# A function call's fields in its model's order (a dump's).
_FUNCTION_CALL_FIELDS = tuple(ResponseFunctionToolCall.model_fields)
# What makes a dump return other than the fields as they are: none for the model read (the
# pinned openai's); another version's that has any is dumped.
_PLAIN_DUMP = (
    not ResponseFunctionToolCall.model_computed_fields
    and not ResponseFunctionToolCall.__pydantic_decorators__.field_serializers
    and not ResponseFunctionToolCall.__pydantic_decorators__.model_serializers
    and not any(field.exclude for field in ResponseFunctionToolCall.model_fields.values())
    and ResponseFunctionToolCall.model_dump is pydantic.BaseModel.model_dump
)
_FUNCTION_CALL_NAMES = frozenset(_FUNCTION_CALL_FIELDS)
# The type of each field's value that is read as its dump returns it: text (the pinned openai's
# fields of text or of a choice of texts), a boolean (`async_`); for any other field (a
# `caller`, a nested model; another version's new field) the call is dumped.
_READ_AS: dict[str, type] = dict.fromkeys(
    ("arguments", "call_id", "name", "type", "id", "namespace", "status"), str
) | {"async_": bool}


class _Dumped:
    """No value's type: the field's value, unless None, makes the call dumped."""


_FUNCTION_CALL_TYPES = tuple((name, _READ_AS.get(name, _Dumped)) for name in _FUNCTION_CALL_FIELDS)
_MISSING = object()


def _function_call_fields(raw_item: Any) -> _Fields | None:
    """The fields `_key` reads from the dump of `raw_item` (`_unwrap_hosted_mcp_approval`'s
    mapping), read from the model without dumping it, for a plain function call; None for
    anything else (it is dumped)."""
    if (
        type(raw_item) is not ResponseFunctionToolCall
        or raw_item.__pydantic_extra__
        or not _PLAIN_DUMP
    ):
        return None
    given = raw_item.__pydantic_fields_set__
    if not given <= _FUNCTION_CALL_NAMES:
        return None  # a name given that is no field's (`model_construct`)
    values = raw_item.__dict__
    fields: list[tuple[str, type, Any]] = []
    for name, expected in _FUNCTION_CALL_TYPES:
        if name in given:
            value = values.get(name, _MISSING)
            kind = type(value)
            if kind is expected:
                if kind is str and len(value) > _LONGEST:
                    return None
                fields.append((name, kind, value))
            elif value is not None:
                return None  # a model built or changed without validation, a caller, ...
    return tuple(fields)


def _fields(mapping: Any) -> _Fields | None:
    """The fields of `mapping` for a key, or None where the answer is not kept: a mapping
    whose keys are not all text, or any of whose values is not text, an integer, a boolean or
    None (each value's type is in the key: `True` and `1`, equal in Python, are not in JSON),
    or has a text longer than `_LONGEST`."""
    if type(mapping) is not dict:
        return None
    fields: list[tuple[str, type, Any]] = []
    for name, value in mapping.items():
        kind = type(value)
        if type(name) is not str:
            return None
        if kind is str:
            if len(value) > _LONGEST:
                return None
        elif kind is not int and kind is not bool and value is not None:
            return None
        fields.append((name, kind, value))
    return tuple(fields)


def _key(
    fields: _Fields, tool_lookup_key: Any, tool_name: Any, invocation_role: Any
) -> _Key | None:
    """A key for the SDK's answer about a mapping of `fields` with these arguments, or None
    where the answer is not kept (arguments not plain text)."""
    if tool_lookup_key is not None and (
        type(tool_lookup_key) is not tuple or any(type(part) is not str for part in tool_lookup_key)
    ):
        return None
    for text in (tool_name, invocation_role):
        if text is not None and type(text) is not str:
            return None
    return (fields, tool_lookup_key, tool_name, invocation_role)


def _once(sdk: Callable[..., Identity]) -> Callable[..., Identity]:
    kept: dict[_Key, Identity] = {}

    def tool_invocation_identity_and_scope(
        raw_item: Any,
        *,
        tool_lookup_key: Any = None,
        tool_name: str | None = None,
        invocation_role: str | None = None,
    ) -> Identity:
        mapping: Any = None
        fields = _function_call_fields(raw_item)
        if fields is None:
            mapping = invocation._unwrap_hosted_mcp_approval(raw_item)
            if mapping is None:
                return None  # as the SDK's: its first reading finds no call
            fields = _fields(mapping)
        key = None if fields is None else _key(fields, tool_lookup_key, tool_name, invocation_role)
        if key is not None:
            try:
                return kept[key]
            except KeyError:
                pass
        if mapping is None:  # the fields read: the mapping the dump gives, made of them
            mapping = {name: value for name, _, value in fields or ()}
        answer = sdk(
            mapping,
            tool_lookup_key=tool_lookup_key,
            tool_name=tool_name,
            invocation_role=invocation_role,
        )
        if key is not None:
            if len(kept) >= KEPT:
                # the oldest (a tool's thread may change it meanwhile)
                with contextlib.suppress(RuntimeError, StopIteration):
                    kept.pop(next(iter(kept)), None)
            kept[key] = answer
        return answer

    setattr(tool_invocation_identity_and_scope, _INSTALLED, sdk)
    return tool_invocation_identity_and_scope


def _as_read(raw_item: Any) -> Any:
    """A plain function call as the mapping the SDK reads it as (its dump), made of the fields
    read; anything else as it is."""
    fields = _function_call_fields(raw_item)
    if fields is None:
        return raw_item
    return {name: value for name, _, value in fields}


def _read(sdk: Callable[..., _T]) -> Callable[..., _T]:
    """`sdk`, a function of the SDK's that reads its call only as a mapping (a mapping as it
    is, a model as its dump), given a plain function call's mapping in place of the call."""

    @functools.wraps(sdk)
    def read(raw_item: Any, *args: Any, **kwargs: Any) -> _T:
        return sdk(_as_read(raw_item), *args, **kwargs)

    setattr(read, _INSTALLED, sdk)
    return read


def _read_method(sdk: Callable[..., _T]) -> Callable[..., _T]:
    """The same for a method of the SDK's whose first argument after `self` is the call."""

    @functools.wraps(sdk)
    def read(self: Any, raw_item: Any, *args: Any, **kwargs: Any) -> _T:
        return sdk(self, _as_read(raw_item), *args, **kwargs)

    setattr(read, _INSTALLED, sdk)
    return read


def install() -> bool:
    """Replace the function where the SDK's modules call it (once; True when it is in place).
    Another SDK version keeps its own: what it computes may differ."""
    if not pinned("tool identities"):
        return False
    current = invocation.tool_invocation_identity_and_scope
    if getattr(current, _INSTALLED, None) is None:
        once = _once(current)
        for module in _CALLERS:
            module.tool_invocation_identity_and_scope = once  # type: ignore[attr-defined]
    for name, callers in _READERS.items():
        sdk = getattr(invocation, name)  # its own module's callers are left as they are
        read = _read(sdk)
        for module in callers:
            if getattr(getattr(module, name), _INSTALLED, None) is None:
                setattr(module, name, read)
    sticky = RunContextWrapper._matching_sticky_approval_keys
    if getattr(sticky, _INSTALLED, None) is None:
        RunContextWrapper._matching_sticky_approval_keys = _read_method(sticky)  # type: ignore[method-assign]
    return True


def sdk_call_id(raw_item: Any) -> CallId:
    """The SDK's own `tool_invocation_call_id` (for checking the one installed)."""
    return invocation.tool_invocation_call_id(raw_item)  # its module's own is not replaced


def sdk_identity_and_scope(raw_item: Any, **arguments: Any) -> Identity:
    """The SDK's own answer, computed as it computes it (for checking the one installed)."""
    current = invocation.tool_invocation_identity_and_scope
    sdk: Callable[..., Identity] = getattr(current, _INSTALLED, current)
    return sdk(raw_item, **arguments)


def pending(state: RunState[Any, Any]) -> list[ToolApprovalItem]:
    """The calls `state` paused on, as `state.get_interruptions()` lists them; for the pinned
    SDK, the state's own items rather than the copies it returns (each call's model copied
    through pydantic, validated and dumped again, 0.1 ms a call).

    The bot reads these items (what a reviewer was shown) and gives them to `approve` or
    `reject`, which look for the state's own item matching the one given: for its own item,
    at once; for a copy, by copying both again and comparing their invocation identities, two
    more copies a call, twice. Both find the same item, or both raise where two pending calls
    share an identity; so both decide the same (a test compares the states they leave)."""
    if getattr(agents, "__version__", "") != SDK:
        return state.get_interruptions()
    step = state._current_step
    if not isinstance(step, NextStepInterruption):
        return []
    return list(step.interruptions)
