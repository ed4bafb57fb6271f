"""The bot's smaller messages: a reminder or an escalation in a card's thread, a review
request (calls whose outcome is unknown), a note in the run's thread, and the private question
to the author of a reply that may reject a call."""

from __future__ import annotations

from slack_sdk.models.blocks import ActionsBlock, Block, ButtonElement, ContextBlock, SectionBlock

from bot.engine.questions import QUESTION_KIND
from bot.service.policy.rules import human
from bot.service.replies import Text
from bot.slack.blocks import REPLY_KEEP, REPLY_REJECT, REVIEW_DONE, REVIEW_RERUN
from bot.slack.render import question
from bot.slack.render.base import SECTION_LIMIT, md, mention, person, principals_of, slack_date
from bot.slack.render.output import OUTPUT_LIMIT
from bot.slack.replies import render
from bot.slack.text import inline, quote
from bot.store.records import CallRecord, RunRecord


def reminder_message(call: CallRecord, which: str) -> str:
    """A thread reply on a card that waits: who must decide (mentioned: they are notified),
    and when it expires. `which` is the reminder's number, or "escalated"."""
    if call.kind == QUESTION_KIND:
        return question.question_reminder(call, which)
    approvers = principals_of(call.approvers)
    escalated = call.escalated_principals()
    expires = f" It expires {slack_date(call.expires_at)}." if call.expires_at else ""
    if which == "escalated":
        return (
            f":rotating_light: No decision after {human(call.escalate_after)}: escalated to "
            + ", ".join(mention(p) for p in escalated)
            + f", who may now decide this call of `{inline(call.tool)}` too.{expires}"
        )
    everyone = list(dict.fromkeys([*approvers, *escalated]))
    of = f" ({which} of {call.remind_max})" if call.remind_max > 1 else ""
    return (
        f":bell: Reminder{of}: this call of `{inline(call.tool)}` is still waiting for a "
        "decision from "
        + (", ".join(mention(p) for p in everyone) or "its approvers")
        + f".{expires}"
    )


def note_text(note: str | Text) -> str:
    """A note in the run's thread: the service's words with people as mentions (`Text`), or
    plain text kept by an earlier version (escaped here)."""
    if isinstance(note, Text):
        return render(note)
    return quote(note, OUTPUT_LIMIT)


def review_message(run: RunRecord, review_id: str, voters: list[str]) -> tuple[str, list[Block]]:
    """Ask a person to settle calls whose outcome is unknown, or show how it was settled.
    The question is the service's plain sentence (escaped here, once)."""
    if run.resolved_review == review_id:
        verb = (
            "marked the unknown call(s) done"
            if run.resolved_action == "done"
            else "chose to run them again"
        )
        text = f":white_check_mark: *Review settled:* {person(run.resolved_by)} {verb}; continuing."
        return "Review settled", [SectionBlock(text=md(text))]
    if run.review_id != review_id:
        return "Review closed", [SectionBlock(text=md("This review is closed."))]
    text = quote(run.error, SECTION_LIMIT - 300)
    blocks: list[Block] = [
        SectionBlock(text=md(f":warning: *This run needs a review.*\n{text}")),
    ]
    if voters:
        names = ", ".join(person(v) for v in voters)
        needed = f" of {run.review_required}" if run.review_required else ""
        blocks.append(
            ContextBlock(
                elements=[md(f"Run again chosen by {names}: {len(voters)}{needed} approvals")]
            )
        )
    blocks.append(
        ActionsBlock(
            block_id="review",
            elements=[
                ButtonElement(text="Mark done", action_id=REVIEW_DONE, value=review_id),
                ButtonElement(
                    text="Run again", action_id=REVIEW_RERUN, value=review_id, style="danger"
                ),
            ],
        )
    )
    return "This run needs a review", blocks


def confirm_reply(reply_id: str, text: str) -> tuple[str, list[Block]]:
    """Asked privately of the author of a reply that starts like a rejection without `reject:`:
    does it reject the call?"""
    asked = (
        "Your reply starts with *reject* or *deny*. Should it reject this call, with your reply "
        "as the reason the agent receives? (Start a reply with `reject:` to reject at once.)\n"
        f">{quote(text, 2000).replace(chr(10), chr(10) + '>')}"
    )
    blocks: list[Block] = [
        SectionBlock(text=md(asked)),
        ActionsBlock(
            block_id="confirm_reply",
            elements=[
                ButtonElement(
                    text="Reject with this reason",
                    action_id=REPLY_REJECT,
                    value=reply_id,
                    style="danger",
                ),
                ButtonElement(text="Keep as a comment", action_id=REPLY_KEEP, value=reply_id),
            ],
        ),
    ]
    return "Should your reply reject this call?", blocks
