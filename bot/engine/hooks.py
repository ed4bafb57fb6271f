"""The SDK's lifecycle hooks awaited in the run's own task where at most one of a pair does
anything (#32).

openai-agents 0.24 calls each lifecycle hook (an agent's start and end, a model call's start and
end, a tool's start and end, a handoff) as a pair, the run's hooks' method and the agent's,
gathered by `gather_with_cancel`: each in a task of its own, then the gathering and a wait for
it, always through the event loop, even when the agent has no hooks (`noop_coroutine()` in
their place) and the run's method is the base class's empty one. A resume of the minimal run
does this six times: some 30 event-loop callbacks of its 110, for work that is at most one
short coroutine of the bot's own.

`install` replaces `gather_with_cancel` in the four modules that gather hooks, for the SDK
version the bot pins, with one that, when it is given no `on_child_failure` and every awaitable
is a coroutine not yet started either of a function that does nothing (`noop_coroutine`, a
hook method of the SDK's base classes whose code only returns None: `_does_nothing`) or of a
method of the bot's own run hooks (`install(ours)`), at most one of them the bot's: closes the
others unstarted (they would do nothing), awaits the bot's in the run's own task, and returns
the answers in order (None for each that does nothing), as the SDK's would; a failure of the
bot's is raised, as the SDK's gathering raises it. Given anything else (an agent's own hooks, a
user's run hooks, any other awaitable) it is the function it replaced, unchanged. The bot's
hook methods may run in the run's task rather than one of their own: they set no context
variable (what a task's own copy of the context would keep apart). Nothing else of the SDK
changes.
"""

from __future__ import annotations

import dis
import inspect
import types
from collections.abc import Awaitable, Callable
from typing import Any

import agents.run_internal.run_loop as run_loop
import agents.run_internal.tool_actions as tool_actions
import agents.run_internal.tool_execution as tool_execution
import agents.run_internal.turn_resolution as turn_resolution
from agents.lifecycle import AgentHooksBase, RunHooksBase
from agents.util import _coro

from bot.engine.identities import pinned

_INSTALLED = "_approval_bot_hooks"
# The modules that gather hook pairs (each calls the function by its own name).
_CALLERS = (run_loop, tool_actions, tool_execution, turn_resolution)
Gather = Callable[..., Awaitable[tuple[Any, ...]]]
# What the code of a function that does nothing but return None may hold.
_NOTHING = frozenset({"RETURN_GENERATOR", "POP_TOP", "RESUME", "NOP", "RETURN_VALUE",
                      "RETURN_CONST", "LOAD_CONST"})  # fmt: skip


def _does_nothing(code: types.CodeType) -> bool:
    """Whether `code` only returns None (its docstring aside): an `async def` whose body is
    `pass` or a docstring."""
    for instruction in dis.get_instructions(code):
        if instruction.opname not in _NOTHING:
            return False
        if instruction.opname in ("LOAD_CONST", "RETURN_CONST") and instruction.argval is not None:
            return False
    return True


def _empty() -> frozenset[types.CodeType]:
    """The codes of the coroutine functions the SDK pairs a hook with that do nothing."""
    codes = {_coro.noop_coroutine.__code__}
    for base in (RunHooksBase, AgentHooksBase):
        for name, member in vars(base).items():
            if name.startswith("on_") and inspect.iscoroutinefunction(member):
                codes.add(member.__code__)
    return frozenset(code for code in codes if _does_nothing(code))


def _inline(sdk: Gather, ours: frozenset[types.CodeType]) -> Gather:
    empty = _empty()

    async def gather_with_cancel(
        *awaitables: Awaitable[Any],
        on_child_failure: Callable[[BaseException], None] | None = None,
    ) -> tuple[Any, ...]:
        mine = -1
        for i, awaitable in enumerate(awaitables):
            if (
                type(awaitable) is not types.CoroutineType
                or inspect.getcoroutinestate(awaitable) != inspect.CORO_CREATED
            ):
                return await sdk(*awaitables, on_child_failure=on_child_failure)
            code = awaitable.cr_code
            if code in empty:
                continue
            if code not in ours or mine >= 0 or on_child_failure is not None:
                return await sdk(*awaitables, on_child_failure=on_child_failure)
            mine = i
        answers: list[Any] = [None] * len(awaitables)
        for i, awaitable in enumerate(awaitables):
            if i != mine:
                awaitable.close()  # type: ignore[attr-defined]  # (never started: nothing ran)
        if mine >= 0:
            answers[mine] = await awaitables[mine]
        return tuple(answers)

    for name, value in vars(sdk).items():  # what replaced it before (`bot.engine.enabled`)
        if name.startswith("_approval_bot_"):  # stays installed, as its install sees
            setattr(gather_with_cancel, name, value)
    setattr(gather_with_cancel, _INSTALLED, sdk)
    return gather_with_cancel


def install(ours: type) -> bool:
    """Replace the function where the four modules call it (once; True when it is in place),
    with `ours`' hook methods (a class of the bot's run hooks) awaited in the run's task.
    Another SDK version keeps its own."""
    if not pinned("hook pairs"):
        return False
    codes = frozenset(
        member.__code__
        for name, member in vars(ours).items()
        if name.startswith("on_") and inspect.iscoroutinefunction(member)
    )
    for module in _CALLERS:
        current = vars(module)["gather_with_cancel"]
        if getattr(current, _INSTALLED, None) is None:
            module.gather_with_cancel = _inline(current, codes)  # type: ignore[attr-defined]
    return True


def replaced(module: Any) -> Gather:
    """The function `module` called before `install` (for checking the one installed)."""
    current = vars(module)["gather_with_cancel"]
    sdk: Gather = getattr(current, _INSTALLED, current)
    return sdk
