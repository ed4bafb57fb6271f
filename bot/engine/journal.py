"""At-most-once tool execution: every function tool call goes through a journal.

Before a tool runs (a function tool, a shell command, a patch operation or an MCP call), the
journal records that this attempt is executing the call; after, that it
was executed, with its output. A retried attempt skips executed calls (reusing their output)
and stops at a call an earlier attempt left executing: whether it had its effect is unknown, so
a person must decide (the run needs review). Tools can read `ctx.tool_call_id` as an
idempotency key to pass to the systems they call.

The engine defines the journal's interface; the store implements it over Redis.
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import inspect
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agents import Agent, ApplyPatchTool, FunctionTool, LocalShellTool, ShellTool
from mcp.types import CallToolResult, TextContent

from bot.errors import ApprovalBotError


class CallNeedsReview(ApprovalBotError):
    """A call was left executing by an attempt that stopped: it must not run again by itself."""

    def __init__(self, call_id: str, tool: str) -> None:
        super().__init__(f"call {call_id} of tool {tool} was left executing")
        self.call_id = call_id
        self.tool = tool


class JournalUnavailable(ApprovalBotError):
    """The journal could not be read or written (its store unreachable, or a write it could not
    confirm): this attempt stops without a verdict on the run, and the job is retried once its
    lease lapses; the journal entries already written make that retry safe."""


@dataclass(frozen=True)
class Begin:
    """What to do with a call: run it, skip it (with its recorded output), or stop for review."""

    action: str  # run | skip | review
    output: str = ""


# A write sent along with a journal write, given the pipeline it goes in (`Execution.riders`).
Rider = Callable[[Any], None]


@dataclass(frozen=True)
class DecisionEntry:
    """A rider that carries a decision's audit entries (a call decided inside its run: #32).

    Every decision has its audit entry, so such a rider is not best effort as the others
    are: an approval whose entry could not be written does not let its tool run (the journal
    write it rides with fails, as an unconfirmed journal write does: `JournalUnavailable`);
    a rejection's entry that cannot be written before the next model call stops the run
    (`DecisionNotAudited`). `written` is called once the entries are stored (their metric)."""

    write: Rider  # the entries, built beforehand: only queued here
    approve: bool
    what: str  # the decision and its call, for the bot's own messages
    written: Callable[[], None] = lambda: None

    def __call__(self, pipe: Any) -> None:
        self.write(pipe)


class DecisionNotAudited(ApprovalBotError):
    """A decision made inside the run (an automatic rejection) whose audit entry could not be
    written, even once more: the run stops rather than go on with a decision nobody can see."""


class Journal(Protocol):
    async def begin(
        self, run_id: str, call_id: str, attempt: str, tool: str, riders: Sequence[Rider] = ()
    ) -> Begin:
        """Whether to run the call; `riders` are sent first, in the same round trip."""
        ...

    async def end(self, run_id: str, call_id: str, attempt: str, output: str) -> bool:
        """Record the output; True when `attempt` still owns the run."""
        ...


@dataclass
class Execution:
    """The attempt currently executing a run in this task."""

    run_id: str
    attempt: str
    journal: Journal
    seen: dict[str, int] = field(default_factory=dict)  # calls without an id, counted
    owned: bool = False
    """The store confirmed, since the last model call, that this attempt still owns the run
    (its take, or a journal write): the check before the next model call need not ask again
    (`confirmed`)."""
    riders: list[Rider] = field(default_factory=list)
    """Writes the attempt must have stored before any of its tools runs (a resume's audit
    entry): sent with the next call's journal write rather than in a round trip of their own;
    whoever runs the attempt sends what is left before its first model call (`take_riders`)."""

    def take_riders(self) -> list[Rider]:
        """The riders not sent yet (and forget them: the caller sends them)."""
        riders, self.riders = self.riders, []
        return riders

    def confirmed(self) -> bool:
        """Whether ownership was confirmed since the last time this was asked (and forget it:
        each model call needs a confirmation of its own)."""
        owned, self.owned = self.owned, False
        return owned


CURRENT: contextvars.ContextVar[Execution | None] = contextvars.ContextVar(
    "approval_bot_execution", default=None
)


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    output = getattr(value, "output", None)  # ApplyPatchResult and similar
    if isinstance(output, str):
        return output
    content = getattr(value, "content", None)  # MCP CallToolResult
    if isinstance(content, list):
        return "\n".join(str(getattr(part, "text", part)) for part in content)
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):
        return str(value)


def _content_key(kind: str, *parts: str) -> str:
    """A key for calls that carry no call id (patches, MCP): what they do, counted per attempt,
    so that a retry replaying the same calls in the same order meets the same keys."""
    digest = hashlib.sha256("\x00".join(parts).encode("utf-8", "replace")).hexdigest()[:16]
    execution = CURRENT.get()
    if execution is None:
        return f"{kind}:{digest}"
    count = execution.seen.get(digest, 0) + 1
    execution.seen[digest] = count
    # Scoped to the execution (not the attempt): a retry meets the same keys, a later
    # execution of the same run (another pause) does not meet this one's.
    scope = execution.attempt.partition("/")[0]
    return f"{kind}:{scope}:{digest}:{count}"


async def _through_journal(
    key: str,
    tool_name: str,
    run: Callable[[], Awaitable[Any]],
    skipped: Callable[[str], Any] = lambda text: text,
) -> Any:
    """Run one call at most once per execution (see the module's docstring)."""
    execution = CURRENT.get()
    if execution is None or not key:
        return await run()
    try:
        begin = await execution.journal.begin(
            execution.run_id, key, execution.attempt, tool_name, execution.take_riders()
        )
    except Exception as exc:
        raise JournalUnavailable(f"could not journal call {key} before it ran") from exc
    if begin.action == "review":
        raise CallNeedsReview(key, tool_name)
    execution.owned = True  # begin_call.lua checked it
    if begin.action == "skip":
        return skipped(begin.output)
    try:
        result = await run()
    except Exception as exc:
        # It ran and failed: record that, so a retry does not run it again.
        await _end(execution, key, f"(the tool raised {type(exc).__name__})")
        raise
    await _end(execution, key, _as_text(result))
    return result


async def _end(execution: Execution, key: str, output: str) -> None:
    try:
        execution.owned = await execution.journal.end(
            execution.run_id, key, execution.attempt, output
        )
    except Exception as exc:  # the retry finds the call left executing: a person decides
        raise JournalUnavailable(f"could not journal call {key} after it ran") from exc


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def journal_tools(agent: Agent[Any]) -> None:
    """Route the tools of `agent` through the journal of the current execution: function tools
    and shell tools by call id; patch editors and MCP servers by what each call does.

    Agents used as tools are not journaled themselves: they are re-entered to resume nested
    runs, and the tools inside them are journaled one by one.
    """
    for tool in agent.tools:
        if getattr(tool, "_is_agent_tool", False) or getattr(
            tool, "_approval_bot_journaled", False
        ):
            continue
        if isinstance(tool, FunctionTool):
            tool.on_invoke_tool = _journaled_function(tool.on_invoke_tool, tool.name)
        elif isinstance(tool, ShellTool | LocalShellTool):
            tool.executor = _journaled_shell(tool.executor, tool.name)  # type: ignore[assignment]
        elif isinstance(tool, ApplyPatchTool):
            tool.editor = _JournaledEditor(tool.editor, tool.name)
        else:
            continue
        tool._approval_bot_journaled = True  # type: ignore[union-attr]
    for server in agent.mcp_servers:
        if not getattr(server, "_approval_bot_journaled", False):
            _journal_mcp_server(server)


def _journaled_function(invoke: Any, tool_name: str) -> Any:
    @functools.wraps(invoke)
    async def journaled(ctx: Any, arguments: str) -> Any:
        call_id = str(getattr(ctx, "tool_call_id", "") or "")
        return await _through_journal(call_id, tool_name, lambda: invoke(ctx, arguments))

    return journaled


def _journaled_shell(executor: Any, tool_name: str) -> Any:
    @functools.wraps(executor)
    async def journaled(request: Any) -> Any:
        data = getattr(request, "data", None)
        call_id = str(getattr(data, "call_id", "") or "")
        return await _through_journal(call_id, tool_name, lambda: _maybe_await(executor(request)))

    return journaled


class _JournaledEditor:
    """An ApplyPatchEditor whose operations each run at most once per execution."""

    def __init__(self, editor: Any, tool_name: str) -> None:
        self._editor = editor
        self._tool_name = tool_name

    async def _apply(self, kind: str, operation: Any) -> Any:
        key = _content_key(
            "patch", kind, str(operation.path), str(operation.diff or ""), str(operation.move_to)
        )
        method = getattr(self._editor, kind)
        return await _through_journal(key, self._tool_name, lambda: _maybe_await(method(operation)))

    async def create_file(self, operation: Any) -> Any:
        return await self._apply("create_file", operation)

    async def update_file(self, operation: Any) -> Any:
        return await self._apply("update_file", operation)

    async def delete_file(self, operation: Any) -> Any:
        return await self._apply("delete_file", operation)


def _journal_mcp_server(server: Any) -> None:
    call_tool = server.call_tool

    @functools.wraps(call_tool)
    async def journaled(tool_name: str, arguments: Any, *args: Any, **kwargs: Any) -> Any:
        name = f"{server.name}/{tool_name}"
        key = _content_key("mcp", name, json.dumps(arguments, sort_keys=True, default=str))

        def skipped(text: str) -> Any:
            return CallToolResult(content=[TextContent(type="text", text=text)])

        return await _through_journal(
            key, name, lambda: call_tool(tool_name, arguments, *args, **kwargs), skipped
        )

    server.call_tool = journaled
    server._approval_bot_journaled = True
