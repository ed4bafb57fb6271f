"""An agent for the queue benchmark: answers at once, no network (a stateless scripted model)."""

from __future__ import annotations

from typing import Any

from agents import Agent, Model, ModelResponse
from agents.testing import ScriptedModel, assistant_message


class InstantModel(Model):
    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        return await ScriptedModel([[assistant_message("done")]]).get_response(*args, **kwargs)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        return ScriptedModel([[assistant_message("done")]]).stream_response(*args, **kwargs)


agents = {"bench": Agent(name="bench", model=InstantModel())}
