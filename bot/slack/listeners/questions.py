"""The agent's questions (`ask_human`): the Answer button opens the answer modal (with the
click's trigger id, three seconds), and the modal's submission records the answer, answered
within the ack budget (the modal closes, or shows why not) or told privately when late.
Thread replies on a question's card are answers too (`events.py` -> `service.thread_reply`)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any, Protocol, cast

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext
from slack_sdk.errors import SlackApiError

from bot.outage import log_failure
from bot.service.decisions.questions import AnswerForm
from bot.service.ports import Actor
from bot.service.replies import Reply
from bot.slack import blocks
from bot.slack.api.metered import error_code
from bot.slack.listeners.deps import ListenerDeps
from bot.slack.listeners.shared import RECEIVED, TRY_AGAIN, Listener, actor_of, channel_of, left
from bot.slack.render import question
from bot.slack.replies import shown

log = logging.getLogger(__name__)

# A modal must be opened within three seconds of the click, with the click's trigger id.
TRIGGER_SECONDS = 2.8
FORM_LATE = (
    "The answer form could not be opened in time (Slack allows three seconds after a click). "
    "Click Answer again, or reply in the question's thread."
)
FORM_FAILED = (
    "The answer form could not be opened (Slack answered `{error}`). Click Answer again, or "
    "reply in the question's thread."
)
STILL_WORKING_ANSWER = "Still working on your answer; the question's card will show the result."


class QuestionService(Protocol):
    """What these listeners ask of the application service (`ApprovalService`)."""

    async def answer_form(self, actor: Actor, approval_id: str) -> AnswerForm | Reply: ...

    async def answer(self, actor: Actor, approval_id: str, text: str) -> Reply: ...


def _service(deps: ListenerDeps) -> QuestionService:
    return cast(QuestionService, deps.service)


def register(app: AsyncApp, deps: ListenerDeps) -> None:
    """Listen to the Answer button and the answer modal's submissions."""
    app.action(blocks.ANSWER)(on_answer_click(deps))
    app.view(blocks.ANSWER_MODAL)(on_answer_submit(deps))


def on_answer_click(deps: ListenerDeps) -> Listener:
    """Answer on a question's card (or the App Home): check, then open the answer modal."""

    async def on_answer_click(
        ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        await ack()
        action = (body.get("actions") or [{}])[0]
        approval_id = str(action.get("value", ""))
        actor = actor_of(context, body)
        tell = deps.teller(channel_of(body, context), actor.user_id)
        received = float(context.get(RECEIVED) or asyncio.get_running_loop().time())
        trigger_id = str(body.get("trigger_id", ""))
        form = open_answer_form(deps, actor, approval_id, trigger_id, received, tell)
        deps.in_background("answer form", context, form, tell, still_working=None)

    return on_answer_click


async def open_answer_form(
    deps: ListenerDeps, actor: Actor, approval_id: str, trigger_id: str, received: float,
    tell: Callable[[str], None],
) -> None:  # fmt: skip
    """Check the question, then open the answer modal with the click's trigger id, which Slack
    accepts for three seconds only: late or refused, the clicker is told so."""
    deadline = received + TRIGGER_SECONDS

    async def refused(form: AnswerForm | Reply) -> None:
        if isinstance(form, Reply) and not form.ok:
            tell(shown(form))

    checked = _service(deps).answer_form(actor, approval_id)
    form = await deps.by_deadline("answer form", deadline, checked, refused)
    if form is None:
        tell(FORM_LATE)
        return
    if isinstance(form, Reply):
        await refused(form)
        return
    view = question.answer_modal(form.call)
    try:
        await asyncio.wait_for(
            deps.client.views_open(trigger_id=trigger_id, view=view.to_dict()), left(deadline)
        )
    except TimeoutError:
        log.warning("views.open did not answer within the click's three seconds")
        tell(FORM_LATE)
    except Exception as exc:
        if isinstance(exc, SlackApiError):
            error = error_code(exc, default="an error")
        else:  # the connection failed: Slack's answer is unknown
            error = type(exc).__name__
        log.warning("views.open failed: %s", error)
        tell(FORM_FAILED.format(error=error))


def on_answer_submit(deps: ListenerDeps) -> Listener:
    """The answer modal submitted: record the answer (the identity is the signed request's;
    the question is named by its opaque id only, and judged again here)."""

    async def on_answer_submit(
        ack: AsyncAck, body: dict[str, Any], view: dict[str, Any], context: AsyncBoltContext
    ) -> None:
        actor = actor_of(context, body)
        block = blocks.ANSWER_BLOCK
        try:
            meta = json.loads(view.get("private_metadata") or "{}")
            approval_id = str(meta.get("approval_id", ""))
            channel = str(meta.get("channel") or "")
            values = view.get("state", {}).get("values", {})
            text = values.get(block, {}).get(blocks.ANSWER_INPUT, {}).get("value")
        except Exception:
            log_failure(log, "could not read an answer form")
            await ack(response_action="errors", errors={block: TRY_AGAIN})
            return

        async def answer() -> Reply:
            try:
                return await _service(deps).answer(actor, approval_id, str(text or ""))
            except Exception:
                log_failure(log, "could not record an answer")
                return Reply(False, TRY_AGAIN)

        async def late(reply: Reply) -> None:
            if not reply.ok and channel:
                deps.teller(channel, actor.user_id)(shown(reply))

        reply = await deps.by_deadline("answer form", deps.deadline_of(context), answer(), late)
        if reply is None:
            await ack()  # the modal closes; the outcome shows on the card, or is told
            if channel:
                deps.teller(channel, actor.user_id)(STILL_WORKING_ANSWER)
        elif reply.ok:
            await ack()
        else:
            await ack(response_action="errors", errors={block: shown(reply)})

    return on_answer_submit
