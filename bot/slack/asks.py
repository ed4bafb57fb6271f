"""`/agent cancel`, `/agent status` and `/agent list`: answered privately, in the command's
own response (ephemeral), from the service's records."""

from __future__ import annotations

from typing import Any

from bot.service.ports import Actor
from bot.service.replies import Reply
from bot.slack.commands import AgentCommand
from bot.slack.listeners.deps import Service
from bot.slack.render.overview import overview_message, status_message
from bot.slack.replies import shown


async def answer(
    service: Service, actor: Actor, channel: str, command: AgentCommand
) -> dict[str, Any]:
    """The ephemeral response (ack arguments) to a command about runs."""
    if command.action == "cancel":
        reply = await service.cancel_run(actor, command.run_id)
        return {"response_type": "ephemeral", "text": shown(reply)}
    if command.action == "grants":
        listed = await service.list_grants(actor, channel)
        return {"response_type": "ephemeral", "text": shown(listed)}
    if command.action == "revoke":
        reply = await service.revoke_grant(actor, channel, command.grant)
        return {"response_type": "ephemeral", "text": shown(reply)}
    if command.action == "status":
        found = await service.run_status(actor, command.run_id)
        if isinstance(found, Reply):
            return {"response_type": "ephemeral", "text": shown(found)}
        text, body = status_message(found)
        return {"response_type": "ephemeral", "text": text, "blocks": body}
    overview = await service.overview(actor, channel)
    if isinstance(overview, Reply):
        return {"response_type": "ephemeral", "text": shown(overview)}
    text, body = overview_message(overview)
    return {"response_type": "ephemeral", "text": text, "blocks": body}
