"""What a reviewer needs beside the call itself, found when the run pauses: the agent's own words
in the model response that proposed the call (its message text, and its reasoning summary when
the model gave one), the tool's description and its parameters' descriptions, and what each kind
of call runs with (a shell's working directory and timeout, a hosted MCP server's label and URL).

Everything here is untrusted text, bounded here (it is stored beside the call); the Slack layer
escapes it. It knows nothing of Slack.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence
from typing import Any

from agents import (
    Agent,
    FunctionTool,
    HostedMCPTool,
    RunResult,
    RunResultStreaming,
    ToolApprovalItem,
    ToolCallItem,
)

from bot.engine.approvals import Field, PendingApproval

log = logging.getLogger(__name__)

# Bounds of what is stored beside a call (the snapshot holds the rest).
SAID_LIMIT = 1000
THOUGHT_LIMIT = 500
DESCRIPTION_LIMIT = 300
PARAM_LIMIT = 150
VALUE_LIMIT = 160
FIELDS_MAX = 12


def bounded(text: str, limit: int) -> str:
    """`text` of at most `limit` characters, cut with a visible "…"."""
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def one_line(text: str, limit: int) -> str:
    return bounded(" ".join(text.split()), limit)


def _get(value: Any, key: str) -> Any:
    if isinstance(value, dict):
        return value.get(key)
    return getattr(value, key, None)


def _ids(item: Any) -> set[str]:
    return {str(v) for v in (_get(item, "call_id"), _get(item, "id")) if v}


def agent_words(responses: Sequence[Any], call_id: str) -> tuple[str, str]:
    """(what the agent said, its reasoning summary) in the model response that proposed the
    call `call_id`: the latest response whose output holds it. Empty when it said nothing."""
    for response in reversed(responses):
        output = list(_get(response, "output") or [])
        if not any(call_id in _ids(item) for item in output):
            continue
        said: list[str] = []
        thought: list[str] = []
        for item in output:
            kind = _get(item, "type")
            if kind == "message":
                for part in _get(item, "content") or []:
                    text = _get(part, "text") or _get(part, "refusal")
                    if text:
                        said.append(str(text))
            elif kind == "reasoning":
                for part in _get(item, "summary") or []:
                    if _get(part, "text"):
                        thought.append(str(_get(part, "text")))
        return bounded("\n\n".join(said), SAID_LIMIT), bounded("\n\n".join(thought), THOUGHT_LIMIT)
    return "", ""


def _hosted_description(responses: Sequence[Any], label: str, name: str) -> str:
    """A hosted MCP tool's description, from the server's tool list in the model's output."""
    for response in reversed(responses):
        for item in _get(response, "output") or []:
            if _get(item, "type") != "mcp_list_tools" or _get(item, "server_label") != label:
                continue
            for tool in _get(item, "tools") or []:
                if _get(tool, "name") == name and _get(tool, "description"):
                    return str(_get(tool, "description"))
    return ""


def fields_of(arguments: str | None, schema: dict[str, Any] | None) -> tuple[Field, ...]:
    """A function tool's JSON arguments as named fields (long values cut), each with its
    parameter's description; empty when the arguments are not a JSON object."""
    try:
        data = json.loads(arguments or "{}")
    except (TypeError, ValueError):
        return ()
    if not isinstance(data, dict):
        return ()
    properties = (schema or {}).get("properties") or {}
    found = []
    for name, value in list(data.items())[:FIELDS_MAX]:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        about = _get(properties.get(name) or {}, "description") or ""
        found.append(
            Field(
                name=str(name)[:60],
                value=text if len(text) <= VALUE_LIMIT else text[: VALUE_LIMIT - 1] + "…",
                chars=len(text),
                about=one_line(str(about), PARAM_LIMIT),
            )
        )
    return tuple(found)


def _function_tool(tools: Sequence[Any], name: str) -> FunctionTool | None:
    for tool in tools:
        if isinstance(tool, FunctionTool) and tool.name == name:
            return tool
    return None


async def _tools_of(agent: Agent[Any], result: RunResult | RunResultStreaming) -> list[Any]:
    """The agent's tools, its MCP servers' too (listed through the SDK, as a run lists them)."""
    if not agent.mcp_servers:
        return list(agent.tools)
    try:
        return list(await agent.get_all_tools(result.context_wrapper))
    except Exception:  # an MCP server that cannot list its tools now: no descriptions
        log.warning("could not list the tools of agent %s", agent.name, exc_info=True)
        return list(agent.tools)


def _ms(value: Any) -> str:
    try:
        seconds = int(value) / 1000
    except (TypeError, ValueError):
        return ""
    return f"{seconds:g} s"


def nested_responses(state: Any) -> list[Any]:
    """The model responses of the nested runs (agents used as tools) that a serialized
    RunState holds: an approval inside one surfaces on the outer run, but the response that
    proposed it is only in the nested run's state."""
    found: list[Any] = []
    if isinstance(state, dict):
        for key, value in state.items():
            if key == "model_responses" and isinstance(value, list):
                found.extend(value)
            else:
                found.extend(nested_responses(value))
    elif isinstance(state, list):
        for value in state:
            found.extend(nested_responses(value))
    return found


async def explain(
    result: RunResult | RunResultStreaming,
    items: Sequence[ToolApprovalItem],
    approvals: list[PendingApproval],
    state: Any = None,
) -> list[PendingApproval]:
    """`approvals` (described from `items`, in order) with the agent's words, the tool's
    description and per-kind details added; `state`: the run's serialized RunState (its nested
    runs' responses are searched too). Never raises: what cannot be found stays empty."""
    responses = [*nested_responses(state), *result.raw_responses]
    descriptions = {
        str(_get(i.raw_item, "call_id") or _get(i.raw_item, "id")): i.description or ""
        for i in result.new_items
        if isinstance(i, ToolCallItem)
    }
    tools: dict[int, list[Any]] = {}
    out = []
    for item, approval in zip(items, approvals, strict=True):
        try:
            out.append(await _explained(result, responses, descriptions, tools, item, approval))
        except Exception:
            log.warning("could not explain call %s", approval.call_id, exc_info=True)
            out.append(approval)
    return out


async def _explained(
    result: RunResult | RunResultStreaming,
    responses: list[Any],
    descriptions: dict[str, str],
    tools: dict[int, list[Any]],
    item: ToolApprovalItem,
    approval: PendingApproval,
) -> PendingApproval:
    said, thought = agent_words(responses, approval.call_id)
    description = descriptions.get(approval.call_id, "")
    raw = item.raw_item
    details: list[tuple[str, str]] = []
    fields: tuple[Field, ...] = ()
    agent = item.agent
    if approval.kind == "hosted_mcp":
        label, name = approval.tool.split("/", 1) if "/" in approval.tool else ("", approval.tool)
        url = ""
        for hosted in agent.tools if agent is not None else []:
            if (
                isinstance(hosted, HostedMCPTool)
                and hosted.tool_config.get("server_label") == label
            ):
                config: Any = hosted.tool_config
                url = str(config.get("server_url") or config.get("connector_id") or "")
        details = [("Server", label), ("URL", url or "not given")]
        description = description or _hosted_description(responses, label, name)
    elif approval.kind == "shell":
        action = _get(raw, "action")
        directory = _get(action, "working_directory") or _get(raw, "working_directory")
        timeout = _ms(_get(action, "timeout_ms"))
        details = [
            ("Working directory", str(directory) if directory else "not given (the tool's own)"),
            ("Timeout", timeout or "none given"),
        ]
    elif approval.kind in ("function", "mcp") and agent is not None:
        key = id(agent)
        if key not in tools:
            tools[key] = await _tools_of(agent, result)
        tool = _function_tool(tools[key], str(item.name or ""))
        if tool is not None:
            description = description or tool.description or ""
        schema = tool.params_json_schema if tool is not None else None
        fields = fields_of(item.arguments, schema)
    return dataclasses.replace(
        approval,
        said=said,
        thought=thought,
        description=one_line(description, DESCRIPTION_LIMIT),
        details=tuple((label, one_line(value, 300)) for label, value in details),
        fields=fields,
    )
