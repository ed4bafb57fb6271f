"""Block Kit for the agent's questions (`ask_human`): the question's card, its Answer button
and modal, and its reminders. The question and the answer are untrusted text: quoted, escaped
and bounded through `bot.slack.text`, like every argument on an approval card."""

from __future__ import annotations

import json

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ContextBlock,
    InputBlock,
    PlainTextInputElement,
    PlainTextObject,
    SectionBlock,
)
from slack_sdk.models.views import View

from bot.service.decisions.questions import ANSWER_LIMIT
from bot.service.policy.rules import human
from bot.slack.blocks import ANSWER_BLOCK, ANSWER_INPUT, ANSWER_MODAL
from bot.slack.render.base import (
    asked_by,
    describe_principals,
    expiry_text,
    md,
    mention,
    person,
    principals_of,
    run_link,
    slack_date,
)
from bot.slack.render.controls import answer_button
from bot.slack.text import blockquote, escape, inline, truncate
from bot.store.records import CallRecord, CallStatus, RunRecord

QUESTION_TITLE = "Question from the agent"
QUESTION_SHOWN = 2500  # characters of the question on its card (quoted, with a note if cut)


def _answerers(call: CallRecord) -> str:
    principals = principals_of(call.approvers)
    principals += [p for p in call.escalated_principals() if p not in principals]
    return describe_principals(principals) or "the run's starter and approvers"


def _outcome(call: CallRecord, decided_at: str) -> str:
    if call.status == CallStatus.APPROVED:
        by = person(call.decided_by) if call.decided_by else "someone"
        return (
            f":speech_balloon: *Answered* by {by} {decided_at}:\n"
            f"{blockquote(call.reason, QUESTION_SHOWN)}"  # a quote: never the bot's words
        )
    if call.status == CallStatus.EXPIRED:
        return (
            f":hourglass: *Expired* {decided_at}: no one answered within "
            f"{human(call.expire_after)} (the agent was told)."
        )
    if call.status == CallStatus.CANCELLED:
        by = f" by {person(call.decided_by)}" if call.decided_by and call.via == "cancel" else ""
        return f":no_entry_sign: *Cancelled*{by} {decided_at}, with its run: not answered."
    return f":grey_question: {inline(call.status.capitalize(), 40)} {decided_at}"


def question_message(run: RunRecord, call: CallRecord, decided_at: str) -> tuple[str, list[Block]]:
    """A question's card: the agent asks, whose run it is, the question (quoted), one context
    line (who may answer, expiry, the run), and Answer; once settled, who answered and the
    answer (or that it expired or was cancelled) in place of Answer."""
    title = f":question: *{QUESTION_TITLE} {inline(call.agent)}* · {asked_by(run, call)}"
    question = blockquote(call.arguments, QUESTION_SHOWN, call.arguments_chars)
    blocks: list[Block] = [SectionBlock(text=md(title)), SectionBlock(text=md(question))]
    shown_question, _ = truncate(" ".join(call.arguments.split()), 150)
    if call.decided:
        when = f"at {slack_date(call.decided_at)}" if call.decided_at else decided_at
        blocks.append(SectionBlock(text=md(_outcome(call, when))))
        link = run_link(run)
        if link:
            blocks.append(ContextBlock(elements=[md(link)]))
        if call.status == CallStatus.APPROVED:
            return f"Question answered by {person(call.decided_by)}", blocks
        return f"Question {call.status}: {escape(shown_question)}", blocks
    parts = [
        f"Who may answer: {_answerers(call)}",
        expiry_text(call),
        run_link(run),
        "answer below or in this thread",
    ]
    blocks.append(ContextBlock(elements=[md(" · ".join(p for p in parts if p))]))
    blocks.append(ActionsBlock(block_id="question", elements=[answer_button(call)]))
    return f"{QUESTION_TITLE} {inline(call.agent)}: {escape(shown_question)}", blocks


def answer_modal(call: CallRecord) -> View:
    """The modal behind Answer: the question, and a required, multi-line answer."""
    question = blockquote(call.arguments, QUESTION_SHOWN, call.arguments_chars)
    return View(
        type="modal",
        callback_id=ANSWER_MODAL,
        title=PlainTextObject(text="Answer the agent"),
        submit=PlainTextObject(text="Send answer"),
        close=PlainTextObject(text="Cancel"),
        private_metadata=json.dumps({"approval_id": call.approval_id, "channel": call.channel_id}),
        blocks=[
            SectionBlock(text=md(f"*{inline(call.agent)}* asks:\n{question}")),
            InputBlock(
                block_id=ANSWER_BLOCK,
                label=PlainTextObject(text="Your answer"),
                element=PlainTextInputElement(
                    action_id=ANSWER_INPUT,
                    multiline=True,
                    max_length=ANSWER_LIMIT,
                    placeholder="The agent receives this text as the result of its question.",
                ),
            ),
        ],
    )


def question_reminder(call: CallRecord, which: str) -> str:
    """A reminder (or the escalation) in a question's thread: who may answer (mentioned, so
    they are notified), and when it expires."""
    expires = f" It expires {slack_date(call.expires_at)}." if call.expires_at else ""
    if which == "escalated":
        return (
            f":rotating_light: No answer after {human(call.escalate_after)}: escalated to "
            + ", ".join(mention(p) for p in call.escalated_principals())
            + f", who may now answer this question too.{expires}"
        )
    named = principals_of(call.approvers)
    everyone = list(dict.fromkeys([*named, *call.escalated_principals()]))
    of = f" ({which} of {call.remind_max})" if call.remind_max > 1 else ""
    return (
        f":bell: Reminder{of}: the agent's question is still waiting for an answer from "
        + (", ".join(mention(p) for p in everyone) or "its answerers")
        + f".{expires}"
    )
