"""Turn the SDK's `ToolApprovalItem`s into plain descriptions a reviewer can judge.

Each kind of approval the SDK raises is shown for what it is: function tools and agents used as
tools (JSON arguments), shell commands, patches (as a diff), local MCP tools and hosted MCP
approval requests (server label and tool). The text here is untrusted: the Slack layer escapes it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from agents import FunctionTool, ToolApprovalItem

from bot.engine.arguments import Reading, Unknown, read_json, receive
from bot.engine.questions import QUESTION_KIND, is_question, question_of


@dataclass(frozen=True)
class Field:
    """One argument of a function tool, as a reviewer reads it (`bot.engine.explain`)."""

    name: str
    value: str  # the value (a string as it is, anything else as JSON), cut with "…"
    chars: int  # the whole value's length in characters
    about: str = ""  # the parameter's description from the tool's schema


NO_ARGUMENTS = Unknown("this kind of call has no JSON arguments")

# What a patch's card header lists (`patch_steps`): at most this many operations, each path cut
# to STEP_PATH characters (the snapshot holds the whole call; Show all shows it).
STEPS_KEPT = 20
STEP_PATH = 200


@dataclass(frozen=True)
class PatchStep:
    """One operation of a patch as its editor applies it: the model's `type`, `path` and
    `move_to` (None: the file stays where it is). Untrusted text, bounded."""

    kind: str
    path: str
    move_to: str | None = None


@dataclass(frozen=True)
class PendingApproval:
    """One call waiting for a human, as the engine reports it."""

    index: int  # position in the SDK's interruption list, used to match the decision back
    call_id: str
    agent: str
    tool: str
    kind: str  # function | shell | apply_patch | mcp | hosted_mcp | question (ask_human)
    # What an Always decision on this call covers: this agent's calls of this tool (the SDK scopes
    # Always by agent too; the bot keeps and applies Always decisions itself).
    sticky: str
    arguments: str  # display text: pretty JSON, shell commands or a diff
    # What policy conditions may read besides JSON arguments (JSON: `command` of a shell call,
    # `path` and `operation` of a patch); empty for other kinds.
    facts: str = ""
    # What the tool will receive (`bot.engine.arguments`): the arguments as its parameter model
    # reads them, the JSON as sent, or why it cannot be known. Shell and patch calls: their
    # facts are what they receive (Unknown here, and no `args` to read).
    reading: Reading = NO_ARGUMENTS
    # Why and what (`bot.engine.explain`), bounded: empty when the model or the tool gave none.
    said: str = ""  # the assistant text of the model response that proposed the call
    thought: str = ""  # that response's reasoning summary
    description: str = ""  # the tool's description, one line
    details: tuple[tuple[str, str], ...] = ()  # per kind: (label, value), e.g. a shell's timeout
    fields: tuple[Field, ...] = ()  # a function tool's arguments, by name
    # A patch: what its editor will do, operation by operation (`patch_steps`): the card's
    # header names each one, so none hides in the diff. At most STEPS_KEPT of them, bounded.
    operations: tuple[PatchStep, ...] = ()
    operations_total: int = 0  # how many operations the patch has (kept or not)


def canonical_arguments(arguments: str) -> str:
    """JSON arguments with sorted keys and no spacing; anything else as it is."""
    try:
        return json.dumps(
            json.loads(arguments), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
    except (ValueError, TypeError):
        return arguments


def arguments_sha(arguments: str) -> str:
    """SHA-256 of the canonical arguments: what binds a decision to arguments too long to keep
    whole beside the snapshot (which holds them anyway)."""
    data = canonical_arguments(arguments).encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest()


def _get(value: Any, key: str) -> Any:
    if isinstance(value, dict):
        return value.get(key)
    return getattr(value, key, None)


def pretty_json(text: str | None) -> str:
    """Pretty-print JSON arguments; text that is not JSON is shown as it came."""
    if text is None or text == "":
        return "{}"
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False, sort_keys=False)
    except (ValueError, TypeError):
        return text


def _shell_text(raw: Any) -> str:
    action = _get(raw, "action")
    commands = _get(action, "commands") or _get(action, "command") or _get(raw, "commands")
    if isinstance(commands, list | tuple):
        return "\n".join(str(c) for c in commands)
    if commands:
        return str(commands)
    return pretty_json(json.dumps(_plain(raw), default=str))


def _shell_facts(raw: Any) -> str:
    action = _get(raw, "action")
    commands = _get(action, "commands") or _get(action, "command") or _get(raw, "commands")
    if isinstance(commands, list | tuple):
        return json.dumps({"command": "\n".join(str(c) for c in commands)})
    return json.dumps({"command": str(commands)}) if commands else ""


def _patch_operations(raw: Any) -> list[Any]:
    """The operations the SDK's editor applies for a patch call, as it reads them
    (`coerce_apply_patch_operations`, openai-agents 0.24): `operations` when it is a list (a
    custom tool call named apply_patch carries the model's own JSON), else `operation`."""
    many = _get(raw, "operations")
    if isinstance(many, list):
        return many
    one = _get(raw, "operation")
    return [] if one is None else [one]


def _patch_facts(raw: Any) -> str:
    """`path` and `operation` of a patch of one operation on one file. A patch of several
    operations, or one that moves its file (`move_to`), has no one path (nor, for several,
    one operation) a condition could read: those are unreadable, so a condition on them is
    undecidable and never approves (a person decides, seeing every operation)."""
    operations = _patch_operations(raw)
    if len(operations) != 1:
        why = f"the patch has {len(operations)} operations, a condition reads one"
        return json.dumps({"unreadable": {"path": why, "operation": why}})
    [operation] = operations
    facts = {"path": _get(operation, "path"), "operation": _get(operation, "type")}
    known = {k: str(v) for k, v in facts.items() if v}
    moved = _get(operation, "move_to")
    if moved is not None:
        known.pop("path", None)
        why = "the patch moves its file (move_to): it has two paths"
        return json.dumps({**known, "unreadable": {"path": why}})
    return json.dumps(known)


def _patch_text(raw: Any) -> str:
    parts = []
    for operation in _patch_operations(raw) or [None]:
        kind = _get(operation, "type") or "operation"
        path = _get(operation, "path") or "?"
        moved = _get(operation, "move_to")
        diff = _get(operation, "diff")
        header = f"{kind} {path}" + (f" (moved to {moved})" if moved is not None else "")
        parts.append(f"{header}\n{diff}" if diff else header)
    return "\n".join(parts)


def _cut(value: Any, limit: int) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def patch_steps(raw: Any) -> tuple[tuple[PatchStep, ...], int]:
    """What the editor will do, operation by operation, as the SDK reads the call
    (`_patch_operations`): the first STEPS_KEPT of them (bounded), and how many there are."""
    operations = _patch_operations(raw)
    steps = []
    for operation in operations[:STEPS_KEPT]:
        moved = _get(operation, "move_to")
        steps.append(
            PatchStep(
                kind=_cut(_get(operation, "type"), 40),
                path=_cut(_get(operation, "path"), STEP_PATH),
                move_to=None if moved is None else _cut(moved, STEP_PATH),
            )
        )
    return tuple(steps), len(operations)


def _plain(raw: Any) -> Any:
    if hasattr(raw, "model_dump"):
        return raw.model_dump(exclude_none=True)
    return raw


def describe(item: ToolApprovalItem, index: int, *, read: bool = True) -> PendingApproval:
    """Describe one interruption for storage and display. Not `read`: without what the tool
    will receive (`reading` left unknown), for a caller that needs only what the card showed
    (agent, tool, arguments): reading runs the tool's parameter model, about 0.2 ms."""
    raw = item.raw_item
    raw_type = _get(raw, "type")
    agent = item.agent.name if item.agent is not None else "?"
    call_id = str(item.call_id or f"call-{index}")
    tool = item.qualified_name or item.name or str(raw_type or "tool")
    origin = getattr(item, "tool_origin", None)
    origin_type = str(_get(origin, "type") or "")

    if raw_type == "mcp_approval_request" or (
        isinstance(raw, dict) and raw.get("type") == "hosted_tool_call"
    ):
        label = str(_get(raw, "server_label") or "?")
        name = str(_get(raw, "name") or tool)
        arguments = _get(raw, "arguments")
        return PendingApproval(
            index, call_id, agent, f"{label}/{name}", "hosted_mcp",
            f"{agent}:hosted_mcp:{label}:{name}", pretty_json(arguments),
            reading=read_json(arguments if isinstance(arguments, str) else None)
            if read else NO_ARGUMENTS,
        )  # fmt: skip
    if raw_type in ("shell_call", "local_shell_call"):
        return PendingApproval(
            index, call_id, agent, tool, "shell", f"{agent}:shell:{tool}", _shell_text(raw),
            _shell_facts(raw),
        )  # fmt: skip
    if raw_type == "apply_patch_call":
        sticky = f"{agent}:apply_patch:{tool}"
        steps, total = patch_steps(raw)
        return PendingApproval(
            index, call_id, agent, tool, "apply_patch", sticky, _patch_text(raw),
            _patch_facts(raw), operations=steps, operations_total=total,
        )  # fmt: skip
    if is_question(item):  # the bot's ask_human: shown as the question it asks
        sticky = f"{agent}:{item.tool_namespace or ''}:{tool}"
        question = question_of(item.arguments or "")
        return PendingApproval(
            index, call_id, agent, tool, QUESTION_KIND, sticky, question,
            reading=read_json(item.arguments) if read else NO_ARGUMENTS,
        )  # fmt: skip
    kind = "function"
    server = _get(origin, "mcp_server_name")
    if server or "mcp" in origin_type:
        kind = "mcp"
        tool = f"{server}/{tool}" if server else tool
    namespace = item.tool_namespace or ""
    text = pretty_json(item.arguments)
    sticky = f"{agent}:{namespace}:{tool}"
    if not read:
        return PendingApproval(index, call_id, agent, tool, kind, sticky, text)
    own = function_tool_of(item.agent, item.name or "") if kind == "function" else None
    return PendingApproval(
        index, call_id, agent, tool, kind, sticky, text, reading=receive(own, item.arguments)
    )


def function_tool_of(agent: Any, name: str) -> FunctionTool | None:
    """`agent`'s function tool called `name` (None: it has none, e.g. an MCP server's)."""
    for tool in getattr(agent, "tools", None) or ():
        if isinstance(tool, FunctionTool) and tool.name == name:
            return tool
    return None
