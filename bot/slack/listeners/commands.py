"""The `/agent` command: help at once; a question about runs or a new run answered within the
ack budget, or "still working" and the answer told privately when it comes."""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext

from bot.outage import log_failure
from bot.service.replies import Reply
from bot.slack import asks
from bot.slack.commands import help_text, parse
from bot.slack.listeners.deps import ListenerDeps
from bot.slack.listeners.shared import TRY_AGAIN, Listener, actor_of
from bot.slack.replies import shown

log = logging.getLogger(__name__)

COMMAND = "/agent"
STILL_WORKING_COMMAND = "Still working on your command; you will see the result here."


def register(app: AsyncApp, deps: ListenerDeps) -> None:
    """Listen to `/agent`."""
    app.command(COMMAND)(on_agent(deps))


def on_agent(deps: ListenerDeps) -> Listener:
    """The `/agent` listener, bound to `deps`."""
    service = deps.service

    async def on_command(ack: AsyncAck, command: dict[str, Any], context: AsyncBoltContext) -> None:
        parsed = parse(str(command.get("text", "")))
        if parsed.help:
            await ack(
                response_type="ephemeral", text=help_text(service.agent_names(), deps.default_agent)
            )
            return
        actor = actor_of(context)
        channel = str(command.get("channel_id", ""))
        tell = deps.teller(channel, actor.user_id)
        deadline = deps.deadline_of(context)
        if parsed.action in ("cancel", "status", "list", "grants", "revoke"):

            async def ask() -> dict[str, Any]:
                try:
                    return await asks.answer(service, actor, channel, parsed)
                except Exception:
                    log_failure(log, "could not answer /agent %s", parsed.action)
                    return {"response_type": "ephemeral", "text": TRY_AGAIN}

            async def answer_late(answer: dict[str, Any]) -> None:
                await deps.client.chat_postEphemeral(
                    channel=channel, user=actor.user_id, text=answer["text"],
                    blocks=answer.get("blocks"),
                )  # fmt: skip

            answer = await deps.by_deadline("ask", deadline, ask(), answer_late)
            if answer is None:
                await ack(response_type="ephemeral", text=STILL_WORKING_COMMAND)
            else:
                await ack(**answer)
            return

        async def start() -> Reply:
            try:
                return await service.start_run(
                    actor,
                    channel,
                    parsed.agent,
                    parsed.task,
                    delivery_id=str(command.get("trigger_id", "")),
                )
            except Exception:
                log_failure(log, "could not start a run")
                return Reply(False, TRY_AGAIN)

        async def late(reply: Reply) -> None:
            if not reply.ok:
                tell(shown(reply))

        reply = await deps.by_deadline("command", deadline, start(), late)
        if reply is None:
            await ack(response_type="ephemeral", text=STILL_WORKING_COMMAND)
        elif reply.ok:
            await ack()
        else:
            await ack(response_type="ephemeral", text=shown(reply))

    return on_command
