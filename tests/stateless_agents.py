"""Agents for tests that run the bot as real processes: the scripted model decides from its
input alone, so any process can continue a run. The tool appends `start` and `end` events to
the file in $TEST_LEDGER; $TEST_BLOCK makes a process hang at a stage (before_tool,
during_tool, after_tool, during_answer: half of the answer written) after writing a `blocked`
event, so a test can SIGKILL it there."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from agents import Agent, AgentHooks, Model, ModelResponse, RunContextWrapper, Tool, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call


def record(event: str, **fields: Any) -> None:
    with open(os.environ["TEST_LEDGER"], "a", encoding="utf-8") as ledger:
        ledger.write(json.dumps({"event": event, "pid": os.getpid(), **fields}) + "\n")
        ledger.flush()
        os.fsync(ledger.fileno())


async def block_at(stage: str) -> None:
    if os.environ.get("TEST_BLOCK") == stage:
        record("blocked", stage=stage)
        await asyncio.sleep(3600)


def _respond(call: Any) -> list[Any]:
    items = (
        call.input if isinstance(call.input, list) else [{"role": "user", "content": call.input}]
    )
    for item in reversed(items):
        data = item if isinstance(item, dict) else item.model_dump()
        if data.get("type") == "function_call_output":
            return [assistant_message(f"tool said: {data['output']}")]
        if data.get("role") == "user":
            return [function_call("delete_logs", {"path": str(data["content"])}, call_id="call_1")]
    return [assistant_message("nothing to do")]


class StatelessModel(Model):
    """Hands every call to a one-step ScriptedModel that answers from the call's input."""

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        step = ScriptedModel([ModelStep.respond(_respond)])
        inputs = kwargs.get("input", args[1] if len(args) > 1 else "")
        if isinstance(inputs, list) and any(
            (i if isinstance(i, dict) else i.model_dump()).get("type") == "function_call_output"
            for i in inputs
        ):
            await block_at("after_tool")
        return await step.get_response(*args, **kwargs)

    async def stream_response(self, *args: Any, **kwargs: Any) -> Any:  # the bot streams runs
        inputs = kwargs.get("input", args[1] if len(args) > 1 else "")
        if isinstance(inputs, list) and any(
            (i if isinstance(i, dict) else i.model_dump()).get("type") == "function_call_output"
            for i in inputs
        ):
            await block_at("after_tool")
        async for event in ScriptedModel([ModelStep.respond(_respond)]).stream_response(
            *args, **kwargs
        ):
            if getattr(event, "type", "") != "response.output_text.delta":
                yield event
                continue
            half = len(event.delta) // 2  # an answer written in two pieces
            yield event.model_copy(update={"delta": event.delta[:half]})
            await asyncio.sleep(0.1)
            await block_at("during_answer")
            yield event.model_copy(update={"delta": event.delta[half:]})


class BlockingHooks(AgentHooks[Any]):
    async def on_tool_start(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool
    ) -> None:
        await block_at("before_tool")


@function_tool(needs_approval=True)
async def delete_logs(path: str) -> str:
    """Delete logs under a path."""
    record("start", tool="delete_logs", path=path)
    await block_at("during_tool")
    record("end", tool="delete_logs", path=path)
    return f"deleted {path}"


agents = {
    "ops": Agent(name="ops", model=StatelessModel(), tools=[delete_logs], hooks=BlockingHooks())
}
