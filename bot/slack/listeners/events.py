"""Events: the App Home opened, and replies in an approval card's thread. Both are answered at
once; the work goes on in tracked background tasks."""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncApp, AsyncBoltContext

from bot.outage import log_failure
from bot.service.ports import Actor
from bot.service.replies import ConfirmReject
from bot.slack import blocks
from bot.slack.listeners.deps import ListenerDeps
from bot.slack.listeners.shared import Listener, actor_of
from bot.slack.replies import shown
from bot.slack.text import unescape

log = logging.getLogger(__name__)


def register(app: AsyncApp, deps: ListenerDeps) -> None:
    """Listen to `app_home_opened` and `message` events."""
    app.event("app_home_opened")(on_home_opened(deps))
    app.event("message")(on_message(deps))


def on_home_opened(deps: ListenerDeps) -> Listener:
    """Someone opened the bot's Home tab: the Home publisher publishes theirs, within its pacing."""

    async def on_home_opened(event: dict[str, Any], context: AsyncBoltContext) -> None:
        home = deps.home
        if home is None or event.get("tab", "home") != "home":
            return
        signed = actor_of(context)
        actor = Actor(signed.team_id, str(event.get("user", "")), signed.enterprise_id)

        async def record() -> None:
            try:
                await home.opened(actor)
            except Exception:
                log_failure(log, "could not record that %s opened the App Home", actor.user_id)

        deps.service.spawn(record(), "app home opened")  # answered at once, like every event

    return on_home_opened


def on_message(deps: ListenerDeps) -> Listener:
    """A message in a thread: maybe a decision or a comment on the card the thread belongs to."""

    async def on_message(event: dict[str, Any], context: AsyncBoltContext) -> None:
        thread_ts = event.get("thread_ts")
        if (
            not thread_ts
            or event.get("bot_id")
            or event.get("subtype") not in (None, "thread_broadcast")
        ):
            return
        signed = actor_of(context)
        # In shared channels the author's own workspace is the event's `user_team`/`team`.
        team = str(event.get("user_team") or event.get("team") or signed.team_id)
        actor = Actor(
            team_id=team, user_id=str(event.get("user", "")), enterprise_id=signed.enterprise_id
        )
        channel = str(event.get("channel", ""))
        tell = deps.teller(channel, actor.user_id, str(thread_ts))

        async def work() -> None:
            reply = await deps.service.thread_reply(
                actor,
                channel,
                str(thread_ts),
                unescape(str(event.get("text", ""))),
                ts=str(event.get("ts", "")),
            )
            if isinstance(reply, ConfirmReject):
                text, body = blocks.confirm_reply(reply.reply_id, reply.text)
                await deps.client.chat_postEphemeral(
                    channel=channel,
                    user=actor.user_id,
                    thread_ts=str(thread_ts),
                    text=text,
                    blocks=blocks.as_dicts(body),
                )
            elif reply is not None and not reply.ok:
                tell(shown(reply))

        # Slack's request is answered at once; a reply needs no "still working" note.
        deps.in_background("thread reply", context, work(), tell, still_working=None)

    return on_message
