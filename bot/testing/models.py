"""Run your agents without a model service: put one model on every agent, nested ones too, and
an offline demo model that calls an agent's tools with plausible arguments.

    from bot.testing.models import DemoModel, use_model

    use_model(agents, DemoModel())          # every agent reachable from `agents`
    use_model(agents, lambda agent: ScriptedModel([...]))   # or one model per agent

`agents` has any shape the bot serves (`APPROVAL_BOT_AGENTS`): an `Agent`, a `dict[str, Agent]`,
a list of agents, or a zero-argument callable returning one of those. `use_model` follows
handoffs and agents used as tools (`Agent.as_tool`), so approvals inside nested runs surface
exactly as they would with a real model.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from typing import Any

from agents import Agent, FunctionTool, Model, ModelResponse, Tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from openai.types.responses import ResponseTextDeltaEvent

from bot.engine.questions import is_question_tool
from bot.engine.registry import walk
from bot.service.edits import edited_call_in

Agents = Agent[Any] | Mapping[str, Agent[Any]] | Iterable[Agent[Any]]


def roots(agents: Agents | Callable[[], Agents]) -> list[Agent[Any]]:
    """The agents named by `agents`, in any shape the bot serves (an `Agent`, a
    `dict[str, Agent]`, a list, or a zero-argument callable returning one of those)."""
    if callable(agents) and not isinstance(agents, Agent):
        agents = agents()
    if isinstance(agents, Agent):
        return [agents]
    found = list(agents.values()) if isinstance(agents, Mapping) else list(agents)
    wrong = [item for item in found if not isinstance(item, Agent)]
    if wrong:
        raise TypeError(
            "expected an Agent, a dict[str, Agent], a list of agents or a callable returning "
            f"one of those; found {type(wrong[0]).__name__} {wrong[0]!r} among them"
        )
    return found


def reachable_agents(agents: Agents | Callable[[], Agents]) -> Iterator[Agent[Any]]:
    """Every agent reachable from `agents` (any shape `roots` takes): themselves, their
    handoffs and the agents behind their agent tools, each once (the engine's own walk, which
    its fingerprints use too)."""
    seen: set[int] = set()
    for root in roots(agents):
        for agent in walk(root):
            if id(agent) not in seen:
                seen.add(id(agent))
                yield agent


def use_model(
    agents: Agents | Callable[[], Agents],
    model: Model | Callable[[Agent[Any]], Model],
) -> list[Agent[Any]]:
    """Set `model` (or `model(agent)`, one per agent) on every agent reachable from `agents`
    (an `Agent`, a `dict[str, Agent]`, a list, or a callable returning one), in place; returns
    them. A callable `agents` is called once: pass its result to the harness too."""
    found = list(reachable_agents(agents))
    for agent in found:
        agent.model = model(agent) if callable(model) and not isinstance(model, Model) else model
    return found


def _sample(schema: dict[str, Any], text: str) -> Any:
    kind = schema.get("type")
    if schema.get("enum"):
        return schema["enum"][0]
    if kind == "integer":
        return 10
    if kind == "number":
        return 1.5
    if kind == "boolean":
        return True
    if kind == "array":
        return [_sample(schema.get("items") or {"type": "string"}, text)]
    if kind == "object":
        return _arguments(schema, text)
    return text


def _arguments(schema: dict[str, Any], text: str) -> dict[str, Any]:
    properties = schema.get("properties") or {}
    required = schema.get("required") or list(properties)
    return {name: _sample(properties.get(name) or {}, text) for name in required}


def _demo_arguments(tool: FunctionTool, task: str) -> dict[str, Any]:
    """The arguments of a demo call: from the tool's schema; `ask_human` asks a question."""
    if is_question_tool(tool):
        return {"question": f"Before I act on “{task}”: is there anything I should know?"}
    return _arguments(tool.params_json_schema, task)


def _gated(tool: Tool) -> bool:
    return isinstance(tool, FunctionTool) and tool.needs_approval is not False


def _task_text(items: list[Any]) -> str:
    for item in items:
        data = item if isinstance(item, dict) else getattr(item, "model_dump", dict)()
        if data.get("role") == "user":
            content = data.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return " ".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return ""


def _latest_turn(items: list[Any]) -> list[Any]:
    """The items from the latest user message on (the turn being answered)."""
    for index in range(len(items) - 1, -1, -1):
        item = items[index]
        data = item if isinstance(item, dict) else getattr(item, "model_dump", dict)()
        if data.get("role") == "user":
            return items[index:]
    return items


def _edited_call(items: list[Any]) -> tuple[str, dict[str, Any]] | None:
    """The call a reviewer's edit asks for (`bot.service.edits.edit_message`), when the latest
    tool outputs hold one and it was not proposed since."""
    asked = None
    for item in items:
        data = item if isinstance(item, dict) else getattr(item, "model_dump", dict)()
        if data.get("type") == "function_call_output":
            asked = edited_call_in(str(data.get("output", ""))) or asked
        elif data.get("type") == "function_call" and asked is not None:
            asked = None  # proposed again already
    return asked


def _outputs(items: list[Any]) -> list[str]:
    found = []
    for item in items:
        data = item if isinstance(item, dict) else getattr(item, "model_dump", dict)()
        if data.get("type") == "function_call_output":
            found.append(str(data.get("output", "")))
    return found


def _reason(task: str, tools: list[FunctionTool]) -> str:
    """What the demo model says beside its calls, as a model would: why these tools."""
    why = "; ".join(
        f"{tool.name} ({(tool.description or 'no description').splitlines()[0].rstrip('.')})"
        for tool in tools
    )
    return f"(offline demo model) To work on “{task}”, I will call {why}."


class DemoModel(Model):
    """An offline stand-in for a model, for demos and first tests: on an agent's first turn it
    calls up to `calls` of its tools (those needing approval first) with arguments made from
    their JSON schema (text parameters get the task's words, numbers get 10), saying why in the
    same response (as a model would: the card shows it), then answers with what the tools
    returned; told that a reviewer edited a call, it calls it again exactly as edited. A
    follow-up in the run's thread is answered the same way, as a task of its own. No network,
    no key."""

    def __init__(self, calls: int = 2, write_gap: float = 0.0) -> None:
        self.calls = calls
        self.write_gap = write_gap  # streamed: seconds between two words of an answer

    def _respond(self, call: Any) -> list[Any]:
        items = call.input if isinstance(call.input, list) else [
            {"role": "user", "content": str(call.input)}
        ]  # fmt: skip
        items = _latest_turn(items)  # a follow-up in the run's thread is a task of its own
        edited = _edited_call(items)
        if edited is not None:  # as a model would: call it again, exactly as the reviewer edited it
            name, arguments = edited
            return [
                function_call(
                    name, json.dumps(arguments), call_id=f"call_demo_{secrets.token_hex(4)}"
                )
            ]
        outputs = _outputs(items)
        if outputs:
            return [assistant_message("Done. " + " / ".join(outputs))]
        task = " ".join(_task_text(items).split())[:60] or "demo"
        tools = [t for t in call.tools if isinstance(t, FunctionTool)]
        chosen = ([t for t in tools if _gated(t)] + [t for t in tools if not _gated(t)])[
            : self.calls
        ]
        if not chosen:
            return [assistant_message(f"(offline demo model) I would now work on: {task}")]
        return [
            assistant_message(_reason(task, chosen)),
            *(
                function_call(
                    tool.name,
                    json.dumps(_demo_arguments(tool, task)),
                    call_id=f"call_demo_{secrets.token_hex(4)}",
                )
                for tool in chosen
            ),
        ]

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        step = ScriptedModel([ModelStep.respond(self._respond)])
        return await step.get_response(*args, **kwargs)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        if self.write_gap <= 0:
            return ScriptedModel([ModelStep.respond(self._respond)]).stream_response(
                *args, **kwargs
            )
        # An answer written word by word, as a model writes (the sandbox shows it streaming).
        writer = SlowWriter([ModelStep.respond(self._respond)], pieces=0, gap=self.write_gap)
        return writer.stream_response(*args, **kwargs)


class SlowWriter(ScriptedModel):
    """A scripted model that streams each text in `pieces` (0: word by word), `gap` seconds
    apart, as a model writing a long answer does (the scripted one sends each text whole)."""

    def __init__(self, steps: list[Any], *, pieces: int, gap: float) -> None:
        super().__init__(steps)
        self.pieces, self.gap = pieces, gap

    async def stream_response(  # type: ignore[override]
        self, *args: Any, **kwargs: Any
    ) -> AsyncIterator[Any]:
        async for event in super().stream_response(*args, **kwargs):
            if not isinstance(event, ResponseTextDeltaEvent):
                yield event
                continue
            text = event.delta
            if self.pieces > 0:
                size = max(1, -(-len(text) // self.pieces))
                chunks = [text[start : start + size] for start in range(0, len(text), size)]
            else:  # word by word
                chunks = re.findall(r"\S+\s*|\s+", text)
            for chunk in chunks:
                yield event.model_copy(update={"delta": chunk})
                await asyncio.sleep(self.gap)
