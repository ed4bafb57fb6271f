"""A paused run's conversation so far, read from its stored snapshot (the RunState JSON) without
restoring the agents: the task, then what the user, the assistant and the tools said, newest last.
And the whole display text of one call, which the card shows cut.

Plain, bounded, untrusted text: the Slack layer escapes it. Knows nothing of Slack or Redis.
"""

from __future__ import annotations

import json
from typing import Any

from bot.checkpoint import Checkpoint
from bot.conversation import Transcript, Turn
from bot.engine.approvals import _patch_text, _shell_text, pretty_json
from bot.engine.runner import TASK_REF, unpack_state

TURN_LIMIT = 1500  # characters of one turn's text
TURNS_MAX = 60  # the newest turns kept


def _cut(text: str, limit: int = TURN_LIMIT) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _state(checkpoint: Checkpoint) -> dict[str, Any]:
    data = json.loads(unpack_state(checkpoint.state))
    return data if isinstance(data, dict) else {}


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for part in content if isinstance(content, list) else []:
        if isinstance(part, dict):
            text = part.get("text") or part.get("refusal")
            if text:
                parts.append(str(text))
    return "\n".join(parts)


def _input_turns(items: Any) -> tuple[str, list[Turn]]:
    if isinstance(items, str):
        return _cut(items), [Turn("user", _cut(items))]
    turns: list[Turn] = []
    task = ""
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        role = item.get("role")
        text = _cut(_content_text(item.get("content")))
        if role == "user":
            task = task or text
            turns.append(Turn("user", text))
        elif role == "assistant" and text:
            turns.append(Turn("assistant", text))
    return task, turns


def _call_text(raw: dict[str, Any]) -> str:
    """The display text of a call: JSON arguments pretty-printed, commands, a patch."""
    kind = raw.get("type")
    if kind in ("shell_call", "local_shell_call"):
        return _shell_text(raw)
    if kind == "apply_patch_call":
        return _patch_text(raw)
    return pretty_json(raw.get("arguments"))


def _call_name(raw: dict[str, Any]) -> str:
    kind = str(raw.get("type") or "")
    if kind == "mcp_approval_request" or raw.get("server_label"):
        return f"{raw.get('server_label')}/{raw.get('name')}"
    if kind in ("shell_call", "local_shell_call"):
        return "shell"
    if kind == "apply_patch_call":
        return "apply_patch"
    return str(raw.get("name") or kind or "tool")


def _turn(item: dict[str, Any]) -> Turn | None:
    kind = item.get("type")
    raw = item.get("raw_item") if isinstance(item.get("raw_item"), dict) else {}
    assert isinstance(raw, dict)
    agent = str((item.get("agent") or {}).get("name") or "")
    call_id = str(raw.get("call_id") or raw.get("id") or "")
    if kind == "message_output_item":
        return Turn("assistant", _cut(_content_text(raw.get("content"))), agent)
    if kind == "reasoning_item":
        summary = "\n".join(
            str(s.get("text")) for s in raw.get("summary") or [] if isinstance(s, dict)
        )
        return Turn("reasoning", _cut(summary), agent) if summary.strip() else None
    if kind == "tool_call_item":
        tool = str(item.get("tool_name") or _call_name(raw))
        return Turn("call", _cut(_call_text(raw)), agent, call_id, tool)
    if kind in ("tool_call_output_item", "mcp_approval_response_item"):
        output = raw.get("output", item.get("output", ""))
        text = output if isinstance(output, str) else json.dumps(output, default=str)
        return Turn("result", _cut(text), agent, call_id)
    if kind == "handoff_output_item":
        source = str((item.get("source_agent") or {}).get("name") or agent)
        target = str((item.get("target_agent") or {}).get("name") or "")
        return Turn("handoff", f"{source} handed off to {target}", agent)
    if kind == "mcp_approval_request_item":
        return Turn("call", _cut(_call_text(raw)), agent, call_id, _call_name(raw))
    return None


def transcript(checkpoint: Checkpoint, upto_call_id: str, task: str = "") -> Transcript:
    """The conversation of the stored run up to (and with) the call `upto_call_id`; `task` is
    the run's, for a snapshot that refers to it instead of holding it (layout 3)."""
    state = _state(checkpoint)
    given = state.get("original_input")
    task, turns = _input_turns(task if given == TASK_REF else given)
    for item in state.get("generated_items") or []:
        if not isinstance(item, dict):
            continue
        turn = _turn(item)
        if turn is None:
            continue
        turns.append(turn)
        if turn.kind == "call" and upto_call_id and turn.call_id == upto_call_id:
            break
    dropped = max(0, len(turns) - TURNS_MAX)
    return Transcript(task, turns[dropped:], dropped)


def whole_call_text(checkpoint: Checkpoint, call_id: str) -> str | None:
    """The whole display text of the call `call_id` (as the card shows it, uncut), or None when
    the stored run does not hold it."""
    state = _state(checkpoint)
    step = state.get("current_step")
    data = step.get("data") if isinstance(step, dict) else None
    pending = (data.get("interruptions") or []) if isinstance(data, dict) else []
    for item in [*pending, *reversed(state.get("generated_items") or [])]:
        raw = item.get("raw_item") if isinstance(item, dict) else None
        if isinstance(raw, dict) and call_id in (raw.get("call_id"), raw.get("id")):
            if raw.get("type") in ("function_call_output", "mcp_approval_response"):
                continue
            return _call_text(raw)
    return None
