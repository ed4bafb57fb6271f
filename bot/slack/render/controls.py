"""The controls a waiting call offers, on its card and on the App Home alike (the same ids, so
the same listeners and the same judgement apply): Approve, Reject, Edit in sight, the rarer
choices (Always approve, Always reject, the call's details) in its More menu; a question's
Answer; a run's Cancel."""

from __future__ import annotations

from slack_sdk.models.blocks import ButtonElement, ConfirmObject, Option, OverflowMenuElement

from bot.engine.questions import QUESTION_KIND
from bot.slack.blocks import (
    ALWAYS_APPROVE,
    ALWAYS_REJECT,
    ANSWER,
    APPROVE,
    CANCEL_RUN,
    EDIT,
    MORE,
    REJECT,
    SHOW_CONVERSATION,
    VERSION_SEPARATOR,
    menu_option,
)
from bot.store.records import CallRecord, RunRecord


def approving_value(call: CallRecord) -> str:
    """The value of a control that approves: the opaque approval id and, once the call was
    edited, the version token of its arguments (`<id>:<edits>`). The server only compares
    the token with the call's (decide.lua): a click on a card drawn before an edit is refused.
    A value without a token stands for version "0" (cards drawn before any edit, and before
    tokens existed, keep working while the call is unedited)."""
    if call.version == "0":
        return call.approval_id
    return f"{call.approval_id}{VERSION_SEPARATOR}{call.version}"


def edit_button(call: CallRecord) -> list[ButtonElement]:
    """Edit, then approve: offered when the policy allows it for this call (and the arguments
    are whole on the server, small enough for a form)."""
    if (
        not call.allow_edit
        or call.auto
        or call.confirm  # typed confirmation: decided on Approve, with the value typed
        or call.arguments_chars > len(call.arguments)
    ):
        return []
    return [ButtonElement(text="Edit", action_id=EDIT, value=call.approval_id)]


def answer_button(call: CallRecord) -> ButtonElement:
    """Answer: opens the answer modal (on a question's card, and on the App Home)."""
    return ButtonElement(text="Answer", action_id=ANSWER, value=call.approval_id, style="primary")


def more_menu(call: CallRecord, *, details: bool = True) -> list[OverflowMenuElement]:
    """The More menu ("…"): Always approve and Always reject where the policy allows them, and
    the call's details (its conversation, digest, policy and rule). Each option stands for the
    button it names (`bot.slack.blocks.menu_choice`)."""
    options = []
    if call.allow_always and call.required == 1 and not call.confirm and not call.edited_sha:
        value = menu_option(ALWAYS_APPROVE, approving_value(call))
        options.append(Option(label="Always approve", value=value))
    if call.allow_always:
        options.append(
            Option(label="Always reject", value=menu_option(ALWAYS_REJECT, call.approval_id))
        )
    if details:
        value = menu_option(SHOW_CONVERSATION, call.approval_id)
        options.append(Option(label="Details and conversation", value=value))
    return [OverflowMenuElement(action_id=MORE, options=options)] if options else []


def decision_buttons(
    call: CallRecord, *, details: bool = True
) -> list[ButtonElement | OverflowMenuElement]:
    """A waiting call's controls: a question's Answer; a call's Approve (carrying the version
    of its arguments, `approving_value`), Reject (it runs nothing: no version), Edit, and its
    More menu."""
    if call.kind == QUESTION_KIND:
        return [answer_button(call)]
    return [
        ButtonElement(
            text="Approve", action_id=APPROVE, value=approving_value(call), style="primary"
        ),
        ButtonElement(text="Reject", action_id=REJECT, value=call.approval_id, style="danger"),
        *edit_button(call),
        *more_menu(call, details=details),
    ]


def cancel_button(run: RunRecord) -> ButtonElement:
    """Cancel a run (its starter, or an approver of its channel or its calls), after a
    confirmation."""
    return ButtonElement(
        text="Cancel run",
        action_id=CANCEL_RUN,
        value=run.run_id,
        confirm=ConfirmObject(
            title="Cancel this run?",
            text="Its waiting calls are cancelled and the agent stops before its next step.",
            confirm="Cancel run",
            deny="Keep it",
        ),
    )
