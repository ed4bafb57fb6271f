"""The SDK's checks of which tools and handoffs are enabled (#32): where a plain boolean answers
them they are answered without a task each (`bot.engine.enabled`), exactly as the SDK's own
gathering answers them; any other check (a function deciding) runs as the SDK runs it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import agents.agent as agent_module
import agents.run_internal.tool_execution as tool_execution
import agents.run_internal.turn_preparation as turn_preparation
import pytest
from agents import Agent, RunContextWrapper, WebSearchTool, function_tool, handoff
from agents.testing import ScriptedModel, assistant_message, function_call

from bot.engine import enabled
from bot.engine.context import RunContext
from bot.engine.registry import AgentRegistry
from bot.engine.runner import Decision, Engine, Finished, Paused

ASKED: list[str] = []  # the deciding functions called, in order


def _deciding(name: str, answer: bool, *, wait: bool = False) -> Any:
    if wait:

        async def decide_later(context: Any, agent: Any) -> bool:
            ASKED.append(name)
            await asyncio.sleep(0)
            return answer

        return decide_later

    def decide(context: Any, agent: Any) -> bool:
        ASKED.append(name)
        return answer

    return decide


def _tool(name: str, is_enabled: Any = True, needs_approval: bool = False) -> Any:
    def run(target: str) -> str:
        return f"{name} {target}"

    run.__name__ = name
    return function_tool(run, is_enabled=is_enabled, needs_approval=needs_approval)


def _agents() -> Iterator[Agent[Any]]:
    """Agents whose tools and handoffs are enabled in each of the ways the SDK reads."""
    helper: Agent[Any] = Agent(name="helper")
    yield Agent(name="none")
    yield Agent(name="plain", tools=[_tool("a"), _tool("b")], handoffs=[helper])
    yield Agent(name="off", tools=[_tool("a", False), _tool("b")], handoffs=[helper])
    yield Agent(name="hosted", tools=[WebSearchTool(), _tool("a", False)])
    yield Agent(
        name="decided",
        tools=[_tool("a", _deciding("a", False)), _tool("b"), _tool("c", _deciding("c", True))],
        handoffs=[handoff(helper, is_enabled=_deciding("h", False)), Agent(name="other")],
    )
    yield Agent(
        name="awaited",
        tools=[_tool("a", _deciding("a", True, wait=True)), _tool("b", False)],
        handoffs=[handoff(helper, is_enabled=False), handoff(helper, is_enabled=True)],
    )


async def _enabled(agent: Agent[Any]) -> tuple[list[str], list[str], list[str], list[str]]:
    """What the SDK finds enabled: all tools, function tools, handoffs; and the functions
    it asked."""
    ASKED.clear()
    context: RunContextWrapper[Any] = RunContextWrapper(context=None)
    tools = [t.name for t in await agent.get_all_tools(context)]
    functions = [
        t.name for t in await tool_execution.resolve_enabled_function_tools(agent, context)
    ]
    handoffs = [h.tool_name for h in await turn_preparation.get_handoffs(agent, context)]
    return tools, functions, handoffs, list(ASKED)


async def test_the_enabled_checks_answer_as_the_sdks_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed (as an Engine does), each agent's enabled tools and handoffs, in order, and
    the functions asked are those the SDK's own gathering gives."""
    assert enabled.install()
    installed = [await _enabled(agent) for agent in _agents()]
    sdk = enabled.sdk_gather()
    for module in (agent_module, tool_execution, turn_preparation):
        monkeypatch.setattr(module, "gather_with_cancel", sdk)
    own = [await _enabled(agent) for agent in _agents()]
    assert installed == own
    assert installed[2][:3] == (["b"], ["b"], ["transfer_to_helper"])  # (a real difference)
    assert installed[4][3] == ["a", "c", "a", "c", "h"]  # the functions still decide


async def test_a_resume_runs_no_task_for_an_enabled_check_of_a_boolean() -> None:
    """A resume of a run whose tools are enabled by default runs no task to check it (ten
    before this: each tool of the agent, each turn, and the handoffs it has none of)."""
    model = ScriptedModel(
        [[function_call("deploy", {"target": "web"}, call_id="c1")],
         [assistant_message("done")]]
    )  # fmt: skip
    tools = [_tool("deploy", needs_approval=True), _tool("look")]
    agent: Agent[Any] = Agent(name="deployer", model=model, tools=tools)
    engine = Engine(AgentRegistry({"deployer": agent}), rejection_text="no", max_turns=5)
    context = RunContext(run_id="r1", team_id="T1", user_id="U1", channel_id="C1")
    paused = await engine.start("deployer", "deploy web", context)
    assert isinstance(paused, Paused), paused
    tasks: list[str] = []
    loop = asyncio.get_running_loop()

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        tasks.append(getattr(getattr(coro, "cr_code", None), "co_name", "?"))
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.set_task_factory(factory)
    try:
        outcome = await engine.resume(
            "deployer", paused.checkpoint, [Decision("c1", True)], task="deploy web"
        )
    finally:
        loop.set_task_factory(None)
    assert isinstance(outcome, Finished) and outcome.output == "done", outcome
    assert tasks  # (the SDK's run still runs its tasks)
    assert not [t for t in tasks if t in ("_check_tool_enabled", "check_handoff_enabled")]


def test_another_sdk_version_keeps_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    import agents

    monkeypatch.setattr(agents, "__version__", "0.25.0")
    assert not enabled.install()
