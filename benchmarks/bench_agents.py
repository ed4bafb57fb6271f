"""Agents for the benchmarks, no network (stateless scripted models): `agents` answers at once
(queue throughput); `approvals` calls one tool that needs approval, then answers (decisions)."""

from __future__ import annotations

import os
import zlib
from typing import Any

from agents import Agent, Model, ModelResponse, RunConfig, Runner, RunState, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call


class InstantModel(Model):
    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        return await ScriptedModel([[assistant_message("done")]]).get_response(*args, **kwargs)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        return ScriptedModel([[assistant_message("done")]]).stream_response(*args, **kwargs)


agents = {"bench": Agent(name="bench", model=InstantModel())}


def _respond(call: Any, tool: str = "deploy") -> list[Any]:
    """Stateless: after its tool's output, answer; else call `tool` with the task's first 100
    characters (runs start and resume in any order, in any process)."""
    items = call.input if isinstance(call.input, list) else [
        {"role": "user", "content": str(call.input)}
    ]  # fmt: skip
    for item in items:
        data = item if isinstance(item, dict) else getattr(item, "model_dump", dict)()
        if data.get("type") == "function_call_output":
            return [assistant_message("done")]
    first = items[0] if isinstance(items[0], dict) else items[0].model_dump()
    task = str(first.get("content", ""))
    call_id = f"call_{zlib.crc32(task.encode())}"
    return [function_call(tool, {"target": task[:100]}, call_id=call_id)]


class OneCallModel(Model):
    """The minimal paused run: one call that needs approval, then a final answer."""

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        step = ScriptedModel([ModelStep.respond(_respond)])
        return await step.get_response(*args, **kwargs)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        return ScriptedModel([ModelStep.respond(_respond)]).stream_response(*args, **kwargs)


@function_tool(needs_approval=True)
def deploy(target: str) -> str:
    """Deploy a target (with $BENCH_LEDGER set, a line per execution is appended to that file:
    the scale-out benchmark counts lost and doubled executions from it)."""
    ledger = os.environ.get("BENCH_LEDGER")
    if ledger:
        with open(ledger, "a", encoding="utf-8") as out:  # one short append: atomic
            out.write(target + "\n")
    return f"deployed {target}"


def deployer() -> Agent[Any]:
    return Agent(name="deployer", model=OneCallModel(), tools=[deploy])


@function_tool
def look(target: str) -> str:
    """Look at a target: needs no approval."""
    return f"looked at {target}"


class FreeCallModel(Model):
    """The minimal run that needs no decision: one call of a tool that needs no approval,
    then a final answer."""

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        step = ScriptedModel([ModelStep.respond(lambda call: _respond(call, "look"))])
        return await step.get_response(*args, **kwargs)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        step = ScriptedModel([ModelStep.respond(lambda call: _respond(call, "look"))])
        return step.stream_response(*args, **kwargs)


def looker() -> Agent[Any]:
    return Agent(name="looker", model=FreeCallModel(), tools=[look])


approvals = {"deployer": deployer(), "looker": looker()}


async def approve_and_run(
    agent: Agent[Any],
    state: RunState[Any],
    *,
    streamed: bool = False,
    config: RunConfig | None = None,
) -> Any:
    """The SDK's own resume of a paused run's state, the floor the benchmarks time: every call
    approved, then run, streamed as the bot runs it or by `Runner.run`; its final output."""
    for item in state.get_interruptions():
        state.approve(item)
    if streamed:
        result = Runner.run_streamed(agent, state, run_config=config)
        async for _ in result.stream_events():
            pass
        return result.final_output
    return (await Runner.run(agent, state, run_config=config)).final_output
