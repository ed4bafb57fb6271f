"""Parsing `/agent` command text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bot.slack.text import unescape

Action = Literal["run", "help", "cancel", "status", "list", "grants", "revoke"]

# Words that name a command; anything else is a task for the default agent.
COMMANDS = ("run", "help", "cancel", "status", "list", "grants", "revoke")


@dataclass(frozen=True)
class AgentCommand:
    """What `/agent ...` asked for: help, a task for an agent (None = the default agent), or a
    command about runs (`cancel <run id>`, `status <run id>`, `list`)."""

    help: bool = False
    agent: str | None = None
    task: str = ""
    action: Action = "run"
    run_id: str = ""
    grant: str = ""  # `revoke <agent>::<tool>`


def parse(text: str) -> AgentCommand:
    """`/agent <task>`, `/agent run <agent> <task>`, `/agent cancel <run id>`,
    `/agent status <run id>`, `/agent list` or `/agent help`; the task is decoded from Slack's
    `&amp;`/`&lt;`/`&gt;` so that it reaches the agent exactly as typed.

    `cancel` and `status` take exactly one word (the run id, checked by the service), so a
    task such as "cancel the old cron jobs" still reaches the default agent; `list` alone."""
    raw = unescape(text).strip()
    if raw == "" or raw.lower() in ("help", "-h", "--help"):
        return AgentCommand(help=True, action="help")
    head, _, rest = raw.partition(" ")
    word, rest = head.lower(), rest.strip()
    if word == "run":
        name, _, task = rest.partition(" ")
        if not name:
            return AgentCommand(help=True, action="help")
        return AgentCommand(agent=name, task=task.strip())
    if word in ("cancel", "status") and len(rest.split()) <= 1:
        return AgentCommand(action=word, run_id=rest.strip("`").lower())  # type: ignore[arg-type]
    if word == "list" and not rest:
        return AgentCommand(action="list")
    if word == "grants" and not rest:
        return AgentCommand(action="grants")
    if word == "revoke" and len(rest.split()) == 1 and "::" in rest:
        return AgentCommand(action="revoke", grant=rest.strip("`"))
    return AgentCommand(task=raw)


def help_text(agents: list[str], default: str) -> str:
    names = ", ".join(f"`{n}`" for n in agents)
    return (
        "*Start an agent run here:*\n"
        f"• `/agent <task>`: run the default agent (`{default}`) on a task\n"
        "• `/agent run <agent> <task>`: run a named agent (or mention the bot: "
        "`@approval-bot <task>`)\n"
        "• a reply in a run's thread: the agent takes it up as the run's next turn, with the "
        "whole conversation (its starter, and whom the policy names)\n"
        "• `/agent status <run id>`: where a run stands, what it waits for, with links\n"
        "• `/agent list`: the calls waiting for your decision, then this channel's unfinished "
        "runs\n"
        "• `/agent cancel <run id>`: cancel a run (its starter, or an approver of its channel "
        "or its calls); the run message's *Cancel run* button does the same\n"
        "• `/agent grants`: this channel's grants (an Always approve that lasts, where the "
        "policy allows it); `/agent revoke <agent>::<tool>` takes one back\n"
        "• `/agent help`: this message\n"
        f"Agents: {names}\n"
        "The run id is shown on the run message (`run 0123456789abcdef`). Your App Home (the "
        "bot's *Home* tab) lists the calls waiting for your decision and your recent runs; when "
        "a call of your run is decided or your run ends, the bot tells you in one message.\n"
        "When an agent wants to use a sensitive tool, an approval message is posted here; an "
        "approver decides with its buttons, or rejects with a reason by replying `reject: why` "
        "(or `deny: why`, any case) in its thread. A reply that only starts with the word "
        '("deny list looks fine") is not a rejection: the bot asks its author privately. '
        "Other replies by approvers are kept as comments and pre-fill the Reject reason."
    )
