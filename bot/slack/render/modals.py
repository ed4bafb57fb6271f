"""The modals behind a card's buttons: Reject (a reason), the typed confirmation of a call whose
rule asks for it, and Edit (one input per argument, or the arguments as JSON). Each carries only
the call's opaque id: what it asks is judged again on the server when it is submitted."""

from __future__ import annotations

import json
from typing import Any

from slack_sdk.models.blocks import (
    Block,
    InputBlock,
    Option,
    PlainTextInputElement,
    PlainTextObject,
    SectionBlock,
    StaticSelectElement,
)
from slack_sdk.models.views import View

from bot.service.decisions.edits import EditField, EditForm
from bot.service.replies import REASON_LIMIT
from bot.slack.blocks import (
    CONFIRM_MODAL,
    EDIT_FIELD,
    EDIT_INPUT,
    EDIT_JSON_BLOCK,
    EDIT_MODAL,
    REASON_BLOCK,
    REASON_INPUT,
    REJECT_MODAL,
    TYPED_BLOCK,
    TYPED_INPUT,
)
from bot.slack.render.base import md
from bot.slack.text import inline, truncate
from bot.store.records import CallRecord
from bot.untrusted import reveal


def confirm_modal(call: CallRecord, *, expected: str, what: str) -> View:
    """The modal behind Approve for a call that needs typed confirmation. Its metadata is only
    the call's opaque id (and the channel, to answer in): what must be typed, and who may
    approve, are judged again on the server when it is submitted."""
    source = "the tool name" if what == "tool" else f"the value of `{inline(what)}`"
    shown = inline(expected, 200)
    element = PlainTextInputElement(action_id=TYPED_INPUT, max_length=3000)
    return View(
        type="modal",
        callback_id=CONFIRM_MODAL,
        title=PlainTextObject(text="Confirm approval"),
        submit=PlainTextObject(text="Approve"),
        close=PlainTextObject(text="Cancel"),
        private_metadata=json.dumps({"approval_id": call.approval_id, "channel": call.channel_id}),
        blocks=[
            SectionBlock(
                text=md(
                    f"Approve `{inline(call.tool)}` requested by agent *{inline(call.agent)}*?\n"
                    f"To confirm, type {source}: `{shown}`"
                )
            ),
            InputBlock(
                block_id=TYPED_BLOCK,
                label=PlainTextObject(text="Type it to approve"),
                element=element,
            ),
        ],
    )


def reject_modal(call: CallRecord, *, always: bool, prefill: str) -> View:
    """The modal behind Reject and Always reject: an optional, multi-line reason."""
    title = "Always reject" if always else "Reject"
    initial, _ = truncate(reveal(prefill), REASON_LIMIT)  # plain text: revealed, not escaped
    element = PlainTextInputElement(
        action_id=REASON_INPUT,
        multiline=True,
        max_length=REASON_LIMIT,
        initial_value=initial or None,
        placeholder="Why? The agent receives this text as the result of its call.",
    )
    return View(
        type="modal",
        callback_id=REJECT_MODAL,
        title=PlainTextObject(text=title),
        submit=PlainTextObject(text=title),
        close=PlainTextObject(text="Cancel"),
        private_metadata=json.dumps(
            {"approval_id": call.approval_id, "always": always, "channel": call.channel_id}
        ),
        blocks=[
            SectionBlock(
                text=md(f"Reject `{inline(call.tool)}` requested by agent *{inline(call.agent)}*.")
            ),
            InputBlock(
                block_id=REASON_BLOCK,
                label=PlainTextObject(text="Reason (optional)"),
                element=element,
                optional=True,
            ),
        ],
    )


def _edit_element(field: EditField) -> Any:
    """One argument's input: text (numbers too, checked by the service) or a choice."""
    if field.kind in ("enum", "boolean"):
        options = [Option(text=truncate(reveal(o), 75)[0], value=o) for o in field.options]
        initial = next((o for o in options if o.value == field.value), None)
        return StaticSelectElement(
            action_id=EDIT_INPUT, options=options, initial_option=initial,
            placeholder="Choose a value",
        )  # fmt: skip
    value = field.value
    return PlainTextInputElement(
        action_id=EDIT_INPUT,
        multiline=field.kind == "string" and (len(value) > 80 or "\n" in value),
        max_length=3000,
        initial_value=value or None,
    )


def edit_modal(form: EditForm) -> View:
    """The modal behind Edit: one input per argument for a flat schema, else the arguments as
    one JSON text. Its metadata is only the call's opaque id and the version of the call it
    was opened on (a submission after another edit changes nothing; checked again on submit)."""
    call = form.call
    what = {"shell": "commands", "apply_patch": "diff"}.get(call.kind, "arguments")
    intro = (
        f"Edit the {what} of `{inline(call.tool)}` requested by agent *{inline(call.agent)}*. "
        "Submitting counts as your approval of the edited call"
        + (f" (it then needs {call.required} approvals again)" if call.required > 1 else "")
        + ": the original call does not run, and the agent is asked to call it again with "
        "these arguments."
    )
    inputs: list[Block] = []
    for field in form.fields:
        label = truncate(reveal(field.name), 1900)[0]
        hint = truncate(reveal(field.description), 1900)[0] if field.description else None
        inputs.append(
            InputBlock(
                block_id=EDIT_FIELD + field.name,
                label=PlainTextObject(text=label),
                element=_edit_element(field),
                optional=not field.required,
                hint=PlainTextObject(text=hint) if hint else None,
            )
        )
    if not form.fields:
        inputs.append(
            InputBlock(
                block_id=EDIT_JSON_BLOCK,
                label=PlainTextObject(text=form.label),
                element=PlainTextInputElement(
                    action_id=EDIT_INPUT,
                    multiline=True,
                    max_length=3000,
                    initial_value=reveal(form.json_text)[:3000],
                ),
            )
        )
    return View(
        type="modal",
        callback_id=EDIT_MODAL,
        title=PlainTextObject(text="Edit, then approve"),
        submit=PlainTextObject(text="Approve edited"),
        close=PlainTextObject(text="Cancel"),
        private_metadata=json.dumps({"approval_id": call.approval_id, "version": call.version}),
        blocks=[SectionBlock(text=md(intro)), *inputs],
    )


def edit_error_block(form_fields: list[str], where: str) -> str:
    """The block of the modal an error about `where` (a field name, or "" for the whole
    arguments) is shown under."""
    if where and where in form_fields:
        return EDIT_FIELD + where
    return EDIT_FIELD + form_fields[0] if form_fields else EDIT_JSON_BLOCK
