"""Approve all and Reject all (#33): the buttons on a paused run's message, the form that lists
each call with what submitting does to it, and what the batch did. The form carries only the
calls' opaque ids (with the version of their arguments it showed): everything is judged again
on the server when it is submitted."""

from __future__ import annotations

import json
from typing import Any

from slack_sdk.models.blocks import (
    Block,
    ButtonElement,
    ContextBlock,
    InputBlock,
    PlainTextInputElement,
    PlainTextObject,
    SectionBlock,
)
from slack_sdk.models.views import View

from bot.engine.questions import QUESTION_KIND
from bot.service.decisions.batch import BatchDone, BatchForm, Item, Outcome
from bot.service.replies import REASON_LIMIT
from bot.slack.blocks import BATCH_APPROVE, BATCH_MODAL, BATCH_REJECT, REASON_BLOCK, REASON_INPUT
from bot.slack.render.base import approvers_text, md, person
from bot.slack.render.card import advice_text, quorum_text, what_text
from bot.slack.render.controls import approving_value
from bot.slack.replies import render
from bot.slack.text import inline
from bot.store.records import CallRecord, RunRecord, RunStatus

KEY_ARGUMENTS = 160  # characters of a call's arguments on the form (its card shows them all)


def batchable(run: RunRecord, waiting: list[CallRecord] | None) -> list[CallRecord]:
    """The calls of a paused run that Approve all would list: its waiting calls (not questions:
    those are answered); the buttons show from two on."""
    if run.status != RunStatus.PAUSED:
        return []
    return [c for c in waiting or [] if not c.decided and c.kind != QUESTION_KIND]


def batch_buttons(run: RunRecord, waiting: list[CallRecord] | None) -> list[ButtonElement]:
    """Approve all N and Reject all on a run's message, when its pause waits for two calls or
    more (the value: the run's opaque id)."""
    calls = batchable(run, waiting)
    if len(calls) < 2:
        return []
    return [
        ButtonElement(
            text=f"Approve all {len(calls)}", action_id=BATCH_APPROVE, value=run.run_id,
            style="primary",
        ),
        ButtonElement(text="Reject all", action_id=BATCH_REJECT, value=run.run_id),
    ]  # fmt: skip


def _outcome(item: Item, approve: bool, *, done: bool) -> str:
    if item.outcome == Outcome.LEFT_OUT:
        return ":heavy_minus_sign: *Left out:* " + render(item.why)
    if item.outcome == Outcome.VOTE:
        call = item.call
        if done:
            return f":ballot_box_with_ballot: Your vote is counted. {quorum_text(call)}"
        votes, missing = len(call.voter_ids()) + 1, call.required - len(call.voter_ids()) - 1
        return (
            f":ballot_box_with_ballot: Will count as your vote: *{votes} of {call.required} "
            f"approvals* with it; {missing} more needed from {approvers_text(call)}"
        )
    return ":white_check_mark: Approved" if approve else ":x: Rejected"


def _call_lines(item: Item, approve: bool, *, done: bool) -> list[Block]:
    call, run = item.call, item.run
    rule = f" · rule `{inline(call.rule, 60)}`" if call.rule else ""
    head = (
        f"{what_text(call)} · agent *{inline(call.agent, 60)}* · run `{run.run_id}` by "
        f"{person(run.user_id)}{rule}"
    )
    arguments = inline(call.edited_arguments or call.arguments, KEY_ARGUMENTS)
    will = "" if done else ("Will be: " if item.outcome == Outcome.DECIDE else "")
    shown = [md(f"`{arguments}`" if arguments else "_no arguments_")]
    advice = "" if done else advice_text(call)  # the advisor's second opinion, as on the card
    if advice:
        shown.append(md(advice))
    return [
        SectionBlock(text=md(f"{head}\n{will}{_outcome(item, approve, done=done)}")),
        ContextBlock(elements=shown),
    ]


def _metadata(form: BatchForm, channel: str) -> str:
    return json.dumps(
        {
            "approve": form.approve,
            "calls": [approving_value(i.call) for i in form.chosen],
            "left": [approving_value(i.call) for i in form.items if i.outcome == Outcome.LEFT_OUT],
            "channel": channel,
        }
    )


def batch_modal(form: BatchForm, channel: str = "") -> View:
    """The form behind Approve all or Reject all: each call, what submitting does to it, and
    (Reject all) a reason for them all. `channel`: where to tell the outcome if it comes late."""
    verb = "Approve" if form.approve else "Reject"
    chosen = len(form.chosen)
    left = len(form.items) - chosen
    intro = f"{verb} *{chosen}* call{'s' if chosen != 1 else ''} at once"
    if left:
        intro += f"; *{left}* left out (decide them on their cards)"
    if form.more:
        intro += f". {form.more} more waiting calls are not listed: decide them after these"
    blocks: list[Block] = [SectionBlock(text=md(intro + "."))]
    for item in form.items:
        blocks.extend(_call_lines(item, form.approve, done=False))
    if not form.approve:
        blocks.append(
            InputBlock(
                block_id=REASON_BLOCK,
                label="Reason (the agent sees it)",
                optional=True,
                element=PlainTextInputElement(
                    action_id=REASON_INPUT, multiline=True, max_length=REASON_LIMIT
                ),
            )
        )
    blocks.append(
        ContextBlock(
            elements=[
                md(
                    "Each call is decided on its own: its card and the audit show it. "
                    "Everything is checked again when you submit."
                )
            ]
        )
    )
    return View(
        type="modal",
        callback_id=BATCH_MODAL,
        title=PlainTextObject(text=f"{verb} all"),
        submit=PlainTextObject(text=f"{verb} {chosen}"),
        close=PlainTextObject(text="Cancel"),
        private_metadata=_metadata(form, channel),
        blocks=blocks,
    )


def done_text(done: BatchDone) -> str:
    """What the batch did, in one line per kind (said privately when it came late)."""
    verb = "Approved" if done.approve else "Rejected"
    lines = []
    for outcome, word in ((Outcome.DECIDE, verb), (Outcome.VOTE, "Voted on")):
        items = done.of(outcome)
        if items:
            lines.append(f"{word} {len(items)}: " + ", ".join(f"`{inline(i.call.tool, 60)}`"
                                                             for i in items))  # fmt: skip
    for item in done.of(Outcome.LEFT_OUT):
        lines.append(f"Left out `{inline(item.call.tool, 60)}`: {render(item.why)}")
    return "\n".join(lines) or "Nothing was decided."


def batch_done_modal(done: BatchDone) -> dict[str, Any]:
    """The form, once submitted, shows what the batch did to each call."""
    verb = "Approve" if done.approve else "Reject"
    decided, voted = len(done.of(Outcome.DECIDE)), len(done.of(Outcome.VOTE))
    left = len(done.of(Outcome.LEFT_OUT))
    summary = (
        f"{'Approved' if done.approve else 'Rejected'} *{decided}*"
        + (f", voted on *{voted}*" if voted else "")
        + (f", left out *{left}*" if left else "")
        + "."
    )
    blocks: list[Block] = [SectionBlock(text=md(summary))]
    for item in done.items:
        blocks.extend(_call_lines(item, done.approve, done=True))
    view = View(
        type="modal",
        callback_id=BATCH_MODAL + "_done",
        title=PlainTextObject(text=f"{verb} all: done"),
        close=PlainTextObject(text="Close"),
        blocks=blocks,
    )
    return view.to_dict()


def said_modal(text: str) -> dict[str, Any]:
    """The form, once submitted, when nothing could be decided: why."""
    view = View(
        type="modal",
        callback_id=BATCH_MODAL + "_done",
        title=PlainTextObject(text="Nothing decided"),
        close=PlainTextObject(text="Close"),
        blocks=[SectionBlock(text=md(text))],
    )
    return view.to_dict()
