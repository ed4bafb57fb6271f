"""The Bolt app: Slack's requests in, service calls out.

Identity (team, enterprise, user) is read only from the signed request through Bolt's context.
Every listener acknowledges first and then works inside a guard that cannot leak an exception
into Bolt (an exception after `ack()` can turn into a spurious "unhandled request").
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt import BoltResponse
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext
from slack_sdk.web.async_client import AsyncWebClient

from bot.service.approvals import ApprovalService, RejectForm
from bot.service.ports import Actor
from bot.service.replies import ConfirmReject, Reply
from bot.slack import asks, blocks
from bot.slack.commands import help_text, parse
from bot.slack.home import HomePublisher
from bot.slack.text import unescape

log = logging.getLogger(__name__)

COMMAND = "/agent"
TRY_AGAIN = "Something went wrong on the bot's side and nothing was changed. Try again in a moment."


def _actor(context: AsyncBoltContext, body: dict[str, Any] | None = None) -> Actor:
    """Who acted, from the signed request only (Bolt's context, or the signed body's `user`
    for interactions: a modal submission's context carries the app's team, not the user's)."""
    user = (body or {}).get("user")
    user_team = user.get("team_id") if isinstance(user, dict) else None
    return Actor(
        team_id=str(user_team or context.team_id or ""),
        user_id=str(context.user_id or ""),
        enterprise_id=str(context.enterprise_id or ""),
    )


async def _guard(what: str, work: Awaitable[Any], tell: Callable[[str], Awaitable[Any]]) -> None:
    try:
        await work
    except Exception:
        log.exception("failed to handle %s", what)
        try:
            await tell(TRY_AGAIN)
        except Exception:
            log.exception("could not report the failure of %s", what)


class _SameTokenFilter(logging.Filter):
    """Bolt reads SLACK_BOT_TOKEN from the environment even when it is given a client, and then
    warns on every start that the token "will be unused". The bot hands Bolt its own client on
    purpose (the Slack host in use, metered calls) built from that same token, so the warning
    says nothing true; it is dropped when, and only when, the two tokens are the same."""

    def __init__(self, token: str | None) -> None:
        super().__init__()
        self.token = token

    def filter(self, record: logging.LogRecord) -> bool:
        same = self.token is not None and os.environ.get("SLACK_BOT_TOKEN") == self.token
        return not (same and "`token` will be unused" in record.getMessage())


def _quiet_token_warning(token: str | None) -> None:
    bolt_log = logging.getLogger(f"slack_bolt.{AsyncApp.__name__}")
    for old in [f for f in bolt_log.filters if isinstance(f, _SameTokenFilter)]:
        bolt_log.removeFilter(old)
    bolt_log.addFilter(_SameTokenFilter(token))


def build_app(
    *,
    client: AsyncWebClient,
    signing_secret: str | None,
    service: ApprovalService,
    socket_mode: bool = False,
    home: HomePublisher | None = None,
) -> AsyncApp:
    """Wire Slack's commands, button clicks, modal submissions and thread replies."""
    _quiet_token_warning(client.token)
    app = AsyncApp(
        client=client,
        signing_secret=signing_secret,
        request_verification_enabled=not socket_mode,
        # Listeners only authorize, record and schedule: they finish well within Slack's three
        # seconds, so the response can wait for them and nothing runs untracked after it.
        process_before_response=True,
        raise_error_for_unhandled_request=False,
        ignoring_self_events_enabled=True,
    )
    store = service.store
    notifier = service.notifier

    @app.middleware
    async def drop_duplicate_events(
        body: dict[str, Any], next: Callable[[], Awaitable[Any]]
    ) -> Any:
        event_id = body.get("event_id") if body.get("type") == "event_callback" else None
        try:
            first = not event_id or await store.first_delivery("event", str(event_id))
        except Exception:  # Redis unreachable: handle it (decisions are idempotent anyway)
            log.warning("could not check event %s for duplicates", event_id)
            first = True
        if not first:
            log.info("ignored duplicate delivery of event %s", event_id)
            return BoltResponse(status=200, body="")  # acknowledged, and nothing else
        return await next()

    @app.command(COMMAND)
    async def on_command(ack: AsyncAck, command: dict[str, Any], context: AsyncBoltContext) -> None:
        parsed = parse(str(command.get("text", "")))
        if parsed.help:
            await ack(
                response_type="ephemeral",
                text=help_text(service.agent_names(), service.engine.registry.default_name),
            )
            return
        if parsed.action in ("cancel", "status", "list"):
            try:
                answer = await asks.answer(
                    service, _actor(context), str(command.get("channel_id", "")), parsed
                )
            except Exception:
                log.exception("could not answer /agent %s", parsed.action)
                answer = {"response_type": "ephemeral", "text": TRY_AGAIN}
            await ack(**answer)
            return
        try:
            reply = await service.start_run(
                _actor(context),
                str(command.get("channel_id", "")),
                parsed.agent,
                parsed.task,
                delivery_id=str(command.get("trigger_id", "")),
            )
        except Exception:
            log.exception("could not start a run")
            await ack(response_type="ephemeral", text=TRY_AGAIN)
            return
        if reply.ok:
            await ack()
        else:
            await ack(response_type="ephemeral", text=reply.text)

    async def on_decision(ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext) -> None:
        await ack()
        action = (body.get("actions") or [{}])[0]
        approval_id = str(action.get("value", ""))
        action_id = str(action.get("action_id", ""))
        actor = _actor(context, body)
        channel = str((body.get("channel") or {}).get("id", "")) or str(context.channel_id or "")

        async def tell(text: str) -> None:
            service.later("answer privately", notifier.tell(channel, actor.user_id, text))

        async def work() -> None:
            if action_id in (blocks.REJECT, blocks.ALWAYS_REJECT):
                always = action_id == blocks.ALWAYS_REJECT
                form = await service.reject_form(actor, approval_id, always=always)
                if isinstance(form, RejectForm):
                    view = blocks.reject_modal(form.call, always=always, prefill=form.prefill)
                    await client.views_open(trigger_id=body["trigger_id"], view=view.to_dict())
                    return
                reply = form
            else:
                reply = await service.decide(
                    actor, approval_id, approve=True, always=action_id == blocks.ALWAYS_APPROVE
                )
            if not reply.ok:
                await tell(reply.text)

        await _guard(action_id, work(), tell)

    for action_id in blocks.DECISION_ACTIONS:
        app.action(action_id)(on_decision)

    def private_button(
        what: str, answer: Callable[[Actor, str, str], Awaitable[Reply]]
    ) -> Callable[..., Awaitable[None]]:
        """A listener for a button whose value is an opaque server-side id: `answer(actor,
        value, action_id)` acts, and whatever it says goes privately to the clicker."""

        async def listener(ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext) -> None:
            await ack()
            action = (body.get("actions") or [{}])[0]
            actor = _actor(context, body)
            channel = str((body.get("channel") or {}).get("id", "")) or str(
                context.channel_id or ""
            )

            async def tell(text: str) -> None:
                service.later("answer privately", notifier.tell(channel, actor.user_id, text))

            async def work() -> None:
                reply = await answer(
                    actor, str(action.get("value", "")), str(action.get("action_id", ""))
                )
                if reply.text:
                    await tell(reply.text)

            await _guard(what, work(), tell)

        return listener

    async def review(actor: Actor, review_id: str, action_id: str) -> Reply:
        choice = "done" if action_id == blocks.REVIEW_DONE else "rerun"
        return await service.resolve_review(actor, review_id, action=choice)

    async def reply_answer(actor: Actor, reply_id: str, action_id: str) -> Reply:
        reject = action_id == blocks.REPLY_REJECT
        return await service.confirm_reply(actor, reply_id, reject=reject)

    async def cancel(actor: Actor, run_id: str, action_id: str) -> Reply:
        reply = await service.cancel_run(actor, run_id)
        return Reply(True) if reply.ok else reply  # the run message shows who cancelled

    app.action(blocks.CANCEL_RUN)(private_button("cancel", cancel))
    for action_id in (blocks.REVIEW_DONE, blocks.REVIEW_RERUN):
        app.action(action_id)(private_button("review", review))
    for action_id in (blocks.REPLY_REJECT, blocks.REPLY_KEEP):
        app.action(action_id)(private_button("reply answer", reply_answer))

    @app.view(blocks.REJECT_MODAL)
    async def on_reject_submit(
        ack: AsyncAck, body: dict[str, Any], view: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        try:
            meta = json.loads(view.get("private_metadata") or "{}")
            approval_id = str(meta.get("approval_id", ""))
            always = meta.get("always") is True
            values = view.get("state", {}).get("values", {})
            reason = values.get(blocks.REASON_BLOCK, {}).get(blocks.REASON_INPUT, {}).get("value")
            reply = await service.decide(
                _actor(context, body),
                approval_id,
                approve=False,
                always=always,
                reason=reason or "",
            )
        except Exception:
            log.exception("could not apply a rejection")
            await ack(response_action="errors", errors={blocks.REASON_BLOCK: TRY_AGAIN})
            return
        if reply.ok:
            await ack()
        else:
            await ack(response_action="errors", errors={blocks.REASON_BLOCK: reply.text})

    @app.event("app_home_opened")
    async def on_home_opened(event: dict[str, Any], context: AsyncBoltContext) -> None:
        if home is None or event.get("tab", "home") != "home":
            return
        signed = _actor(context)
        actor = Actor(signed.team_id, str(event.get("user", "")), signed.enterprise_id)
        try:
            await home.opened(actor)  # published by the Home publisher, within its pacing
        except Exception:
            log.exception("could not record that %s opened the App Home", actor.user_id)

    @app.event("message")
    async def on_message(event: dict[str, Any], context: AsyncBoltContext) -> None:
        thread_ts = event.get("thread_ts")
        if (
            not thread_ts
            or event.get("bot_id")
            or event.get("subtype") not in (None, "thread_broadcast")
        ):
            return
        signed = _actor(context)
        # In shared channels the author's own workspace is the event's `user_team`/`team`.
        team = str(event.get("user_team") or event.get("team") or signed.team_id)
        actor = Actor(
            team_id=team, user_id=str(event.get("user", "")), enterprise_id=signed.enterprise_id
        )
        channel = str(event.get("channel", ""))

        async def tell(text: str) -> None:
            service.later(
                "answer privately",
                notifier.tell(channel, actor.user_id, text, thread_ts=str(thread_ts)),
            )

        async def work() -> None:
            reply = await service.thread_reply(
                actor, channel, str(thread_ts), unescape(str(event.get("text", "")))
            )
            if isinstance(reply, ConfirmReject):
                text, body = blocks.confirm_reply(reply.reply_id, reply.text)
                await client.chat_postEphemeral(
                    channel=channel,
                    user=actor.user_id,
                    thread_ts=str(thread_ts),
                    text=text,
                    blocks=blocks.as_dicts(body),
                )
            elif reply is not None and not reply.ok:
                await tell(reply.text)

        await _guard("thread reply", work(), tell)

    return app
