"""At-most-once tool execution: every function tool call goes through a journal.

Before a tool runs, the journal records that this attempt is executing the call; after, that it
was executed, with its output. A retried attempt skips executed calls (reusing their output)
and stops at a call an earlier attempt left executing: whether it had its effect is unknown, so
a person must decide (the run needs review). Tools can read `ctx.tool_call_id` as an
idempotency key to pass to the systems they call.

The engine defines the journal's interface; the store implements it over Redis.
"""

from __future__ import annotations

import contextvars
import functools
import json
from dataclasses import dataclass
from typing import Any, Protocol

from agents import Agent, FunctionTool


class CallNeedsReview(Exception):
    """A call was left executing by an attempt that stopped: it must not run again by itself."""

    def __init__(self, call_id: str, tool: str) -> None:
        super().__init__(f"call {call_id} of tool {tool} was left executing")
        self.call_id = call_id
        self.tool = tool


@dataclass(frozen=True)
class Begin:
    """What to do with a call: run it, skip it (with its recorded output), or stop for review."""

    action: str  # run | skip | review
    output: str = ""


class Journal(Protocol):
    async def begin(self, run_id: str, call_id: str, attempt: str, tool: str) -> Begin: ...

    async def end(self, run_id: str, call_id: str, attempt: str, output: str) -> None: ...


@dataclass(frozen=True)
class Execution:
    """The attempt currently executing a run in this task."""

    run_id: str
    attempt: str
    journal: Journal


CURRENT: contextvars.ContextVar[Execution | None] = contextvars.ContextVar(
    "approval_bot_execution", default=None
)


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):
        return str(value)


def journal_tools(agent: Agent[Any]) -> None:
    """Route every function tool of `agent` through the journal of the current execution.

    Agents used as tools are not journaled themselves: they are re-entered to resume nested
    runs, and the tools inside them are journaled one by one.
    """
    for tool in agent.tools:
        if getattr(tool, "_is_agent_tool", False):
            continue
        if isinstance(tool, FunctionTool) and not getattr(tool, "_approval_bot_journaled", False):
            tool.on_invoke_tool = _journaled(tool.on_invoke_tool, tool.name)
            tool._approval_bot_journaled = True  # type: ignore[attr-defined]


def _journaled(invoke: Any, tool_name: str) -> Any:
    @functools.wraps(invoke)
    async def journaled(ctx: Any, arguments: str) -> Any:
        execution = CURRENT.get()
        call_id = str(getattr(ctx, "tool_call_id", "") or "")
        if execution is None or not call_id:
            return await invoke(ctx, arguments)
        begin = await execution.journal.begin(
            execution.run_id, call_id, execution.attempt, tool_name
        )
        if begin.action == "skip":
            return begin.output
        if begin.action == "review":
            raise CallNeedsReview(call_id, tool_name)
        try:
            result = await invoke(ctx, arguments)
        except Exception as exc:
            # It ran and failed: record that, so a retry does not run it again.
            await execution.journal.end(
                execution.run_id,
                call_id,
                execution.attempt,
                f"(the tool raised {type(exc).__name__})",
            )
            raise
        await execution.journal.end(execution.run_id, call_id, execution.attempt, _as_text(result))
        return result

    return journaled
