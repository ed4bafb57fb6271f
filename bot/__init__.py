"""slack-approval-bot: a human in the loop of OpenAI Agents SDK runs, through Slack.

`from bot import ask_human` gives the tool agents call to ask a person a question
(`bot.engine.questions`); it is imported on first use, so `import bot.x` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bot.engine.questions import ask_human as ask_human

__all__ = ["ask_human"]


def __getattr__(name: str) -> Any:
    if name == "ask_human":
        from bot.engine.questions import ask_human

        return ask_human
    raise AttributeError(f"module 'bot' has no attribute {name!r}")
