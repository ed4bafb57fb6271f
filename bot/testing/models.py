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
from dataclasses import dataclass
from typing import Any

from agents import Agent, FunctionTool, Model, ModelResponse, Tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from openai.types.responses import ResponseTextDeltaEvent

from bot.config import DEFAULT_REJECTION_TEXT
from bot.engine.questions import is_question_tool
from bot.engine.registry import walk
from bot.service.decisions.edits import edited_call_in

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


# Values a careful operator would try first, by what a parameter is called.
_BY_NAME: dict[str, Any] = {
    "path": "/var/cache/app", "file": "/var/cache/app/index.db", "filename": "index.db",
    "directory": "/var/cache/app", "dir": "/var/cache/app", "folder": "/var/cache/app",
    "service": "web", "host": "web-1", "hostname": "web-1", "server": "web-1", "node": "web-1",
    "region": "eu-west-1", "zone": "eu-west-1a", "cluster": "prod-eu", "namespace": "default",
    "database": "app", "db": "app", "table": "events", "bucket": "app-backups",
    "branch": "main", "repo": "acme/app", "repository": "acme/app", "url": "https://example.com",
    "email": "oncall@example.com", "user": "oncall", "channel": "#ops", "name": "web",
    "replicas": 6, "count": 3, "limit": 10, "port": 8080, "timeout": 30, "seconds": 30,
    "minutes": 10, "hours": 1, "days": 7, "version": "1.2.3", "tag": "v1.2.3",
    "dry_run": True, "force": False, "recursive": False,
}  # fmt: skip
# Parameters whose value is free text: the task's words fit them.
_FREE_TEXT = ("message", "text", "body", "content", "reason", "summary", "description",
              "query", "question", "title", "comment", "note", "prompt", "input",
              "task")  # fmt: skip
_TARGET = ("path", "file", "filename", "directory", "dir", "folder", "service", "host",
           "hostname", "server", "node", "database", "db", "table", "bucket", "name")  # fmt: skip
_PATH = re.compile(r"(?<![\w.])/[\w.@%+~-]+(?:/[\w.@%+~-]+)*/?")
_NUMBER = re.compile(r"\b(\d{1,6})\b")
_NAMED = re.compile(r"\b([a-z][\w-]{1,30})\s+(?:tier|service|server|cluster|host|app)s?\b", re.I)
_CAREFUL = re.compile(r"\b(keep|don'?t|do not|never|not|except|spare|leave)\b", re.I)


def _from_text(name: str, kind: str, text: str) -> Any:
    """A value for parameter `name` that `text` (the task, or a person's answer) gives, or
    None: a path for a path, a named tier or service for a service or host, a number."""
    lowered = name.lower()
    if kind in ("integer", "number"):
        found = _NUMBER.search(text)
        return (int if kind == "integer" else float)(found.group(1)) if found else None
    if kind != "string":
        return None
    if lowered in ("path", "file", "filename", "directory", "dir", "folder"):
        found = _PATH.search(text)
        return found.group(0) if found else None
    if lowered in ("service", "host", "hostname", "server", "node", "cluster", "name"):
        named = _NAMED.search(text)
        return named.group(1).lower() if named else None
    return None


def _sample(name: str, schema: dict[str, Any], task: str) -> tuple[Any, bool]:
    """A plausible value for one parameter, from its schema (default, enum, bounds), the task's
    words, then its name; and whether the task gave it."""
    kind = str(schema.get("type") or "string")
    if "default" in schema:
        return schema["default"], True
    if schema.get("enum"):
        return schema["enum"][0], True
    given = _from_text(name, kind, task)
    if given is not None:
        return given, True
    lowered = name.lower()
    if kind == "string" and lowered in _FREE_TEXT:
        return task, True
    if kind == "array":
        item, found = _sample(name.rstrip("s"), schema.get("items") or {}, task)
        return [item], found
    if kind == "object":
        return _arguments(schema, task)[0], True
    value = _BY_NAME.get(lowered)
    if kind == "boolean":
        return bool(value) if isinstance(value, bool) else False, True
    if kind in ("integer", "number"):
        number: float = value if isinstance(value, int) and not isinstance(value, bool) else 1
        low, high = schema.get("minimum"), schema.get("maximum")
        number = max(number, low) if isinstance(low, int | float) else number
        number = min(number, high) if isinstance(high, int | float) else number
        return (int(number) if kind == "integer" else float(number)), True
    return (value if isinstance(value, str) else lowered.replace("_", "-")), False


def _arguments(schema: dict[str, Any], task: str) -> tuple[dict[str, Any], list[str]]:
    """The arguments of a call from its schema and the task; and the target-like parameters
    the task did not give (a careful agent asks about those before acting)."""
    properties = schema.get("properties") or {}
    required = schema.get("required") or list(properties)
    arguments: dict[str, Any] = {}
    guessed: list[str] = []
    for name in required:
        value, given = _sample(name, properties.get(name) or {}, task)
        arguments[name] = value
        if not given and name.lower() in _TARGET:
            guessed.append(name)
    return arguments, guessed


def _gated(tool: Tool) -> bool:
    return isinstance(tool, FunctionTool) and tool.needs_approval is not False


def _data(item: Any) -> dict[str, Any]:
    found = item if isinstance(item, dict) else getattr(item, "model_dump", dict)()
    return found if isinstance(found, dict) else {}


def _task_text(items: list[Any]) -> str:
    for item in items:
        data = _data(item)
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
        if _data(items[index]).get("role") == "user":
            return items[index:]
    return items


def _edited_call(items: list[Any]) -> tuple[str, dict[str, Any]] | None:
    """The call a reviewer's edit asks for (`bot.service.decisions.edits.edit_message`), when the
    latest tool outputs hold one and it was not proposed since."""
    asked = None
    for item in items:
        data = _data(item)
        if data.get("type") == "function_call_output":
            asked = edited_call_in(str(data.get("output", ""))) or asked
        elif data.get("type") == "function_call" and asked is not None:
            asked = None  # proposed again already
    return asked


@dataclass(frozen=True)
class _Done:
    """A call of this turn and what came back (None: nothing yet)."""

    name: str
    arguments: dict[str, Any]
    output: str | None


def _done(items: list[Any]) -> list[_Done]:
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    outputs: dict[str, str] = {}
    for item in items:
        data = _data(item)
        if data.get("type") == "function_call":
            try:
                arguments = json.loads(str(data.get("arguments") or "{}"))
            except ValueError:
                arguments = {}
            calls[str(data.get("call_id"))] = (str(data.get("name")), arguments)
        elif data.get("type") == "function_call_output":
            outputs[str(data.get("call_id"))] = str(data.get("output", ""))
    return [_Done(name, args, outputs.get(cid)) for cid, (name, args) in calls.items()]


def _said(arguments: dict[str, Any]) -> str:
    """Arguments as a person says them: "service web and replicas 6"."""
    parts = [f"{name} {value}" for name, value in arguments.items() if value not in ("", None)]
    return " and ".join(parts) if len(parts) <= 2 else ", ".join(parts)


def _outcome(done: _Done) -> str:
    """One line of the summary: what a call did, in words (the bot's own messages to the
    model, such as an edit's instructions, are not repeated)."""
    what = f"`{done.name}` ({_said(done.arguments)})" if done.arguments else f"`{done.name}`"
    output = " ".join((done.output or "").split())
    if output == DEFAULT_REJECTION_TEXT or output.startswith("A human reviewer rejected"):
        return f"{what}: rejected by a reviewer, so it did not run."
    if output.startswith(("No reviewer decided", "No one answered")):
        return f"{what}: nobody decided in time, so it did not run."
    if edited_call_in(output) is not None or output.startswith("Not run as proposed"):
        return f"{what}: a reviewer changed the arguments; I ran their version instead."
    return f"{what}: “{_plain(output)}”"  # what came back: its result, or a reviewer's reason


def _plain(text: str) -> str:
    """Tool output as plain words: Slack's markup (`<@U1>`, `<url|label>`) as text."""
    text = re.sub(r"<@([A-Z0-9]+)>", r"\1", text)
    return re.sub(r"<([^<>|]+)\|([^<>]+)>", r"\2", text)


class DemoModel(Model):
    """An offline stand-in for a model, for demos and first tests, that acts like a careful
    agent. For a task it picks the tools the task names (by their names and descriptions;
    else up to `calls` of them, those needing approval first) and proposes plausible
    arguments: from each parameter's schema (default, enum, bounds), the task's words (a path,
    a number, "the web tier" for a service), else a value fitting the parameter's name
    (`path: /var/cache/app`, `replicas: 6`). When a call's target is a guess and the agent may
    ask (`ask_human`), it asks first, alone, and acts on the answer (a value it names, or what
    it says to keep). It says why beside its calls (the card shows it), calls a reviewer's
    edited call again exactly as edited, and ends with a summary of what happened, in words.
    A follow-up in the run's thread is a task of its own. No network, no key.

    `write_gap`: seconds between two words of a written answer (streamed, as a model writes);
    its calls and their reasons are sent at once."""

    def __init__(self, calls: int = 2, write_gap: float = 0.0) -> None:
        self.calls = calls
        self.write_gap = write_gap

    def _chosen(self, tools: list[FunctionTool], task: str) -> list[FunctionTool]:
        """The tools whose verb the task uses (`restart` for restart_service), else the first
        ones; those needing approval first; at most `calls`."""
        words = set(re.findall(r"[a-z]+", task.lower()))
        ordered = [t for t in tools if _gated(t)] + [t for t in tools if not _gated(t)]
        named = [t for t in ordered if t.name.lower().split("_")[0] in words]
        return (named or ordered)[: self.calls]

    def _respond(self, call: Any) -> list[Any]:
        items = call.input if isinstance(call.input, list) else [
            {"role": "user", "content": str(call.input)}
        ]  # fmt: skip
        items = _latest_turn(items)  # a follow-up in the run's thread is a task of its own
        edited = _edited_call(items)
        if edited is not None:  # as a model would: call it again, exactly as the reviewer edited it
            name, arguments = edited
            return [function_call(name, json.dumps(arguments), call_id=_call_id())]
        task = " ".join(_task_text(items).split()) or "the task"
        done = _done(items)
        tools = [t for t in call.tools if isinstance(t, FunctionTool)]
        asking = next((t for t in tools if is_question_tool(t)), None)
        answers = [d.output or "" for d in done if asking is not None and d.name == asking.name]
        if done and not (answers and len(done) == len(answers)):
            return [assistant_message(self._summary(done, answers))]
        chosen = self._chosen([t for t in tools if not is_question_tool(t)], task)
        if not chosen:
            return [assistant_message(f"I have no tool for “{task}”, so I did nothing.")]
        heard = " ".join(answers)
        planned = [(t, *_arguments(t.params_json_schema, f"{task} {heard}")) for t in chosen]
        guessed = [(t, args, names) for t, args, names in planned if names]
        if asking is not None and guessed and not answers:
            tool, arguments, names = guessed[0]
            question = (
                f"For “{task}” I would call {tool.name} with {_said(arguments)}. Is "
                f"{names[0]} {arguments[names[0]]} right? Tell me which {names[0]} to use, "
                "or what I must not touch."
            )
            why = f"I need to know which {names[0]} you mean before I call {tool.name}."
            return [
                assistant_message(why),
                function_call(asking.name, json.dumps({"question": question}), call_id=_call_id()),
            ]
        if answers:
            planned = [(t, self._heeding(a, heard), n) for t, a, n in planned]
        steps = " and then ".join(f"{t.name} with {_said(a)}" for t, a, _ in planned)
        why = f"To {task[0].lower() + task[1:]}, I will call {steps}."
        if answers:
            why = f"You answered “{heard.strip()}”. {why}"
        return [
            assistant_message(why),
            *(function_call(t.name, json.dumps(a), call_id=_call_id()) for t, a, _ in planned),
        ]

    @staticmethod
    def _heeding(arguments: dict[str, Any], answer: str) -> dict[str, Any]:
        """The arguments once a person answered: a value their answer says to keep is never
        the target (a sibling is chosen instead)."""
        if not _CAREFUL.search(answer):
            return arguments
        kept = [p.rstrip("/") for p in _PATH.findall(answer)]
        heeded = dict(arguments)
        for name, value in arguments.items():
            if isinstance(value, str) and any(value.rstrip("/") == k for k in kept):
                heeded[name] = _BY_NAME.get(name.lower(), value)
                if heeded[name] == value:
                    heeded[name] = "/var/cache/app"
        return heeded

    @staticmethod
    def _summary(done: list[_Done], answers: list[str]) -> str:
        lines = [_outcome(d) for d in done if d.output is not None and d.name != "ask_human"]
        heard = "".join(f"You told me: “{' '.join(a.split())}”.\n" for a in answers)
        if not lines:
            return f"{heard}Done: nothing needed doing."
        return f"{heard}Done. What happened:\n" + "\n".join(f"- {line}" for line in lines)

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        step = ScriptedModel([ModelStep.respond(self._respond)])
        return await step.get_response(*args, **kwargs)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        if self.write_gap <= 0:
            return ScriptedModel([ModelStep.respond(self._respond)]).stream_response(
                *args, **kwargs
            )
        acting: list[bool] = []  # a response with calls is sent at once; an answer is written

        def respond(call: Any) -> list[Any]:
            found = self._respond(call)
            acting.append(any(_data(item).get("type") == "function_call" for item in found))
            return found

        writer = SlowWriter(
            [ModelStep.respond(respond)], pieces=0, gap=self.write_gap,
            at_once=lambda: bool(acting and acting[-1]),
        )  # fmt: skip
        return writer.stream_response(*args, **kwargs)


def _call_id() -> str:
    return f"call_demo_{secrets.token_hex(4)}"


class SlowWriter(ScriptedModel):
    """A scripted model that streams each text in `pieces` (0: word by word), `gap` seconds
    apart, as a model writing a long answer does (the scripted one sends each text whole);
    `at_once()` true (asked once the step is resolved): this response's text goes at once."""

    def __init__(
        self,
        steps: list[Any],
        *,
        pieces: int,
        gap: float,
        at_once: Callable[[], bool] | None = None,
    ) -> None:
        super().__init__(steps)
        self.pieces, self.gap, self.at_once = pieces, gap, at_once

    async def stream_response(  # type: ignore[override]
        self, *args: Any, **kwargs: Any
    ) -> AsyncIterator[Any]:
        async for event in super().stream_response(*args, **kwargs):
            if not isinstance(event, ResponseTextDeltaEvent) or (
                self.at_once is not None and self.at_once()
            ):
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
