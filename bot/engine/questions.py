"""`ask_human`: a tool the agent calls to ask a person a question; the answer is its result.

It is a function tool with `needs_approval=True`, so the run pauses on it like on any gated
call (a `ToolApprovalItem`, stored, expiring, durable). The answer is not carried by the SDK's
approval: the bot records it server-side with the call (decided exactly once, in Redis), and
when the run resumes the engine approves the call and makes the recorded answers of that resume
visible to the tool through a context variable (`ANSWERS`), keyed by the call id. The tool then
really runs and returns the answer, so the model's transcript is truthful: the tool was called
and this is what it returned (not a "rejection" whose message happens to be the answer, which
the SDK would record as a refused call and may wrap as an error for programmatic callers). A
question nobody answered expires like any call: the call is rejected with "No one answered
within …", which is true (the tool did not run, nobody answered).
"""

from __future__ import annotations

import contextvars
import json
from typing import Any

from agents import FunctionTool, ToolApprovalItem, function_tool
from agents.tool_context import ToolContext

QUESTION_KIND = "question"
TOOL_NAME = "ask_human"
# A question longer than this is cut on its card (the whole text stays in the snapshot).
QUESTION_LIMIT = 2000
NO_ANSWER = "(no answer was recorded for this question)"

# call id -> the answer recorded for it, for the execution resuming with those answers.
ANSWERS: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "approval_bot_answers", default=None
)


async def _ask_human(ctx: ToolContext[Any], question: str) -> str:
    """Ask a person in the run's Slack channel a question and wait for their answer.

    Use it when you need a fact, a preference or a confirmation only a person can give,
    instead of guessing. The answer is returned as text.

    Args:
        question: The question, in one or a few sentences, with the context a person needs.
    """
    answers = ANSWERS.get() or {}
    return answers.get(str(ctx.tool_call_id), NO_ANSWER)


ask_human: FunctionTool = function_tool(
    _ask_human, name_override=TOOL_NAME, needs_approval=True, strict_mode=True
)
ask_human._approval_bot_question = True  # type: ignore[attr-defined]


def is_question_tool(tool: Any) -> bool:
    """Whether `tool` is the bot's `ask_human` (not merely a tool of that name)."""
    return bool(getattr(tool, "_approval_bot_question", False))


def is_question(item: ToolApprovalItem) -> bool:
    """Whether an interruption is a call of the bot's `ask_human` by its agent."""
    agent = item.agent
    if agent is None or (item.name or "") != TOOL_NAME:
        return False
    return any(
        is_question_tool(tool) and getattr(tool, "name", "") == TOOL_NAME
        for tool in getattr(agent, "tools", [])
    )


def question_of(arguments: str) -> str:
    """The question asked, from the call's JSON arguments (the raw text if they are not JSON)."""
    try:
        data = json.loads(arguments)
    except (ValueError, TypeError):
        return arguments
    if isinstance(data, dict) and isinstance(data.get("question"), str):
        return str(data["question"])
    return arguments
