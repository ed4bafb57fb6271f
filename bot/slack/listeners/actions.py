"""Button clicks: acknowledged at once, worked on in tracked background tasks.

Approve (once or always) is decided after a lull in Slack's requests; Reject opens the reject
form, and Edit the edit form, with the click's trigger id (three seconds); the other buttons
(cancel a run, settle a review, answer a question about a reply) carry an opaque server-side
id and their answer goes privately to the clicker."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext
from slack_sdk.errors import SlackApiError
from slack_sdk.models.views import View

from bot.service.decisions.batch import BatchForm
from bot.service.decisions.edits import EditForm
from bot.service.decisions.grants import ChooseScope
from bot.service.ports import Actor
from bot.service.replies import RejectForm, Reply, TypeToConfirm
from bot.slack import blocks
from bot.slack.api.metered import error_code
from bot.slack.listeners.deps import ListenerDeps
from bot.slack.listeners.shared import RECEIVED, Listener, actor_of, channel_of, left
from bot.slack.render import batch, details, grants, modals
from bot.slack.replies import shown

log = logging.getLogger(__name__)

FORM_LATE = (
    "The reject form could not be opened in time (Slack allows three seconds after a click). "
    "Click the button again."
)
FORM_FAILED = (
    "The reject form could not be opened (Slack answered `{error}`). Click the button again."
)
CONFIRM_FAILED = (
    "The confirmation form could not be opened (Slack answered `{error}`). Click Approve again."
)
CONFIRM_LATE = (
    "This call needs typed confirmation, and its form could not be opened in time (Slack "
    "allows three seconds after a click). Click Approve again."
)
SCOPE_FAILED = (
    "The Always approve form could not be opened (Slack answered `{error}`). Click Always "
    "approve again."
)
SCOPE_LATE = (
    "The Always approve form could not be opened in time (Slack allows three seconds after a "
    "click). Click Always approve again."
)
# A modal must be opened within three seconds of the click, with the click's trigger id.
TRIGGER_SECONDS = 2.8

# What a private button does: `answer(actor, value, action_id)`, said privately to the clicker.
Answer = Callable[[ListenerDeps, Actor, str, str], Awaitable[Reply]]


def register(app: AsyncApp, deps: ListenerDeps) -> None:
    """Listen to every button the bot's messages carry."""
    decision = on_decision(deps)
    for action_id in blocks.DECISION_ACTIONS:
        app.action(action_id)(decision)
    details_listener = on_details(deps)
    app.action(blocks.MORE)(
        on_menu(
            {
                blocks.ALWAYS_APPROVE: decision,
                blocks.ALWAYS_REJECT: decision,
                blocks.SHOW_CONVERSATION: details_listener,
                blocks.SHOW_ALL: details_listener,
            }
        )
    )
    app.action(blocks.EDIT)(on_edit(deps))
    app.action(blocks.CANCEL_RUN)(on_private_button(deps, "cancel", cancel))
    review_listener = on_private_button(deps, "review", review)
    for action_id in (blocks.REVIEW_DONE, blocks.REVIEW_RERUN):
        app.action(action_id)(review_listener)
    for action_id in (blocks.SHOW_ALL, blocks.SHOW_CONVERSATION):
        app.action(action_id)(details_listener)
    app.action(blocks.GRANT_REVOKE)(on_private_button(deps, "revoke grant", revoke_grant))
    batch_listener = on_batch(deps)
    for action_id in blocks.BATCH_ACTIONS:
        app.action(action_id)(batch_listener)
    app.action(blocks.HOME_PICK)(on_pick)
    reply_listener = on_private_button(deps, "reply answer", reply_answer)
    for action_id in (blocks.REPLY_REJECT, blocks.REPLY_KEEP):
        app.action(action_id)(reply_listener)


def on_menu(listeners: dict[str, Listener]) -> Listener:
    """A card's More menu: the chosen option is the button it names (`blocks.menu_choice`),
    handled by that button's own listener; an option naming no such button changes nothing."""

    async def on_menu(ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext) -> None:
        action = (body.get("actions") or [{}])[0]
        chosen = str((action.get("selected_option") or {}).get("value", ""))
        action_id, value = blocks.menu_choice(chosen)
        listener = listeners.get(action_id)
        if listener is None:
            await ack()
            return
        clicked = {**action, "type": "button", "action_id": action_id, "value": value}
        await listener(ack, {**body, "actions": [clicked]}, context)

    return on_menu


def on_decision(deps: ListenerDeps) -> Listener:
    """Approve, Always approve, Reject, Always reject on an approval card."""

    async def on_decision(ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext) -> None:
        await ack()
        action = (body.get("actions") or [{}])[0]
        approval_id = str(action.get("value", ""))
        action_id = str(action.get("action_id", ""))
        actor = actor_of(context, body)
        tell = deps.teller(channel_of(body, context), actor.user_id)

        if action_id in (blocks.REJECT, blocks.ALWAYS_REJECT):
            received = float(context.get(RECEIVED) or asyncio.get_running_loop().time())
            always = action_id == blocks.ALWAYS_REJECT
            trigger_id = str(body.get("trigger_id", ""))
            form = open_reject_form(deps, actor, approval_id, trigger_id, always, received, tell)
            deps.in_background(action_id, context, form, tell, still_working=None)
            return

        received = float(context.get(RECEIVED) or asyncio.get_running_loop().time())
        trigger_id = str(body.get("trigger_id", ""))
        approval_id, version = blocks.approval_and_version(approval_id)
        # The only request in flight: the click's read goes now, answered while its ack is
        # written; the judgement and the decision still wait for the lull (acks first).
        read = deps.service.read_ahead(approval_id) if deps.foreground.alone() else None

        async def work() -> None:
            reply = await deps.service.approve(
                actor, approval_id, always=action_id == blocks.ALWAYS_APPROVE, version=version,
                read=read,
            )  # fmt: skip
            if isinstance(reply, TypeToConfirm):  # nothing decided: ask for the typed value
                view = modals.confirm_modal(reply.call, expected=reply.expected, what=reply.what)
                await open_modal(deps, trigger_id, view, received + TRIGGER_SECONDS, tell,
                                 late=CONFIRM_LATE, failed=CONFIRM_FAILED)  # fmt: skip
            elif isinstance(reply, ChooseScope):  # nothing decided: ask the grant's scope
                await open_modal(deps, trigger_id, grants.grant_modal(reply),
                                 received + TRIGGER_SECONDS, tell, late=SCOPE_LATE,
                                 failed=SCOPE_FAILED)  # fmt: skip
            elif not reply.ok:
                tell(shown(reply))

        deps.in_background(action_id, context, work(), tell, defer=True)

    return on_decision


BATCH_LATE = (
    "The form could not be opened in time (Slack allows three seconds after a click). Click "
    "the button again."
)
BATCH_FAILED = "The form could not be opened (Slack answered `{error}`). Click the button again."


def picked(body: dict[str, Any]) -> list[tuple[str, str]]:
    """The calls chosen in the App Home's checkboxes (approval id, version each): only what
    the signed request's view state holds, each judged again by the service."""
    values = ((body.get("view") or {}).get("state") or {}).get("values") or {}
    chosen = []
    for block_id, inputs in values.items():
        if not str(block_id).startswith(blocks.HOME_PICK_BLOCK) or not isinstance(inputs, dict):
            continue
        for option in (inputs.get(blocks.HOME_PICK) or {}).get("selected_options") or []:
            if isinstance(option, dict):
                chosen.append(blocks.approval_and_version(str(option.get("value", ""))))
    return chosen


async def on_pick(ack: AsyncAck) -> None:
    """A box ticked on the App Home: nothing to do until Approve or Reject selected."""
    await ack()


def on_batch(deps: ListenerDeps) -> Listener:
    """Approve all or Reject all on a paused run's message (the value: the run's id), or
    Approve selected, Reject selected on the App Home (the boxes ticked): the form listing
    each call opens with the click's trigger id (three seconds)."""

    async def on_batch(ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext) -> None:
        await ack()
        action = (body.get("actions") or [{}])[0]
        action_id = str(action.get("action_id", ""))
        approve = action_id in (blocks.BATCH_APPROVE, blocks.HOME_BATCH_APPROVE)
        actor = actor_of(context, body)
        channel = channel_of(body, context)
        tell = deps.teller(channel, actor.user_id)
        received = float(context.get(RECEIVED) or asyncio.get_running_loop().time())
        trigger_id = str(body.get("trigger_id", ""))
        if action_id in (blocks.BATCH_APPROVE, blocks.BATCH_REJECT):
            checked = deps.service.pause_batch_form(
                actor, str(action.get("value", "")), approve=approve
            )
        else:
            checked = deps.service.batch_form(actor, picked(body), approve=approve)

        async def work() -> None:
            deadline = received + TRIGGER_SECONDS

            async def refused(form: BatchForm | Reply) -> None:
                if isinstance(form, Reply) and not form.ok:
                    tell(shown(form))

            form = await deps.by_deadline("batch form", deadline, checked, refused)
            if form is None:
                tell(BATCH_LATE)
            elif isinstance(form, Reply):
                await refused(form)
            else:
                view = batch.batch_modal(form, channel)
                await open_modal(deps, trigger_id, view, deadline, tell, late=BATCH_LATE,
                                 failed=BATCH_FAILED)  # fmt: skip

        deps.in_background(action_id, context, work(), tell, still_working=None)

    return on_batch


async def open_reject_form(
    deps: ListenerDeps, actor: Actor, approval_id: str, trigger_id: str, always: bool,
    received: float, tell: Callable[[str], None],
) -> None:  # fmt: skip
    """Check the call, then open the reject modal with the click's trigger id, which Slack
    accepts for three seconds only: late or refused, the clicker is told so."""
    deadline = received + TRIGGER_SECONDS

    async def refused(form: RejectForm | Reply) -> None:
        if isinstance(form, Reply) and not form.ok:
            tell(shown(form))

    checked = deps.service.reject_form(actor, approval_id, always=always)
    form = await deps.by_deadline("reject form", deadline, checked, refused)
    if form is None:
        tell(FORM_LATE)
        return
    if isinstance(form, Reply):
        await refused(form)
        return
    view = modals.reject_modal(form.call, always=always, prefill=form.prefill)
    await open_modal(deps, trigger_id, view, deadline, tell, late=FORM_LATE, failed=FORM_FAILED)


async def open_modal(
    deps: ListenerDeps, trigger_id: str, view: View, deadline: float,
    tell: Callable[[str], None], *, late: str, failed: str,
) -> None:  # fmt: skip
    """views.open with a click's trigger id by `deadline`; late or refused, the clicker is
    told so."""
    if left(deadline) <= 0:
        tell(late)
        return
    try:
        await asyncio.wait_for(
            deps.client.views_open(trigger_id=trigger_id, view=view.to_dict()), left(deadline)
        )
    except TimeoutError:
        log.warning("views.open did not answer within the click's three seconds")
        tell(late)
    except Exception as exc:
        if isinstance(exc, SlackApiError):
            error = error_code(exc, default="an error")
        else:  # the connection failed: Slack's answer is unknown
            error = type(exc).__name__
        log.warning("views.open failed: %s", error)
        tell(failed.format(error=error))


DETAILS_LATE = (
    "The window could not be opened in time (Slack allows three seconds after a click). "
    "Click the button again."
)


def on_details(deps: ListenerDeps) -> Listener:
    """Show all and Show conversation on a card: a modal opened with the click's trigger id
    (three seconds), for a person who may see the card; anyone else is told privately."""

    async def on_details(ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext) -> None:
        await ack()
        action = (body.get("actions") or [{}])[0]
        approval_id = str(action.get("value", ""))
        conversation = str(action.get("action_id", "")) == blocks.SHOW_CONVERSATION
        actor = actor_of(context, body)
        tell = deps.teller(channel_of(body, context), actor.user_id)
        received = float(context.get(RECEIVED) or asyncio.get_running_loop().time())
        trigger_id = str(body.get("trigger_id", ""))
        work = open_details(deps, actor, approval_id, trigger_id, conversation, received, tell)
        deps.in_background("details", context, work, tell, still_working=None)

    return on_details


async def open_details(
    deps: ListenerDeps, actor: Actor, approval_id: str, trigger_id: str, conversation: bool,
    received: float, tell: Callable[[str], None],
) -> None:  # fmt: skip
    """Read what the modal shows through the service (which checks who may see it), then open
    it with the click's trigger id: late, refused or failed, the clicker is told so."""
    deadline = received + TRIGGER_SECONDS

    async def refused(found: Any) -> None:
        if isinstance(found, Reply) and not found.ok:
            tell(shown(found))

    checked: Any = (
        deps.service.conversation(actor, approval_id)
        if conversation
        else deps.service.whole_call(actor, approval_id)
    )
    found = await deps.by_deadline("details", deadline, checked, refused)
    if found is None:
        tell(DETAILS_LATE)
        return
    if isinstance(found, Reply):
        await refused(found)
        return
    view = details.conversation_modal(found) if conversation else details.whole_call_modal(found)
    try:
        await asyncio.wait_for(
            deps.client.views_open(trigger_id=trigger_id, view=view.to_dict()), left(deadline)
        )
    except TimeoutError:
        log.warning("views.open did not answer within the click's three seconds")
        tell(DETAILS_LATE)
    except Exception as exc:
        error = (
            error_code(exc, default="an error")
            if isinstance(exc, SlackApiError)
            else type(exc).__name__
        )
        log.warning("views.open failed: %s", error)
        tell(f"The window could not be opened (Slack answered `{error}`). Click again.")


def on_edit(deps: ListenerDeps) -> Listener:
    """Edit on an approval card: check the call, then open the Edit modal within the click's
    three seconds."""

    async def on_edit(ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext) -> None:
        await ack()
        action = (body.get("actions") or [{}])[0]
        actor = actor_of(context, body)
        tell = deps.teller(channel_of(body, context), actor.user_id)
        received = float(context.get(RECEIVED) or asyncio.get_running_loop().time())
        form = open_edit_form(
            deps, actor, str(action.get("value", "")), str(body.get("trigger_id", "")),
            received, tell,
        )  # fmt: skip
        deps.in_background(blocks.EDIT, context, form, tell, still_working=None)

    return on_edit


async def open_edit_form(
    deps: ListenerDeps, actor: Actor, approval_id: str, trigger_id: str, received: float,
    tell: Callable[[str], None],
) -> None:  # fmt: skip
    """Check the call, then open the Edit modal with the click's trigger id (three seconds)."""
    deadline = received + TRIGGER_SECONDS

    async def refused(form: EditForm | Reply) -> None:
        if isinstance(form, Reply) and not form.ok:
            tell(shown(form))

    form = await deps.by_deadline(
        "edit form", deadline, deps.service.edit_form(actor, approval_id), refused
    )
    if form is None:
        tell(FORM_LATE.replace("reject form", "edit form"))
        return
    if isinstance(form, Reply):
        await refused(form)
        return
    await _open_modal(deps, trigger_id, modals.edit_modal(form).to_dict(), deadline, tell)


async def _open_modal(
    deps: ListenerDeps, trigger_id: str, view: dict[str, Any], deadline: float,
    tell: Callable[[str], None],
) -> None:  # fmt: skip
    """views.open before `deadline`; late or refused, the clicker is told so."""
    try:
        opening = deps.client.views_open(trigger_id=trigger_id, view=view)
        await asyncio.wait_for(opening, left(deadline))
    except TimeoutError:
        log.warning("views.open did not answer within the click's three seconds")
        tell(FORM_LATE.replace("reject form", "form"))
    except Exception as exc:
        if isinstance(exc, SlackApiError):
            error = error_code(exc, default="an error")
        else:  # the connection failed: Slack's answer is unknown
            error = type(exc).__name__
        log.warning("views.open failed: %s", error)
        tell(FORM_FAILED.format(error=error).replace("reject form", "form"))


def on_private_button(deps: ListenerDeps, what: str, answer: Answer) -> Listener:
    """A listener for a button whose value is an opaque server-side id: `answer(deps, actor,
    value, action_id)` acts, and whatever it says goes privately to the clicker."""

    async def listener(ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext) -> None:
        await ack()
        action = (body.get("actions") or [{}])[0]
        actor = actor_of(context, body)
        tell = deps.teller(channel_of(body, context), actor.user_id)

        async def work() -> None:
            value, action_id = str(action.get("value", "")), str(action.get("action_id", ""))
            reply = await answer(deps, actor, value, action_id)
            if reply.said:
                tell(shown(reply))

        deps.in_background(what, context, work(), tell, defer=True)

    return listener


async def review(deps: ListenerDeps, actor: Actor, review_id: str, action_id: str) -> Reply:
    """Mark done, or Run again, on a review message."""
    choice = "done" if action_id == blocks.REVIEW_DONE else "rerun"
    return await deps.service.resolve_review(actor, review_id, action=choice)


async def reply_answer(deps: ListenerDeps, actor: Actor, reply_id: str, action_id: str) -> Reply:
    """Its author's answer to "does your reply reject the call?"."""
    reject = action_id == blocks.REPLY_REJECT
    return await deps.service.confirm_reply(actor, reply_id, reject=reject)


async def revoke_grant(deps: ListenerDeps, actor: Actor, grant_id: str, action_id: str) -> Reply:
    """Revoke on the App Home: the button carries only the grant's opaque id."""
    return await deps.service.revoke_grant_id(actor, grant_id)


async def cancel(deps: ListenerDeps, actor: Actor, run_id: str, action_id: str) -> Reply:
    """Cancel run: the run message shows who cancelled, so success says nothing."""
    reply = await deps.service.cancel_run(actor, run_id)
    return Reply(True) if reply.ok else reply
