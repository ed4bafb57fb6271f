"""Block Kit for the agent's questions (`ask_human`): the question's card, its Answer button
and modal, and its reminders. The question and the answer are untrusted text: quoted, escaped
and bounded through `bot.slack.text`, like every argument on an approval card."""

from __future__ import annotations

import json

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ContextBlock,
    InputBlock,
    MarkdownTextObject,
    PlainTextInputElement,
    PlainTextObject,
    SectionBlock,
)
from slack_sdk.models.views import View

from bot.service.policy import human
from bot.service.questions import ANSWER_LIMIT
from bot.slack.text import blockquote, escape, fit, inline, truncate
from bot.store.records import CallRecord, CallStatus, RunRecord

ANSWER = "question_answer"
ANSWER_MODAL = "question_answer_modal"
ANSWER_BLOCK = "answer"
ANSWER_INPUT = "answer_input"

QUESTION_TITLE = "Question from the agent"
SECTION_LIMIT = 3000
QUESTION_SHOWN = 2500  # characters of the question on its card (quoted, with a note if cut)


def _md(text: str) -> MarkdownTextObject:
    return MarkdownTextObject(text=fit(text, SECTION_LIMIT))


def answer_button(call: CallRecord) -> ButtonElement:
    """Answer: opens the answer modal (on the card, and on the App Home)."""
    return ButtonElement(text="Answer", action_id=ANSWER, value=call.approval_id, style="primary")


def _answerers(call: CallRecord) -> str:
    from bot.slack.blocks import describe_principals  # blocks imports this module

    try:
        principals = [str(p) for p in json.loads(call.approvers)] if call.approvers else []
    except ValueError:
        principals = []
    principals += [p for p in call.escalated_principals() if p not in principals]
    return describe_principals(principals) or "the run's starter and approvers"


def _outcome(call: CallRecord, decided_at: str) -> str:
    if call.status == CallStatus.APPROVED:
        by = f"<@{call.decided_by}>" if call.decided_by else "someone"
        return (
            f":speech_balloon: *Answered* by {by} at {decided_at}:\n"
            f"{blockquote(call.reason, QUESTION_SHOWN)}"  # a quote: never the bot's words
        )
    if call.status == CallStatus.EXPIRED:
        return (
            f":hourglass: *Expired* at {decided_at}: no one answered within "
            f"{human(call.expire_after)} (the agent was told)."
        )
    if call.status == CallStatus.CANCELLED:
        by = f" by <@{call.decided_by}>" if call.decided_by and call.via == "cancel" else ""
        return f":no_entry_sign: *Cancelled*{by} at {decided_at}, with its run: not answered."
    return f":grey_question: {inline(call.status.capitalize(), 40)} at {decided_at}"


def question_message(run: RunRecord, call: CallRecord, decided_at: str) -> tuple[str, list[Block]]:
    """A question's card: who asks, the question (quoted), who may answer, and Answer; once
    settled, who answered and the answer (or that it expired or was cancelled)."""
    from bot.slack.blocks import asked_by, permalink, timers_text  # blocks imports this module

    title = f":question: *{QUESTION_TITLE} {inline(call.agent)}*"
    task, _ = truncate(escape(" ".join(run.task.split())), 300)
    origin = f"{asked_by(run, call)}: _{task}_"
    if run.message_ts:
        origin += f"  ·  <{permalink(run.channel_id, run.message_ts)}|run thread>"
    question = blockquote(call.arguments, QUESTION_SHOWN, call.arguments_chars)
    blocks: list[Block] = [
        SectionBlock(text=_md(title)),
        ContextBlock(elements=[_md(origin)]),
        SectionBlock(text=_md(question)),
        ContextBlock(elements=[_md(f"Who may answer: {_answerers(call)}")]),
    ]
    shown_question, _ = truncate(" ".join(call.arguments.split()), 150)
    if call.decided:
        blocks.append(SectionBlock(text=_md(_outcome(call, decided_at))))
        if call.status == CallStatus.APPROVED:
            return f"Question answered by <@{call.decided_by}>", blocks
        return f"Question {call.status}: {escape(shown_question)}", blocks
    blocks.append(ActionsBlock(block_id="question", elements=[answer_button(call)]))
    timers = timers_text(call).replace("Reminds approvers", "Reminds them")
    if timers:
        blocks.append(ContextBlock(elements=[_md(timers)]))
    blocks.append(
        ContextBlock(
            elements=[
                _md(
                    "Click *Answer*, or reply in this thread: the reply of someone who may "
                    "answer is the answer the agent receives."
                )
            ]
        )
    )
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
            SectionBlock(text=_md(f"*{inline(call.agent)}* asks:\n{question}")),
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
    from bot.slack.blocks import mention, slack_date  # blocks imports this module

    expires = f" It expires {slack_date(call.expires_at)}." if call.expires_at else ""
    if which == "escalated":
        return (
            f":rotating_light: No answer after {human(call.escalate_after)}: escalated to "
            + ", ".join(mention(p) for p in call.escalated_principals())
            + f", who may now answer this question too.{expires}"
        )
    try:
        named = [str(p) for p in json.loads(call.approvers)] if call.approvers else []
    except ValueError:
        named = []
    everyone = list(dict.fromkeys([*named, *call.escalated_principals()]))
    of = f" ({which} of {call.remind_max})" if call.remind_max > 1 else ""
    return (
        f":bell: Reminder{of}: the agent's question is still waiting for an answer from "
        + (", ".join(mention(p) for p in everyone) or "its answerers")
        + f".{expires}"
    )
