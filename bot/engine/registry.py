"""The agents a deployment serves, loaded from `APPROVAL_BOT_AGENTS=package.module:attr`.

The registry also computes a fingerprint of the agent definitions (agent names, tool names,
approval settings, handoffs, nested agent tools). It is stored beside each snapshot so that a
resume after the definitions changed is refused with a clear message instead of guessing.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any, cast

from agents import Agent, ApplyPatchTool, FunctionTool, Handoff, ShellTool

from bot.engine.automatic import at_check, on_approval
from bot.engine.journal import journal_tools
from bot.engine.questions import TOOL_NAME as QUESTION_TOOL
from bot.errors import ApprovalBotError

log = logging.getLogger(__name__)


class AgentLoadError(ApprovalBotError):
    """APPROVAL_BOT_AGENTS does not name a usable agent definition."""


class AgentRegistry:
    """Named top-level agents, in order; the first is the default."""

    def __init__(self, agents: dict[str, Agent[Any]]) -> None:
        if not agents:
            raise AgentLoadError("no agents defined: the mapping is empty")
        for name, agent in agents.items():
            if not isinstance(name, str) or not name or any(ch.isspace() for ch in name):
                raise AgentLoadError(f"agent key {name!r} must be a non-empty word without spaces")
            if not isinstance(agent, Agent):
                raise AgentLoadError(f"{name!r} is a {type(agent).__name__}, not an agents.Agent")
        self.agents = dict(agents)
        self.default_name = next(iter(self.agents))
        self.fingerprints = {name: fingerprint(agent) for name, agent in self.agents.items()}
        for agent in self.agents.values():
            for each in walk(agent):
                _fail_closed_approvals(each)
                _deciding_hooks(each)
                journal_tools(each)

    def get(self, name: str) -> Agent[Any] | None:
        return self.agents.get(name)

    def agents_needing_openai_key(self) -> list[str]:
        """Agents (nested ones too) whose model the SDK resolves through OpenAI (a model name
        or the default) while no key is configured; custom `Model` instances need none."""
        from agents.models import _openai_shared

        if os.environ.get("OPENAI_API_KEY") or _openai_shared.get_default_openai_key():
            return []
        if _openai_shared.get_default_openai_client() is not None:
            return []
        names: dict[str, None] = {}
        for agent in self.agents.values():
            for each in walk(agent):
                model = each.model
                if model is None or (isinstance(model, str) and _openai_model_name(model)):
                    names[each.name] = None
        return list(names)

    @classmethod
    def from_value(cls, value: Any) -> AgentRegistry:
        if callable(value) and not isinstance(value, Agent):
            value = value()
        if isinstance(value, Agent):
            return cls({value.name: value})
        if isinstance(value, dict):
            return cls(value)
        raise AgentLoadError(
            f"expected an Agent, a dict[str, Agent] or a callable returning one; got "
            f"{type(value).__name__}"
        )

    @classmethod
    def load(cls, spec: str) -> AgentRegistry:
        return cls.from_value(load_attribute(spec))


def load_attribute(spec: str, setting: str = "APPROVAL_BOT_AGENTS") -> Any:
    """What `package.module:attr` names (the agents, or the advisor: `setting`), imported like
    `python -m` would (a package in the working directory is importable)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise AgentLoadError(f"{setting}={spec!r} must look like package.module:attribute")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        missing = getattr(exc, "name", None) or module_name
        if missing == module_name or module_name.startswith(missing + "."):
            hint = (
                f"looked in the working directory {cwd} and on PYTHONPATH. Run the bot from "
                f"the directory that contains {module_name.split('.')[0]!r} (a package or "
                f".py file), add that directory to PYTHONPATH, or install your package"
            )
        else:  # the module exists, but something it imports does not
            hint = f"{module_name!r} imports {missing!r}, which is not installed"
        raise AgentLoadError(f"cannot import {module_name!r}: {exc} ({hint})") from exc
    try:
        return functools.reduce(getattr, attr.split("."), module)
    except AttributeError:
        raise AgentLoadError(f"module {module_name!r} has no attribute {attr!r}") from None


def _openai_model_name(name: str) -> bool:
    """`gpt-4.1` and `openai/gpt-4.1` go to OpenAI; `litellm/...` and other prefixes do not."""
    prefix, slash, _ = name.partition("/")
    return not slash or prefix == "openai"


def walk(root: Agent[Any]) -> Iterator[Agent[Any]]:
    """Every agent reachable from `root` through handoffs and `Agent.as_tool`, once each."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        agent = stack.pop()
        if id(agent) in seen:
            continue
        seen.add(id(agent))
        yield agent
        for tool in agent.tools:
            nested = getattr(tool, "_agent_instance", None)
            if isinstance(nested, Agent):
                stack.append(nested)
        for handoff in agent.handoffs:
            if isinstance(handoff, Agent):
                stack.append(handoff)
            elif isinstance(handoff, Handoff):
                target = getattr(handoff, "_agent_ref", None) or getattr(handoff, "agent", None)
                target = target() if callable(target) and not isinstance(target, Agent) else target
                if isinstance(target, Agent):
                    stack.append(target)


def _approval_setting(value: Any) -> Any:
    value = getattr(value, "_approval_bot_setting", value)  # as defined, not as wrapped here
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _approval_setting(v) for k, v in sorted(value.items())}
    original = inspect.unwrap(value) if callable(value) else value
    return f"callable:{getattr(original, '__qualname__', type(original).__name__)}"


def _describe(agent: Agent[Any]) -> dict[str, Any]:
    tools = []
    for tool in agent.tools:
        tools.append(
            {
                "type": type(tool).__name__,
                "name": getattr(tool, "name", None),
                "needs_approval": _approval_setting(getattr(tool, "needs_approval", None)),
                "agent": getattr(getattr(tool, "_agent_instance", None), "name", None),
                "server_label": (getattr(tool, "tool_config", None) or {}).get("server_label")
                if isinstance(getattr(tool, "tool_config", None), dict)
                else None,
            }
        )
    handoffs = sorted(
        h.name if isinstance(h, Agent) else getattr(h, "agent_name", str(h)) for h in agent.handoffs
    )
    mcp = [getattr(server, "name", type(server).__name__) for server in agent.mcp_servers]
    return {"name": agent.name, "tools": tools, "handoffs": handoffs, "mcp_servers": mcp}


def fingerprint(root: Agent[Any]) -> str:
    """A short digest of everything a paused run depends on in the agent definitions."""
    described = sorted((_describe(a) for a in walk(root)), key=lambda d: str(d["name"]))
    canonical = json.dumps(described, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def what_matters(root: Agent[Any], needed: list[tuple[str, str]]) -> dict[str, str]:
    """What a paused run needs of the definitions under `root`, as comparable text: for each
    (agent, tool) of its pending calls, that the agent exists and the tool's approval setting
    (tools served by MCP servers, which have no entry in `agent.tools`, only need their agent).
    Edits to anything else do not stop the run from resuming."""
    agents = {a.name: a for a in walk(root)}
    found: dict[str, str] = {}
    for agent_name, tool_name in needed:
        agent = agents.get(agent_name)
        if agent is None:
            found[agent_name] = "missing"
            continue
        found[agent_name] = "agent"
        if not tool_name:
            continue
        tools = {getattr(t, "name", None): t for t in agent.tools}
        tool = tools.get(tool_name)
        if tool is not None:
            setting = _approval_setting(getattr(tool, "needs_approval", None))
            found[f"{agent_name}/{tool_name}"] = json.dumps(setting, default=str)
        elif agent.mcp_servers or "/" in tool_name:
            continue  # an MCP tool: served at run time, checked by the SDK
        else:
            found[f"{agent_name}/{tool_name}"] = "missing"
    return found


def _fail_closed_approvals(agent: Agent[Any]) -> None:
    """Wrap each gated function tool's `needs_approval` (`_gated`): a callable that raises means
    "needs approval", and a call that needs approval is put to the run's automatic decisions
    there (`bot.engine.automatic.at_check`). Other tools' callables only fail closed."""
    for tool in agent.tools:
        check = getattr(tool, "needs_approval", None)
        if isinstance(tool, FunctionTool) and tool.name != QUESTION_TOOL:
            if not getattr(check, "_approval_bot_gated", False) and (
                check is True or callable(check)
            ):
                tool.needs_approval = _gated(tool, check)
            continue
        if not callable(check) or getattr(check, "_approval_bot_fail_closed", False):
            continue
        tool_name = getattr(tool, "name", "?")
        cast(Any, tool).needs_approval = _fail_closed(check, tool_name)


def _deciding_hooks(agent: Agent[Any]) -> None:
    """Give each local shell and patch tool an `on_approval` that puts a call needing approval
    to the run's automatic decisions (`bot.engine.automatic.on_approval`), after the tool's own
    `on_approval` if it has one and that one decides."""
    for tool in agent.tools:
        if not isinstance(tool, ShellTool | ApplyPatchTool):
            continue
        if isinstance(tool, ShellTool) and tool.executor is None:
            continue  # a hosted shell: the SDK takes no approval for it
        own = tool.on_approval
        if getattr(own, "_approval_bot_deciding", False):
            continue
        cast(Any, tool).on_approval = _deciding(own, tool.name)


def _deciding(own: Callable[..., Any] | None, tool_name: str) -> Callable[..., Any]:
    async def decide(context: Any, item: Any) -> Any:
        if own is not None:
            try:
                answer = own(context, item)
                if inspect.isawaitable(answer):
                    answer = await answer
            except Exception:
                log.exception("on_approval of tool %r raised; asking a human instead", tool_name)
                return None
            if isinstance(answer, dict) and isinstance(answer.get("approve"), bool):
                return answer  # the tool's own decision, as the SDK would take it
        try:
            return await on_approval(context, item)
        except Exception:
            log.exception("deciding a call of %r at its on_approval failed; it pauses", tool_name)
            return None

    if own is not None:
        functools.update_wrapper(decide, own)
    cast(Any, decide)._approval_bot_deciding = True
    return decide


def _gated(tool: FunctionTool, setting: Any) -> Callable[..., Any]:
    """`needs_approval` for `tool`: its own `setting` (True, or a callable that fails closed),
    then, when the call needs approval, the run's automatic decision (approved: it runs at
    once). The fingerprint reads `setting` through it (`_approval_setting`)."""
    own = _fail_closed(setting, tool.name) if callable(setting) else None

    async def needs_approval(ctx: Any, params: Any, call_id: str) -> bool:
        if own is not None and not await own(ctx, params, call_id):
            return False
        try:
            return await at_check(ctx, tool, params, call_id)
        except Exception:
            log.exception("deciding a call of %r at its check failed; it pauses", tool.name)
            return True

    if callable(setting):
        functools.update_wrapper(needs_approval, setting)
    cast(Any, needs_approval)._approval_bot_gated = True
    cast(Any, needs_approval)._approval_bot_fail_closed = True
    cast(Any, needs_approval)._approval_bot_setting = setting
    return needs_approval


def _fail_closed(check: Callable[..., Any], tool_name: str) -> Callable[..., Any]:
    @functools.wraps(check)
    async def guarded(*args: Any, **kwargs: Any) -> bool:
        try:
            result = check(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
            return bool(result)
        except Exception:
            log.exception("needs_approval of tool %r raised; asking a human instead", tool_name)
            return True

    guarded._approval_bot_fail_closed = True  # type: ignore[attr-defined]
    return guarded
