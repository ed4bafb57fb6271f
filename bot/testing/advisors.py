"""Advisors without a model service: one a test scripts, and the sandbox's rule-of-thumb one.

    from bot.testing.advisors import demo_advisor, scripted_advisor

    advisor = scripted_advisor(lambda card: {"risk": "high", "rationale": "Deletes data.",
                                             "concerns": ["irreversible"]})
    async with BotHarness(redis_url, agents, policy, advisor=advisor) as bot: ...

An advisor is an Agents SDK agent with `output_type=AdviceOutput` (`bot.engine.advisor`); these
give it a model that answers from the card it is shown (`card`: the tool, kind, agent,
tool_description, arguments as displayed and agent_reason). `answer` may return the advice (a
dict), any other text (an answer out of shape), raise (a failing advisor), or be a coroutine
function (one that waits on an event never set is an advisor that never answers).
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from agents import Agent, Model, ModelResponse, Usage
from agents.testing import ModelStep, ScriptedModel, assistant_message

from bot.engine.advisor import AdviceOutput

Card = dict[str, Any]
Answer = Callable[[Card], Any] | Callable[[Card], Awaitable[Any]]


def card_of(model_input: Any) -> Card:
    """The card an advisor was shown (`shown_to_advisor`'s JSON, after its question)."""
    text = model_input if isinstance(model_input, str) else json.dumps(model_input)
    if not isinstance(model_input, str):
        for item in model_input:
            if isinstance(item, dict) and isinstance(item.get("content"), str):
                text = item["content"]
    start = text.find("\n\n{")
    try:
        found = json.loads(text[start + 2 :]) if start >= 0 else {}
    except ValueError:
        found = {}
    return found if isinstance(found, dict) else {}


class AdvisorModel(Model):
    """A model that answers each advisor run with `answer(card)`; `cards`: what it was shown."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.cards: list[Card] = []

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        model_input = kwargs.get("input", args[1] if len(args) > 1 else "")
        card = card_of(model_input)
        self.cards.append(card)
        said = self.answer(card)
        if inspect.isawaitable(said):
            said = await said
        text = said if isinstance(said, str) else json.dumps(said)
        # What a model would bill, roughly: a token for four characters in, and out.
        shown = json.dumps(model_input) if not isinstance(model_input, str) else model_input
        used = Usage(requests=1, input_tokens=len(shown) // 4, output_tokens=len(text) // 4,
                     total_tokens=(len(shown) + len(text)) // 4)  # fmt: skip
        step = ScriptedModel([ModelStep(output=[assistant_message(text)], usage=used)])
        return await step.get_response(*args, **kwargs)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("an advisor is run, not streamed")


def scripted_advisor(answer: Answer, name: str = "advisor") -> Agent[Any]:
    """An advisor agent whose model answers `answer(card)` (see the module's docstring)."""
    return Agent(
        name=name,
        instructions="Give a second opinion on a tool call.",
        model=AdvisorModel(answer),
        output_type=AdviceOutput,
    )


_HIGH = re.compile(r"\b(delete|drop|destroy|truncate|wipe|purge|rm|revoke|prod|production|admin)",
                   re.IGNORECASE)  # fmt: skip
_MEDIUM = re.compile(r"\b(restart|deploy|scale|write|update|send|migrate|rotate|grant)",
                     re.IGNORECASE)  # fmt: skip


def rule_of_thumb(card: Card) -> dict[str, Any]:
    """A careful reader's first impression, from words alone: what destroys or touches
    production is high risk, what changes something medium, the rest low."""
    said = f"{card.get('tool', '')} {card.get('arguments', '')}".replace("_", " ")
    high = sorted({m.lower() for m in _HIGH.findall(said)})
    medium = sorted({m.lower() for m in _MEDIUM.findall(said)})
    if high:
        return {
            "risk": "high",
            "rationale": f"It says {', '.join(high)}: what it does may be hard to undo.",
            "concerns": [f"{word}: check the target first" for word in high][:3],
        }
    if medium:
        return {
            "risk": "medium",
            "rationale": f"It changes a running system ({', '.join(medium)}).",
            "concerns": ["check the arguments' target", "have a way back"],
        }
    return {"risk": "low", "rationale": "It reads or changes nothing that matters.",
            "concerns": []}  # fmt: skip


def demo_advisor() -> Agent[Any]:
    """The sandbox's offline advisor: `rule_of_thumb`, no network, no key."""
    return scripted_advisor(rule_of_thumb, name="demo-advisor")
