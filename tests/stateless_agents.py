"""Agents for tests that run the bot as a real process: the scripted model decides from its
input alone, so any process can continue a run; tools append to the file in $TEST_LEDGER."""

from __future__ import annotations

import json
import os
from typing import Any

from agents import Agent, Model, ModelResponse, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call


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
        return await ScriptedModel([ModelStep.respond(_respond)]).get_response(*args, **kwargs)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        return ScriptedModel([ModelStep.respond(_respond)]).stream_response(*args, **kwargs)


@function_tool(needs_approval=True)
def delete_logs(path: str) -> str:
    """Delete logs under a path."""
    with open(os.environ["TEST_LEDGER"], "a", encoding="utf-8") as ledger:
        ledger.write(json.dumps({"tool": "delete_logs", "path": path}) + "\n")
    return f"deleted {path}"


agents = {"ops": Agent(name="ops", model=StatelessModel(), tools=[delete_logs])}
