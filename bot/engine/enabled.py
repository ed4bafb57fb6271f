"""The SDK's checks of which tools and handoffs are enabled, answered without tasks where a
plain boolean answers them (#32).

openai-agents 0.24 asks, for every tool of an agent (`Agent.get_all_tools`, and its function
tools alone in `resolve_enabled_function_tools`) and every handoff (`get_handoffs`), whether it
is enabled, each by a coroutine run in a task of its own: `gather_with_cancel` wraps each in a
task, gathers them and waits for the gathering, always through the event loop, even for none.
A resume of the minimal run does this ten times (four of them for no handoff at all), each
nearly always for tools whose `is_enabled` is the default `True`: some 40 of the resume's 140
event-loop callbacks, each with its loop iteration, for answers known at once.

Each of those checks is a coroutine of a function nested in the SDK's (`_check_tool_enabled`,
`check_handoff_enabled`) that reads one object's `is_enabled` and, when it is a boolean, returns
it without awaiting anything (the agent's check first returns True for a tool that is not a
function tool). `install` replaces `gather_with_cancel` in the three modules that call it for
those checks, for the SDK version the bot pins, with one that, when every awaitable it is given
is such a check not yet started whose answer that first reading gives, closes them unstarted
and returns the answers in order, as the SDK's would; given anything else (a callable
`is_enabled`, any other awaitable: hooks, tools) it is the SDK's own, unchanged. Nothing else
of the SDK changes.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Awaitable, Callable
from typing import Any

import agents.agent as agent_module
import agents.run_internal.tool_execution as tool_execution
import agents.run_internal.turn_preparation as turn_preparation
from agents import FunctionTool

from bot.engine.identities import pinned, replace

_INSTALLED = "_approval_bot_settled"
# The modules whose enabled checks are gathered (each calls the function by its own name).
_CALLERS = (agent_module, tool_execution, turn_preparation)
_UNKNOWN = object()
Gather = Callable[..., Awaitable[tuple[Any, ...]]]


def _nested(function: Any, name: str) -> types.CodeType:
    """The code of the function `name` defined inside `function`."""
    for const in function.__code__.co_consts:
        if isinstance(const, types.CodeType) and const.co_name == name:
            return const
    raise LookupError(f"{function.__qualname__} defines no {name}")


def _checks() -> dict[types.CodeType, tuple[str, bool]]:
    """Each enabled check's code: (its one argument's name, whether an object that is not a
    function tool is enabled without a look at its `is_enabled`)."""
    return {
        _nested(agent_module.AgentBase.get_all_tools, "_check_tool_enabled"): ("tool", True),
        _nested(tool_execution.resolve_enabled_function_tools, "_check_tool_enabled"): (
            "tool",
            False,
        ),
        _nested(turn_preparation.get_handoffs, "check_handoff_enabled"): ("handoff_obj", False),
    }


def _answer(awaitable: Any, checks: dict[types.CodeType, tuple[str, bool]]) -> Any:
    """What `awaitable`, an enabled check not yet started, returns without awaiting anything;
    `_UNKNOWN` for anything else."""
    if type(awaitable) is not types.CoroutineType:
        return _UNKNOWN
    check = checks.get(awaitable.cr_code)
    if check is None or inspect.getcoroutinestate(awaitable) != inspect.CORO_CREATED:
        return _UNKNOWN
    name, other_enabled = check
    frame = awaitable.cr_frame
    subject: Any = frame.f_locals.get(name, _UNKNOWN) if frame is not None else _UNKNOWN
    if subject is _UNKNOWN:
        return _UNKNOWN
    if other_enabled and not isinstance(subject, FunctionTool):
        return True
    enabled = subject.is_enabled
    return enabled if isinstance(enabled, bool) else _UNKNOWN


def _settled(sdk: Gather) -> Gather:
    checks = _checks()

    async def gather_with_cancel(
        *awaitables: Awaitable[Any],
        on_child_failure: Callable[[BaseException], None] | None = None,
    ) -> tuple[Any, ...]:
        answers = tuple(_answer(awaitable, checks) for awaitable in awaitables)
        if any(answer is _UNKNOWN for answer in answers):
            return await sdk(*awaitables, on_child_failure=on_child_failure)
        for awaitable in awaitables:
            awaitable.close()  # type: ignore[attr-defined]  # (never started: nothing ran)
        return answers

    setattr(gather_with_cancel, _INSTALLED, sdk)
    return gather_with_cancel


def _current() -> Gather:
    """The function the modules call now."""
    current: Gather = vars(tool_execution)["gather_with_cancel"]
    return current


def install() -> bool:
    """Replace the function where the three modules call it (once; True when it is in place)."""
    if not pinned("enabled checks"):
        return False
    replace("gather_with_cancel", _current(), _settled, _CALLERS, _INSTALLED)
    return True


def sdk_gather() -> Gather:
    """The SDK's own `gather_with_cancel` (for checking the one installed)."""
    current = _current()
    sdk: Gather = getattr(current, _INSTALLED, current)
    return sdk
