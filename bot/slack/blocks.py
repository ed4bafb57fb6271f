"""The ids the bot's messages and modals give their controls, which Slack sends back with a click
or a submission: the contract between what is drawn (`bot.slack.render`) and what listens
(`bot.slack.listeners`). Nothing else lives here, so both sides import it and neither imports
the other.
"""

from __future__ import annotations

# An approval card's decisions (also on the App Home: the same ids, the same listeners).
APPROVE = "approval_approve"
REJECT = "approval_reject"
ALWAYS_APPROVE = "approval_always_approve"
ALWAYS_REJECT = "approval_always_reject"
DECISION_ACTIONS = (APPROVE, REJECT, ALWAYS_APPROVE, ALWAYS_REJECT)
EDIT = "approval_edit"

# What lies behind a card: the whole call, the run's conversation and the call's details.
SHOW_ALL = "approval_show_all"
SHOW_CONVERSATION = "approval_show_conversation"

# A card's "More" menu (an overflow): each option's value is `<action id> <button's value>`,
# and choosing it is clicking the button it names (`menu_choice`).
MORE = "approval_more"

REVIEW_DONE = "review_mark_done"
REVIEW_RERUN = "review_run_again"

CANCEL_RUN = "run_cancel"

REPLY_REJECT = "reply_confirm_reject"
REPLY_KEEP = "reply_keep_comment"

# Modals: their callback ids, and the block and action ids of their inputs.
EDIT_MODAL = "approval_edit_modal"
EDIT_JSON_BLOCK = "edit_json"
EDIT_FIELD = "field:"  # + the parameter's name: the block of one argument's input
EDIT_INPUT = "value"

REJECT_MODAL = "approval_reject_modal"
REASON_BLOCK = "reason"
REASON_INPUT = "reason_input"

CONFIRM_MODAL = "approval_confirm_modal"
TYPED_BLOCK = "typed"
TYPED_INPUT = "typed_input"

# The agent's questions (ask_human).
ANSWER = "question_answer"
ANSWER_MODAL = "question_answer_modal"
ANSWER_BLOCK = "answer"
ANSWER_INPUT = "answer_input"

# Grants (#19): the Always approve form, and Revoke on the App Home.
GRANT_MODAL = "approval_grant_modal"
SCOPE_BLOCK = "grant_scope"
SCOPE_INPUT = "grant_scope_input"
NARROW_BLOCK = "grant_narrow"
NARROW_INPUT = "grant_narrow_input"
GRANT_REVOKE = "grant_revoke"

# Approve all and Reject all (#33): on a paused run's message (the value: the run's id), and on
# the App Home (the calls chosen in its checkboxes); the form they open lists each call.
BATCH_APPROVE = "batch_approve"
BATCH_REJECT = "batch_reject"
HOME_BATCH_APPROVE = "home_batch_approve"
HOME_BATCH_REJECT = "home_batch_reject"
BATCH_ACTIONS = (BATCH_APPROVE, BATCH_REJECT, HOME_BATCH_APPROVE, HOME_BATCH_REJECT)
HOME_PICK_BLOCK = "home_pick"  # + ":<n>": a checkbox group of the Home's waiting calls
HOME_PICK = "home_pick_calls"
BATCH_MODAL = "batch_modal"

VERSION_SEPARATOR = ":"  # never in an approval id (keys.APPROVAL_ID_RE)


def approval_and_version(value: str) -> tuple[str, str]:
    """A clicked approving button's (approval id, version token): see
    `bot.slack.render.controls.approving_value`. A value without a token stands for "0"."""
    approval_id, _, version = value.partition(VERSION_SEPARATOR)
    return approval_id, version or "0"


def menu_option(action_id: str, value: str) -> str:
    """The value of a More menu option that stands for the button `action_id` with `value`."""
    return f"{action_id} {value}"


def menu_choice(option: str) -> tuple[str, str]:
    """(action id, button value) of a chosen More menu option ('' when it names none)."""
    action_id, _, value = option.partition(" ")
    return action_id, value
