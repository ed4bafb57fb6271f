"""Events: the App Home opened, replies in an approval card's or a run's thread, and reactions
on a card. Each is answered at once; the work goes on in tracked background tasks."""

from __future__ import annotations

import logging
import re
from typing import Any

from slack_bolt.async_app import AsyncApp, AsyncBoltContext

from bot.outage import log_failure
from bot.service.ports import Actor
from bot.service.replies import ConfirmReject
from bot.slack.commands import parse
from bot.slack.listeners.deps import ListenerDeps
from bot.slack.listeners.shared import Listener, actor_of
from bot.slack.render.base import as_dicts
from bot.slack.render.notices import confirm_reply
from bot.slack.replies import shown
from bot.slack.text import unescape

log = logging.getLogger(__name__)


def register(app: AsyncApp, deps: ListenerDeps) -> None:
    """Listen to `app_home_opened`, `message`, `app_mention` and `reaction_added` events."""
    app.event("app_home_opened")(on_home_opened(deps))
    app.event("message")(on_message(deps))
    app.event("app_mention")(on_mention(deps))
    app.event("reaction_added")(on_reaction(deps))


def on_reaction(deps: ListenerDeps) -> Listener:
    """A reaction added to a message: on a card, with `APPROVAL_BOT_REACTIONS` on, a decision
    of the person who reacted on that card's call (the service judges it as a click); a
    refusal is told to them privately, in the card's thread."""

    async def on_reaction(
        event: dict[str, Any], body: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        item = event.get("item") or {}
        if not isinstance(item, dict) or item.get("type") != "message":
            return
        signed = actor_of(context)
        # Slack's reaction_added names no team: in a channel shared with other organizations
        # the reactor may be of any of them, so their team is unknown ("", which the service
        # refuses), never taken for the installation's.
        shared = body.get("is_ext_shared_channel") is True
        team = str(event.get("user_team") or ("" if shared else signed.team_id))
        actor = Actor(team, str(event.get("user", "")), signed.enterprise_id)
        channel, ts = str(item.get("channel", "")), str(item.get("ts", ""))
        tell = deps.teller(channel, actor.user_id, ts)

        async def who(user: str) -> tuple[str, bool] | None:
            """The reactor's own team and whether they are a bot, from `users.info`."""
            try:
                found = await deps.client.users_info(user=user)
            except Exception:
                log_failure(log, "could not look up who reacted (%s)", user)
                return None
            profile = found.get("user") or {}
            team = str(profile.get("team_id") or "")
            bot = bool(profile.get("is_bot") or profile.get("is_app_user"))
            return (team, bot) if team else None

        async def work() -> None:
            emoji = str(event.get("reaction", ""))
            reply = await deps.service.reaction(actor, channel, ts, emoji, who)
            if reply is not None and not reply.ok:
                tell(shown(reply))

        deps.in_background("reaction", context, work(), tell, still_working=None, defer=True)

    return on_reaction


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
    """A message in a thread: a decision or a comment on the card the thread belongs to, or a
    follow-up to the agent of the run whose thread it is."""

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
            said = addressed_text(unescape(str(event.get("text", ""))), context.bot_user_id)
            ts = str(event.get("ts", ""))
            reply = await deps.service.thread_reply(actor, channel, str(thread_ts), said, ts=ts)
            if reply is None:  # not a card's thread: maybe a run's (a follow-up to its agent)
                reply = await deps.service.follow_up(actor, channel, str(thread_ts), said, ts=ts)
                if reply is not None and reply.ok and reply.text:
                    tell(shown(reply))  # queued: said privately
            if isinstance(reply, ConfirmReject):
                text, body = confirm_reply(reply.reply_id, reply.text)
                await deps.client.chat_postEphemeral(
                    channel=channel,
                    user=actor.user_id,
                    thread_ts=str(thread_ts),
                    text=text,
                    blocks=as_dicts(body),
                )
            elif reply is not None and not reply.ok:
                tell(shown(reply))

        # Slack's request is answered at once; a reply needs no "still working" note.
        deps.in_background("thread reply", context, work(), tell, still_working=None)

    return on_message


LEADING_MENTIONS = re.compile(r"^(\s*<@[UW][A-Z0-9]+(\|[^>]*)?>)+\s*")


def addressed_text(text: str, bot_user_id: str | None) -> str:
    """A thread message that begins by mentioning the bot is also an `app_mention`: whichever
    of the two Slack delivers first is the one taken, so both read it the same way, without
    its leading mentions (the agent hears `name them`, not `<@UBOT> name them`)."""
    if bot_user_id and re.match(rf"\s*<@{re.escape(bot_user_id)}[|>]", text):
        return LEADING_MENTIONS.sub("", text).strip()
    return text


def on_mention(deps: ListenerDeps) -> Listener:
    """The bot @mentioned: in a run's thread, a follow-up to its agent (as a plain reply is:
    the same message also comes as a `message` event, and is taken once); in an approval
    card's thread, nothing more than the reply it is; anywhere else, a task, as `/agent
    <task>` (or `run <agent> <task>`) is, under the same checks."""

    async def on_mention(event: dict[str, Any], context: AsyncBoltContext) -> None:
        if event.get("bot_id"):
            return
        signed = actor_of(context)
        team = str(event.get("user_team") or event.get("team") or signed.team_id)
        actor = Actor(team, str(event.get("user", "")), signed.enterprise_id)
        channel, ts = str(event.get("channel", "")), str(event.get("ts", ""))
        thread_ts = str(event.get("thread_ts") or "")
        said = LEADING_MENTIONS.sub("", unescape(str(event.get("text", "")))).strip()
        tell = deps.teller(channel, actor.user_id, thread_ts)

        async def work() -> None:
            if thread_ts:
                if await deps.records.approval_for_message(channel, thread_ts) is not None:
                    return  # a reply on a card: the `message` event decides what it is
                reply = await deps.service.follow_up(actor, channel, thread_ts, said, ts=ts)
                if reply is not None:
                    if reply.text:
                        tell(shown(reply))
                    return
            parsed = parse(said)
            if parsed.action != "run" or parsed.help:
                tell(f"Mention me with a task (or `run <agent> <task>`), e.g. {MENTION_EXAMPLE}.")
                return
            started = await deps.service.start_run(
                actor, channel, parsed.agent, parsed.task, delivery_id=f"mention:{channel}:{ts}"
            )
            if not started.ok:
                tell(shown(started))

        deps.in_background("mention", context, work(), tell, still_working=None)

    return on_mention


MENTION_EXAMPLE = "`@approval-bot restart the api service`"
