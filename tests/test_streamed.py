"""The SDK's streamed run without the tasks it starts only to wait (#32; `bot.engine.streamed`):
the events a consumer sees, in order, the answers relayed as they grow and the outcomes are
those of the SDK's own streamed run; a streamed resume starts no task to wait between turns,
nor one for output guardrails when there are none."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import agents.run_internal.run_loop as run_loop
import pytest
from agents import (
    Agent,
    GuardrailFunctionOutput,
    RunConfig,
    RunContextWrapper,
    Runner,
    function_tool,
    output_guardrail,
)
from agents.result import RunResultStreaming
from agents.testing import ScriptedModel, assistant_message, function_call

from bot.engine import streamed
from bot.engine.context import RunContext
from bot.engine.registry import AgentRegistry
from bot.engine.runner import Decision, Engine, Outcome, Paused

CHECKED: list[str] = []  # the output guardrails run, in order


@function_tool
def look(target: str) -> str:
    """Look at a target."""
    return f"looked at {target}"


@function_tool(needs_approval=True)
def deploy(target: str) -> str:
    """Deploy a target."""
    return f"deployed {target}"


def _guardrail(trips: bool) -> Any:
    @output_guardrail
    def judged(context: RunContextWrapper[Any], agent: Agent[Any], output: Any) -> Any:
        CHECKED.append(f"{trips}:{output}")
        return GuardrailFunctionOutput(output_info=None, tripwire_triggered=trips)

    return judged


def _agents() -> Iterator[Agent[Any]]:
    """Runs of one turn and of several (text before a tool call, tools needing no approval,
    then a paused call), with output guardrails none, passing or tripping."""
    turns = [
        [assistant_message("checking first"), function_call("look", {"target": "a"}, call_id="l1")],
        [function_call("look", {"target": "b"}, call_id="l2")],
        [function_call("deploy", {"target": "web"}, call_id="d1")],
        [assistant_message("deployed web, all good")],
    ]  # fmt: skip
    yield Agent(name="one", model=ScriptedModel([[assistant_message("done at once")]]))
    yield Agent(name="turns", model=ScriptedModel(turns), tools=[look, deploy])
    yield Agent(
        name="passes", model=ScriptedModel(turns), tools=[look, deploy],
        output_guardrails=[_guardrail(False)],
    )  # fmt: skip
    yield Agent(
        name="trips", model=ScriptedModel([[assistant_message("no")]]),
        output_guardrails=[_guardrail(True)],
    )  # fmt: skip


def _seen(event: Any) -> tuple[str, str]:
    if event.type == "raw_response_event":
        data = event.data
        return event.type, f"{data.type}:{getattr(data, 'delta', '')}"
    if event.type == "run_item_stream_event":
        return event.type, f"{event.name}:{event.item.type}"
    return event.type, event.new_agent.name


async def _events(agent: Agent[Any], *, stop_after: int | None = None) -> list[Any]:
    """What a consumer of the SDK's streamed run sees, then the run's end: its final output,
    interruptions, or error (`stop_after`: the consumer stops taking events after that many,
    and the run goes on without it)."""
    result = Runner.run_streamed(agent, "go", run_config=RunConfig(tracing_disabled=True))
    seen: list[Any] = []
    try:
        async for event in result.stream_events():
            seen.append(_seen(event))
            if stop_after is not None and len(seen) >= stop_after:
                break
        if stop_after is not None:
            assert result.run_loop_task is not None
            await asyncio.wait({result.run_loop_task})
        seen.append(("end", result.final_output, [i.name for i in result.interruptions]))
    except Exception as exc:
        seen.append(("error", type(exc).__name__))
    return seen


async def _engine(agent: Agent[Any]) -> list[Any]:
    """The bot's streamed run of `agent` and its resume: the texts the stream was told, in
    order, and the outcomes."""
    engine = Engine(AgentRegistry({agent.name: agent}), rejection_text="no", max_turns=10)
    told: list[str] = []

    async def stream(text: str) -> None:
        told.append(text)

    context = RunContext(run_id="r1", team_id="T1", user_id="U1", channel_id="C1")
    outcomes: list[Outcome] = [await engine.start(agent.name, "go", context, stream=stream)]
    if isinstance(outcomes[0], Paused):
        decisions = [Decision(a.call_id, True) for a in outcomes[0].approvals]
        outcomes.append(
            await engine.resume(
                agent.name, outcomes[0].checkpoint, decisions, task="go", stream=stream
            )
        )
    return [told, outcomes[-1]]


async def _all() -> list[Any]:
    CHECKED.clear()
    found = [await _events(agent) for agent in _agents()]
    found += [await _events(agent, stop_after=2) for agent in _agents()]
    found += [await _engine(agent) for agent in _agents()]
    return [*found, list(CHECKED)]


async def test_the_streamed_run_is_the_sdks_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed (as an Engine does), every event a consumer sees, in order, the texts the bot
    relays and every outcome are those of the SDK's own streamed run, for runs of one turn and
    of several, a consumer that stops early, and output guardrails none, passing or tripping."""
    assert streamed.install()
    installed = await _all()
    wait, guardrails = streamed.sdk_own()
    monkeypatch.setattr(RunResultStreaming, "_wait_for_turn_event_consumption", wait)
    monkeypatch.setattr(run_loop, "_run_output_guardrails_for_stream", guardrails)
    own = await _all()
    assert installed == own
    texts = installed[-3][0]  # the bot's run of "passes": what its stream was told
    assert texts[:2] == ["checking first", ""] and texts[-1] == "deployed web, all good"
    assert ("error", "OutputGuardrailTripwireTriggered") in installed[3]
    assert installed[-1].count("False:deployed web, all good") == 1  # it still runs (resumed)


def _tasks_of(names: list[str]) -> Any:
    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        names.append(getattr(getattr(coro, "cr_code", None), "co_name", "?"))
        return asyncio.Task(coro, loop=loop, **kwargs)

    return factory


@pytest.mark.parametrize("guarded", [False, True], ids=["no-guardrails", "a-guardrail"])
async def test_a_streamed_resume_starts_no_task_only_to_wait(guarded: bool) -> None:
    """The bot's streamed resume of a paused run waits for its consumer between turns without
    a task (two before this: the queue's join and the consumers' event), and with no output
    guardrail runs none (one before this); with one, the SDK's own runs it."""
    model = ScriptedModel(
        [[function_call("deploy", {"target": "web"}, call_id="d1")], [assistant_message("done")]]
    )
    guards = [_guardrail(False)] if guarded else []
    agent: Agent[Any] = Agent(name="d", model=model, tools=[deploy], output_guardrails=guards)
    engine = Engine(AgentRegistry({"d": agent}), rejection_text="no", max_turns=5)
    context = RunContext(run_id="r1", team_id="T1", user_id="U1", channel_id="C1")
    paused = await engine.start("d", "go", context)
    assert isinstance(paused, Paused), paused
    told: list[str] = []

    async def stream(text: str) -> None:
        told.append(text)

    names: list[str] = []
    loop = asyncio.get_running_loop()
    loop.set_task_factory(_tasks_of(names))
    try:
        outcome = await engine.resume(
            "d", paused.checkpoint, [Decision("d1", True)], task="go", stream=stream
        )
    finally:
        loop.set_task_factory(None)
    assert told == ["done"] and getattr(outcome, "output", None) == "done", outcome
    assert "_await_data_redacted_error_boundary" in names  # (the streamed run's own task)
    assert not [n for n in names if n in ("join", "wait")]
    assert names.count("run_output_guardrails") == (1 if guarded else 0)


def test_another_sdk_version_keeps_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    import agents

    monkeypatch.setattr(agents, "__version__", "0.25.0")
    assert not streamed.install()
