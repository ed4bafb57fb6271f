"""Example agents: an ops assistant whose risky tools wait for a human in Slack.

Run the bot with `APPROVAL_BOT_AGENTS=bot.examples.agents:agents` and `OPENAI_API_KEY` set (the
OpenAI client also honours `OPENAI_BASE_URL`). The tools only describe what they would do, so the
example is safe to try; replace their bodies with real calls.
"""

from __future__ import annotations

import os
from typing import Any

from agents import Agent, RunContextWrapper, function_tool

from bot import ask_human
from bot.engine.context import RunContext

MODEL = os.environ.get("APPROVAL_BOT_MODEL", "gpt-4.1-mini")


@function_tool
def read_metrics(service: str) -> str:
    """Read the current error rate and latency of a service (no approval needed)."""
    return f"{service}: error rate 2.1%, p99 latency 840 ms (example data)"


@function_tool(needs_approval=True)
def restart_service(ctx: RunContextWrapper[RunContext], service: str) -> str:
    """Restart a service. Always needs a human's approval."""
    # ctx.context says who asked (user_id, from the signed request) and where (channel_id):
    # a real tool would record it; its result is plain text for the model, not Slack markup.
    return f"restarted {service} (example only)"


async def _many_replicas(ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str) -> bool:
    """Small changes go through; scaling beyond 5 replicas needs a human."""
    return int(params.get("replicas", 0)) > 5


@function_tool(needs_approval=_many_replicas)
def scale_service(service: str, replicas: int) -> str:
    """Scale a service to a number of replicas; more than 5 needs approval."""
    return f"scaled {service} to {replicas} replicas (example only)"


@function_tool(needs_approval=True)
def delete_path(path: str) -> str:
    """Delete files under a path. Always needs a human's approval."""
    return f"deleted {path} (example only)"


janitor = Agent[RunContext](
    name="janitor",
    instructions=(
        "You clean up disk space. Delete only what you are asked to delete; when you are not "
        "sure what may go, ask a person with ask_human instead of guessing."
    ),
    model=MODEL,
    tools=[delete_path, ask_human],
)

ops = Agent[RunContext](
    name="ops",
    instructions=(
        "You are an SRE assistant. Read metrics before acting. Restarting and large scaling "
        "need a human's approval, which the system asks for; if a call is rejected, do not "
        "retry it: explain what you would have done instead. When you need a fact only a "
        "person can give (which region, which service), ask with ask_human instead of guessing."
    ),
    model=MODEL,
    tools=[
        read_metrics,
        restart_service,
        scale_service,
        janitor.as_tool(tool_name="janitor", tool_description="Frees disk space on a host."),
        ask_human,  # the bot's tool: a person's answer comes back as its result
    ],
)

agents: dict[str, Agent[Any]] = {"ops": ops, "janitor": janitor}
