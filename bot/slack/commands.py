"""Parsing `/agent` command text."""

from __future__ import annotations

from dataclasses import dataclass

from bot.slack.text import unescape


@dataclass(frozen=True)
class AgentCommand:
    """What `/agent ...` asked for: help, or a task for an agent (None = the default agent)."""

    help: bool = False
    agent: str | None = None
    task: str = ""


def parse(text: str) -> AgentCommand:
    """`/agent <task>`, `/agent run <agent> <task>` or `/agent help`; the task is decoded from
    Slack's `&amp;`/`&lt;`/`&gt;` so that it reaches the agent exactly as typed."""
    raw = unescape(text).strip()
    if raw == "" or raw.lower() in ("help", "-h", "--help"):
        return AgentCommand(help=True)
    head, _, rest = raw.partition(" ")
    if head.lower() == "run":
        name, _, task = rest.strip().partition(" ")
        if not name:
            return AgentCommand(help=True)
        return AgentCommand(agent=name, task=task.strip())
    return AgentCommand(task=raw)


def help_text(agents: list[str], default: str) -> str:
    names = ", ".join(f"`{n}`" for n in agents)
    return (
        "*Start an agent run here:*\n"
        f"• `/agent <task>`: run the default agent (`{default}`) on a task\n"
        "• `/agent run <agent> <task>`: run a named agent\n"
        "• `/agent help`: this message\n"
        f"Agents: {names}\n"
        "When an agent wants to use a sensitive tool, an approval message is posted here; an "
        "approver decides with its buttons, or rejects with a reason by replying `reject: why` "
        "(or `deny: why`, any case) in its thread. A reply that only starts with the word "
        '("deny list looks fine") is not a rejection: the bot asks its author privately. '
        "Other replies by approvers are kept as comments and pre-fill the Reject reason."
    )
