"""The Bolt app: Slack's requests in, service calls out.

Identity (team, enterprise, user) is read only from the signed request through Bolt's context.
Every listener acknowledges first and then works inside a guard that cannot leak an exception
into Bolt (an exception after `ack()` can turn into a spurious "unhandled request").

Slack's request is answered within the ack budget whatever Redis or Slack do (Slack counts a
late answer as a failure): clicks and thread replies are answered at once and worked on in
tracked background tasks; a command or a modal submission waits for its result until the
budget is spent, then says it is still working and the result is told privately. Work still
unfinished at the budget is told "still working" once; its outcome is told as usual.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from slack_bolt import BoltResponse
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext
from slack_bolt.middleware.authorization.async_single_team_authorization import (
    AsyncSingleTeamAuthorization,
)
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.service.approvals import ApprovalService, RejectForm
from bot.service.foreground import Foreground
from bot.service.ports import Actor
from bot.service.replies import ConfirmReject, Reply
from bot.slack import asks, blocks
from bot.slack.commands import help_text, parse
from bot.slack.home import HomePublisher
from bot.slack.text import unescape

log = logging.getLogger(__name__)

COMMAND = "/agent"
TRY_AGAIN = "Something went wrong on the bot's side and nothing was changed. Try again in a moment."
STILL_WORKING = "Still working on your click; the card will show the result."
STILL_WORKING_COMMAND = "Still working on your command; you will see the result here."
STILL_WORKING_REJECTION = "Still working on your rejection; the card will show the result."
FORM_LATE = (
    "The reject form could not be opened in time (Slack allows three seconds after a click). "
    "Click the button again."
)
FORM_FAILED = (
    "The reject form could not be opened (Slack answered `{error}`). Click the button again."
)

ACK_BUDGET_SECONDS = 1.5  # the default of APPROVAL_BOT_ACK_BUDGET_SECONDS
# A modal must be opened within three seconds of the click, with the click's trigger id.
TRIGGER_SECONDS = 2.8
# Context keys our app sets on every request: when it arrived, and by when listeners answer.
RECEIVED = "approval_bot_received"
DEADLINE = "approval_bot_deadline"

R = TypeVar("R")
Spawn = Callable[[Coroutine[Any, Any, None], str], None]


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


async def _guard(what: str, work: Awaitable[Any], tell: Callable[[str], Any]) -> None:
    try:
        await work
    except Exception:
        log.exception("failed to handle %s", what)
        try:
            tell(TRY_AGAIN)
        except Exception:
            log.exception("could not report the failure of %s", what)


def _left(deadline: float) -> float:
    return max(0.0, deadline - asyncio.get_running_loop().time())


class _BudgetedApp(AsyncApp):  # type: ignore[misc]
    """Bolt, answering every request within `budget` seconds.

    Listeners answer by the `DEADLINE` they find in their context. Should anything still hold
    the answer past the budget (Bolt's own first `auth.test`, a middleware waiting), Slack gets
    an empty 200 (a valid acknowledgement of every kind of request) and the dispatch goes on in
    a tracked task."""

    def __init__(
        self, *, budget: float, spawn: Spawn, foreground: Foreground, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.budget = budget
        self._spawn = spawn
        self._foreground = foreground
        # Listeners answer a little before the budget, so that their answer is the one sent.
        self._margin = min(0.1, budget / 4)

    async def async_dispatch(self, req: AsyncBoltRequest) -> BoltResponse:
        """Answer one request (HTTP and Socket Mode alike), counted as in flight until then:
        deferrable work waits for a lull (see `Foreground`)."""
        with self._foreground.request():
            return await self._dispatch(req)

    async def _dispatch(self, req: AsyncBoltRequest) -> BoltResponse:
        loop = asyncio.get_running_loop()
        received = loop.time()
        req.context[RECEIVED] = received
        req.context[DEADLINE] = received + self.budget - self._margin
        task = asyncio.ensure_future(super().async_dispatch(req))
        await asyncio.wait({task}, timeout=self.budget)
        if task.done():
            return task.result()

        async def finish() -> None:
            response = await task
            log.warning(
                "answered a Slack request after the %.1f s budget with an empty 200; the bot's "
                "own answer (%d), %.1f s after the request arrived, was not sent",
                self.budget, response.status, loop.time() - received,
            )  # fmt: skip

        self._spawn(finish(), "late request")
        return BoltResponse(status=200, body="")


def remember_auth_test(app: AsyncApp, reply: Any) -> None:
    """Give Bolt the bot's own `auth.test` answer: otherwise Bolt asks Slack on the first
    request it handles, and that request's answer waits for Slack (a slow Slack would turn it
    into the budget's empty 200, and the request would be lost)."""
    for middleware in getattr(app, "_async_middleware_list", []):
        if isinstance(middleware, AsyncSingleTeamAuthorization):
            middleware.auth_test_result = middleware.auth_test_result or reply


async def _by_deadline(
    spawn: Spawn,
    name: str,
    deadline: float,
    work: Coroutine[Any, Any, R],
    late: Callable[[R], Coroutine[Any, Any, None]],
) -> R | None:
    """Run `work` (which returns something, never None) in a tracked task: its result when it
    finishes by `deadline`; otherwise None, and `late(result)` runs when it does finish."""
    task = asyncio.ensure_future(work)
    missed = False

    async def watch() -> None:
        result = await task
        if missed:
            await late(result)

    spawn(watch(), name)
    await asyncio.wait({task}, timeout=_left(deadline))
    if task.done():
        return task.result()
    missed = True
    return None


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
    ack_budget: float = ACK_BUDGET_SECONDS,
    home: HomePublisher | None = None,
) -> AsyncApp:
    """Wire Slack's commands, button clicks, modal submissions and thread replies."""
    _quiet_token_warning(client.token)
    app = _BudgetedApp(
        budget=ack_budget,
        spawn=service.spawn,
        foreground=service.foreground,
        client=client,
        signing_secret=signing_secret,
        request_verification_enabled=not socket_mode,
        # The response waits for the listener, and listeners answer by the ack budget: work
        # that takes longer goes on in tasks the service tracks (and drains on shutdown), so
        # nothing runs untracked after a response.
        process_before_response=True,
        raise_error_for_unhandled_request=False,
        ignoring_self_events_enabled=True,
    )
    store = service.store
    notifier = service.notifier

    def deadline_of(context: AsyncBoltContext) -> float:
        """When the listener must have answered (set by the app as each request arrives)."""
        deadline = context.get(DEADLINE)
        if deadline is None:
            return asyncio.get_running_loop().time() + ack_budget
        return float(deadline)

    def teller(channel: str, user: str, thread_ts: str = "") -> Callable[[str], None]:
        """Tell `user` something privately, in a tracked background task."""

        def tell(text: str) -> None:
            service.later("answer privately", notifier.tell(channel, user, text, thread_ts))

        return tell

    def in_background(
        what: str, context: AsyncBoltContext, work: Awaitable[Any], tell: Callable[[str], None],
        still_working: str | None = STILL_WORKING, defer: bool = False,
    ) -> None:  # fmt: skip
        """Do `work` in a tracked task (Slack's request is answered without waiting for it);
        if it is still going at the ack deadline, say `still_working` once. `defer` (a click's
        decision): the work first waits for a lull in Slack's requests, and then counts as one
        of them, so that what waits for a lull (resumes, deliveries) waits for it too. Acks
        come first, decisions next (the clicker waits for theirs), the rest after."""
        deadline = deadline_of(context)

        async def run() -> None:
            loop = asyncio.get_running_loop()
            note = None
            if still_working:
                note = loop.call_later(max(0.0, deadline - loop.time()), tell, still_working)
            try:
                if not defer:
                    await _guard(what, work, tell)
                    return
                try:
                    await service.foreground.lull()
                except asyncio.CancelledError:  # shutting down: the work never starts
                    if isinstance(work, Coroutine):
                        work.close()
                    raise
                with service.foreground.request():
                    await _guard(what, work, tell)
            finally:
                if note is not None:
                    note.cancel()

        service.spawn(run(), what)

    @app.middleware
    async def drop_duplicate_events(
        body: dict[str, Any], context: AsyncBoltContext, next: Callable[[], Awaitable[Any]]
    ) -> Any:
        event_id = body.get("event_id") if body.get("type") == "event_callback" else None
        if not event_id:
            return await next()
        left = _left(deadline_of(context))
        try:
            first = await asyncio.wait_for(store.first_delivery("event", str(event_id)), left)
        except Exception:  # Redis unreachable or slow: handle it (decisions are idempotent)
            log.warning("could not check event %s for duplicates in time", event_id)
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
        actor = _actor(context)
        channel = str(command.get("channel_id", ""))
        tell = teller(channel, actor.user_id)
        deadline = deadline_of(context)
        if parsed.action in ("cancel", "status", "list"):

            async def ask() -> dict[str, Any]:
                try:
                    return await asks.answer(service, actor, channel, parsed)
                except Exception:
                    log.exception("could not answer /agent %s", parsed.action)
                    return {"response_type": "ephemeral", "text": TRY_AGAIN}

            async def answer_late(answer: dict[str, Any]) -> None:
                await client.chat_postEphemeral(
                    channel=channel, user=actor.user_id, text=answer["text"],
                    blocks=answer.get("blocks"),
                )  # fmt: skip

            answer = await _by_deadline(service.spawn, "ask", deadline, ask(), answer_late)
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
                log.exception("could not start a run")
                return Reply(False, TRY_AGAIN)

        async def late(reply: Reply) -> None:
            if not reply.ok:
                tell(reply.text)

        reply = await _by_deadline(service.spawn, "command", deadline, start(), late)
        if reply is None:
            await ack(response_type="ephemeral", text=STILL_WORKING_COMMAND)
        elif reply.ok:
            await ack()
        else:
            await ack(response_type="ephemeral", text=reply.text)

    async def open_reject_form(
        actor: Actor, approval_id: str, trigger_id: str, always: bool, received: float,
        tell: Callable[[str], None],
    ) -> None:  # fmt: skip
        """Check the call, then open the reject modal with the click's trigger id, which
        Slack accepts for three seconds only: late or refused, the clicker is told so."""
        deadline = received + TRIGGER_SECONDS

        async def refused(form: RejectForm | Reply) -> None:
            if isinstance(form, Reply) and not form.ok:
                tell(form.text)

        form = await _by_deadline(
            service.spawn,
            "reject form",
            deadline,
            service.reject_form(actor, approval_id, always=always),
            refused,
        )
        if form is None:
            tell(FORM_LATE)
            return
        if isinstance(form, Reply):
            await refused(form)
            return
        view = blocks.reject_modal(form.call, always=always, prefill=form.prefill)
        try:
            await asyncio.wait_for(
                client.views_open(trigger_id=trigger_id, view=view.to_dict()), _left(deadline)
            )
        except TimeoutError:
            log.warning("views.open did not answer within the click's three seconds")
            tell(FORM_LATE)
        except Exception as exc:
            if isinstance(exc, SlackApiError):
                error = str(exc.response.get("error", "an error"))
            else:  # the connection failed: Slack's answer is unknown
                error = type(exc).__name__
            log.warning("views.open failed: %s", error)
            tell(FORM_FAILED.format(error=error))

    async def on_decision(ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext) -> None:
        await ack()
        action = (body.get("actions") or [{}])[0]
        approval_id = str(action.get("value", ""))
        action_id = str(action.get("action_id", ""))
        actor = _actor(context, body)
        channel = str((body.get("channel") or {}).get("id", "")) or str(context.channel_id or "")
        tell = teller(channel, actor.user_id)

        if action_id in (blocks.REJECT, blocks.ALWAYS_REJECT):
            received = float(context.get(RECEIVED) or asyncio.get_running_loop().time())
            always = action_id == blocks.ALWAYS_REJECT
            form = open_reject_form(
                actor, approval_id, str(body.get("trigger_id", "")), always, received, tell
            )
            in_background(action_id, context, form, tell, still_working=None)
            return

        async def work() -> None:
            reply = await service.decide(
                actor, approval_id, approve=True, always=action_id == blocks.ALWAYS_APPROVE
            )
            if not reply.ok:
                tell(reply.text)

        in_background(action_id, context, work(), tell, defer=True)

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
            tell = teller(channel, actor.user_id)

            async def work() -> None:
                reply = await answer(
                    actor, str(action.get("value", "")), str(action.get("action_id", ""))
                )
                if reply.text:
                    tell(reply.text)

            in_background(what, context, work(), tell, defer=True)

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
        actor = _actor(context, body)
        try:
            meta = json.loads(view.get("private_metadata") or "{}")
            approval_id = str(meta.get("approval_id", ""))
            always = meta.get("always") is True
            channel = str(meta.get("channel") or "")
            values = view.get("state", {}).get("values", {})
            reason = values.get(blocks.REASON_BLOCK, {}).get(blocks.REASON_INPUT, {}).get("value")
        except Exception:
            log.exception("could not read a reject form")
            await ack(response_action="errors", errors={blocks.REASON_BLOCK: TRY_AGAIN})
            return

        async def reject() -> Reply:
            try:
                return await service.decide(
                    actor, approval_id, approve=False, always=always, reason=reason or ""
                )
            except Exception:
                log.exception("could not apply a rejection")
                return Reply(False, TRY_AGAIN)

        async def late(reply: Reply) -> None:
            if reply.ok:
                return
            where = channel
            if not where:  # a form opened before forms carried their channel
                call = await store.get_call(approval_id)
                where = call.channel_id if call is not None else ""
            if where:
                teller(where, actor.user_id)(reply.text)

        deadline = deadline_of(context)
        reply = await _by_deadline(service.spawn, "reject form", deadline, reject(), late)
        if reply is None:
            await ack()  # the modal closes; the outcome shows on the card, or is told
            if channel:
                teller(channel, actor.user_id)(STILL_WORKING_REJECTION)
        elif reply.ok:
            await ack()
        else:
            await ack(response_action="errors", errors={blocks.REASON_BLOCK: reply.text})

    @app.event("app_home_opened")
    async def on_home_opened(event: dict[str, Any], context: AsyncBoltContext) -> None:
        if home is None or event.get("tab", "home") != "home":
            return
        signed = _actor(context)
        actor = Actor(signed.team_id, str(event.get("user", "")), signed.enterprise_id)

        async def record() -> None:
            try:
                await home.opened(actor)  # published by the Home publisher, within its pacing
            except Exception:
                log.exception("could not record that %s opened the App Home", actor.user_id)

        service.spawn(record(), "app home opened")  # answered at once, like every event

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
        tell = teller(channel, actor.user_id, str(thread_ts))

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
                tell(reply.text)

        # Slack's request is answered at once; a reply needs no "still working" note.
        in_background("thread reply", context, work(), tell, still_working=None)

    return app
