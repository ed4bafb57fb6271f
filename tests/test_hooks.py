"""The SDK's lifecycle hook pairs (#32; `bot.engine.hooks`): where at most one of a pair does
anything and it is the bot's own run hooks' method, it is awaited in the run's task, answering
and raising as the SDK's gathering does; anything else (an agent's own hooks) is gathered by the
SDK, each in a task, as before."""

from __future__ import annotations

import asyncio
from typing import Any

import agents.run_internal.run_loop as run_loop
import pytest
from agents import Agent, AgentHooks, RunContextWrapper
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.util import _coro

from bot.engine import hooks
from bot.engine.context import RunContext
from bot.engine.registry import AgentRegistry
from bot.engine.runner import Decision, Engine, Finished, Paused, _ProgressHooks
from tests.agents_for_tests import deploy

SEEN: list[str] = []


class _Watching(AgentHooks[Any]):
    """An agent's own hooks: gathered by the SDK, as ever."""

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        await asyncio.sleep(0)
        SEEN.append(f"agent saw {tool.name}")


def _engine(agent_hooks: AgentHooks[Any] | None = None) -> Engine:
    step = [function_call("deploy", {"target": "web"}, call_id="c1")]
    model = ScriptedModel([step, [assistant_message("done")]])
    agent: Agent[Any] = Agent(name="deployer", model=model, tools=[deploy], hooks=agent_hooks)
    return Engine(AgentRegistry({"deployer": agent}), rejection_text="no", max_turns=5)


async def _resumed(engine: Engine) -> tuple[list[str], list[str]]:
    """The tasks a resume started (by their coroutine's name) and the progress it told."""
    context = RunContext(run_id="r1", team_id="T1", user_id="U1", channel_id="C1")
    paused = await engine.start("deployer", "deploy web", context)
    assert isinstance(paused, Paused), paused
    tasks: list[str] = []
    told: list[str] = []
    loop = asyncio.get_running_loop()

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        tasks.append(getattr(getattr(coro, "cr_code", None), "co_name", "?"))
        return asyncio.Task(coro, loop=loop, **kwargs)

    async def progress(text: str) -> None:
        told.append(text)

    loop.set_task_factory(factory)
    try:
        outcome = await engine.resume(
            "deployer", paused.checkpoint, [Decision("c1", True)], task="deploy web",
            progress=progress,
        )  # fmt: skip
    finally:
        loop.set_task_factory(None)
    assert isinstance(outcome, Finished) and outcome.output == "done", outcome
    return tasks, told


async def test_a_resume_runs_no_task_for_a_hook_pair() -> None:
    """A resume of an agent without hooks of its own runs no task for a hook (twelve before
    this: the run's hooks' method and the agent's empty one, for six hooks), and its hooks are
    told what they were told before."""
    tasks, told = await _resumed(_engine())
    assert tasks  # (the SDK's run still runs its tasks)
    on = [t for t in tasks if t.startswith("on_") or t == "noop_coroutine"]
    assert on == [], on
    assert told == ["deployer called deploy"]


async def test_an_agents_own_hooks_are_gathered_by_the_sdk() -> None:
    """An agent's own hooks run as before, each pair gathered in tasks by the SDK."""
    SEEN.clear()
    tasks, told = await _resumed(_engine(_Watching()))
    assert SEEN == ["agent saw deploy"]
    assert told == ["deployer called deploy"]
    assert "on_tool_start" in tasks


async def test_the_pairs_answer_and_raise_as_the_sdks_gathering() -> None:
    """Installed, the gathering answers what the SDK's answers for pairs that do nothing, the
    bot's hook with nothing, and a bot's hook that fails; and hands the SDK anything else."""
    _engine()  # installs it
    installed = run_loop.gather_with_cancel
    sdk = hooks.replaced(run_loop)
    assert installed is not sdk
    run = _ProgressHooks(None)
    context: Any = RunContextWrapper(context=None)
    agent: Agent[Any] = Agent(name="a")

    def pairs() -> list[tuple[Any, ...]]:
        return [
            (_coro.noop_coroutine(), _coro.noop_coroutine()),
            (run.on_agent_start(context, agent), _coro.noop_coroutine()),
            (run.on_tool_start(context, agent, deploy), _coro.noop_coroutine()),
            (_coro.noop_coroutine(), run.on_handoff(context, agent, agent)),
            (run.on_agent_end(context, agent, "x"), AgentHooks().on_end(context, agent, "x")),
            (),
        ]

    for mine, theirs in zip(pairs(), pairs(), strict=True):
        assert await installed(*mine) == await sdk(*theirs)

    async def stop() -> bool:
        raise LookupError("stopped")

    failing = _ProgressHooks(None, stop)
    for gather in (installed, sdk):
        with pytest.raises(LookupError, match="stopped"):
            await gather(failing.on_llm_start(context, agent, None, []), _coro.noop_coroutine())
    # anything else: the SDK's (its tasks), answered the same
    for gather in (installed, sdk):
        assert await gather(asyncio.sleep(0, "a"), _coro.noop_coroutine()) == ("a", None)
        told: list[BaseException] = []
        with pytest.raises(LookupError):
            await gather(
                failing.on_llm_start(context, agent, None, []), on_child_failure=told.append
            )
        assert [type(e) for e in told] == [LookupError]


def test_only_code_that_returns_none_does_nothing() -> None:
    async def documented() -> None:
        """Nothing."""

    async def returns() -> int:
        return 1

    async def calls() -> None:
        print()

    assert hooks._does_nothing(documented.__code__)
    assert hooks._does_nothing(_coro.noop_coroutine.__code__)
    assert not hooks._does_nothing(returns.__code__)
    assert not hooks._does_nothing(calls.__code__)
    assert len(hooks._empty()) == 15  # noop, and the 7 + 7 hooks of the two base classes
