"""Block Kit for run messages, approval messages and the reject modal.

Built with slack_sdk's block models, which check Block Kit's limits where the blocks are made.
All untrusted text goes through `bot.slack.text`.
"""

from __future__ import annotations

import difflib
import json
from typing import Any
from urllib.parse import urlsplit

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ConfirmObject,
    ContextBlock,
    InputBlock,
    MarkdownTextObject,
    Option,
    PlainTextInputElement,
    PlainTextObject,
    SectionBlock,
    StaticSelectElement,
)
from slack_sdk.models.views import View

from bot.engine.questions import QUESTION_KIND
from bot.service.authorize import principal_parts
from bot.service.digest import short
from bot.service.edits import EditField, EditForm
from bot.service.policy import human
from bot.service.replies import Text, when
from bot.slack import grant_forms, question_blocks
from bot.slack.answer_parts import split_answer
from bot.slack.explained import context_blocks
from bot.slack.markdown import to_mrkdwn
from bot.slack.replies import render
from bot.slack.text import blockquote, code_block, escape, fit, inline, quote, truncate
from bot.store.records import CallContext, CallRecord, CallStatus, RunRecord, RunStatus
from bot.untrusted import clean, reveal

APPROVE = "approval_approve"
REJECT = "approval_reject"
ALWAYS_APPROVE = "approval_always_approve"
ALWAYS_REJECT = "approval_always_reject"
DECISION_ACTIONS = (APPROVE, REJECT, ALWAYS_APPROVE, ALWAYS_REJECT)

REVIEW_DONE = "review_mark_done"
REVIEW_RERUN = "review_run_again"

CANCEL_RUN = "run_cancel"

REPLY_REJECT = "reply_confirm_reject"
REPLY_KEEP = "reply_keep_comment"

EDIT = "approval_edit"
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

SECTION_LIMIT = 3000
ARGUMENTS_LIMIT = 2900
KIND_LABELS = {
    "function": "tool",
    "mcp": "MCP tool",
    "hosted_mcp": "hosted MCP tool",
    "shell": "shell",
    "apply_patch": "patch",
}
ARGUMENT_LABELS = {"shell": "Commands", "apply_patch": "Patch", "question": "Question"}


_web_base = "https://slack.com"


def describe_principals(principals: tuple[str, ...] | list[str]) -> str:
    """Principals as people read them: users as mentions, groups by handle or id, never pinged."""
    return render(Text(principal_parts(principals)))


def use_slack_api(api_url: str) -> None:
    """Permalinks follow the Slack in use: its API URL's host is its web host (slack.com,
    GovSlack's slack-gov.com, or a stand-in's own address). The runtime calls this at start."""
    global _web_base
    parts = urlsplit(api_url)
    _web_base = f"{parts.scheme or 'https'}://{parts.netloc or 'slack.com'}"


def permalink(channel: str, ts: str) -> str:
    """A link to a message that Slack clients resolve without an API call."""
    return f"{_web_base}/archives/{channel}/p{ts.replace('.', '')}"


def status_text(run: RunRecord) -> str:
    if run.status == RunStatus.PAUSED:
        n = run.undecided
        return f":raised_hand: waiting for {n} approval{'s' if n != 1 else ''}"
    if run.status == RunStatus.CANCELLED:
        by = f" by <@{run.cancelled_by}>" if run.cancelled_by else ""
        return f":no_entry_sign: cancelled{by}"
    return {
        "running": ":hourglass_flowing_sand: running",
        "resuming": ":hourglass_flowing_sand: running",
        "needs_review": ":warning: needs review (see the thread)",
        "finished": ":white_check_mark: finished",
        "failed": ":x: failed",
    }.get(run.status, run.status)


def _md(text: str) -> MarkdownTextObject:
    """Every mrkdwn text goes through here: cut to Block Kit's 3,000 characters, with a note."""
    return MarkdownTextObject(text=fit(text, SECTION_LIMIT))


OUTPUT_LIMIT = 3900


def run_message(
    run: RunRecord, progress: list[str] | None = None, waiting: list[CallRecord] | None = None
) -> tuple[str, list[Block]]:
    """The run's own message: who started which agent on what, where it stands, its latest
    progress lines, and links to the approval requests it waits for."""
    header = f"<@{run.user_id}> started agent *{inline(run.agent_name)}*"
    status = status_text(run)
    # A follow-up in its thread began another turn (its progress lines are that turn's).
    turn = f"  ·  turn {run.turn} (replies in the thread continue it)" if run.turn > 1 else ""
    task = blockquote(run.task, SECTION_LIMIT - len(header) - 1, run.task_chars)
    blocks: list[Block] = [
        SectionBlock(text=_md(f"{header}\n{task}")),
        ContextBlock(elements=[_md(f"*Status:* {status}{turn}  ·  run `{run.run_id}`")]),
    ]
    links = [
        f"<{permalink(c.channel_id or run.channel_id, c.message_ts)}|request {n}>"
        for n, c in enumerate(waiting or [], start=1)
        if c.message_ts and not c.decided
    ]
    if links and run.status == RunStatus.PAUSED:
        blocks.append(ContextBlock(elements=[_md("Waiting for approval: " + ", ".join(links))]))
    if progress:
        lines = "\n".join(f"• {inline(line, 300)}" for line in progress)
        blocks.append(ContextBlock(elements=[_md(f"*Progress:*\n{lines}")]))
    if not run.ended:
        blocks.append(ActionsBlock(block_id="run", elements=[cancel_button(run)]))
    return f"Agent run by <@{run.user_id}>: {status}", blocks


def cancel_button(run: RunRecord) -> ButtonElement:
    """Cancel a run (its starter, or an approver of its channel or its calls), after a
    confirmation."""
    return ButtonElement(
        text="Cancel run",
        action_id=CANCEL_RUN,
        value=run.run_id,
        confirm=ConfirmObject(
            title="Cancel this run?",
            text="Its pending calls are cancelled and the agent stops before its next step.",
            confirm="Cancel run",
            deny="Keep it",
        ),
    )


MAX_ANSWER_PARTS = 10  # an answer is at most this many thread messages (about 39,000 chars)


def result_parts(run: RunRecord) -> list[str]:
    """The run's result in its thread: the output (escaped here, its Markdown as mrkdwn), in
    as many messages as it takes (split between paragraphs), or the error (plain text,
    escaped here)."""
    if run.status == RunStatus.FAILED:
        return [":x: " + quote(run.error or "The run failed.", OUTPUT_LIMIT)]
    if not run.output:
        return ["(the agent finished without output)"]
    rendered = to_mrkdwn(escape(clean(run.output)))  # its Markdown, rendered safely
    return split_answer(rendered, OUTPUT_LIMIT, MAX_ANSWER_PARTS)


WRITING = "\n:writing_hand: _still writing…_"


def thread_status(run: RunRecord, progress: list[str] | None = None) -> str:
    """The run thread's status line (Slack shows "<the bot> <status>" under the thread while
    the bot works; it clears when the bot posts there, or after two minutes): what the run
    does now; empty once it ended (cleared)."""
    if run.ended:
        return ""
    if run.status == RunStatus.PAUSED:
        return "is waiting for approval"
    if run.status == RunStatus.NEEDS_REVIEW:
        return "is waiting for a review"
    if run.status == RunStatus.RESUMING:
        return "is resuming after the decision…"
    latest = (progress or [""])[-1]
    if latest:  # "ops is running tool restart_service" (plain text: Slack shows it as such)
        return "is working: " + (latest if len(latest) <= 80 else latest[:79] + "…")
    return "is working on it…"


def turn_progress(
    run: RunRecord, progress: list[str] | None = None, waiting: list[CallRecord] | None = None
) -> str:
    """A follow-up turn's message in the run's thread before its answer: what the agent is
    doing now (thinking, its tools, waiting for approval with links to the requests, resuming)
    and its latest progress lines; it becomes the answer once the agent writes one."""
    if run.status == RunStatus.PAUSED:
        links = [
            f"<{permalink(c.channel_id or run.channel_id, c.message_ts)}|request {n}>"
            for n, c in enumerate(waiting or [], start=1)
            if c.message_ts and not c.decided
        ]
        now = ":raised_hand: _waiting for approval_" + (
            ": " + ", ".join(links) if links else " (the requests are being posted)"
        )
    elif run.status == RunStatus.NEEDS_REVIEW:
        now = ":warning: _waiting for a review (below the run message)_"
    elif run.status == RunStatus.RESUMING:
        now = ":hourglass_flowing_sand: _resuming after the decision…_"
    else:
        now = ":hourglass_flowing_sand: _working on it…_"
    lines = "\n".join(f"• {inline(line, 300)}" for line in (progress or [])[-5:])
    return now + (f"\n{lines}" if lines else "")


def partial_answer(text: str) -> str:
    """An answer while the agent writes it (plain text, escaped here): never mistaken for a
    finished one. Empty: the agent turned to its tools after starting to write."""
    if not text:
        return ":hourglass_flowing_sand: _working on it…_"
    return to_mrkdwn(quote(text, OUTPUT_LIMIT - len(WRITING))) + WRITING


def slack_date(timestamp: float | str) -> str:
    """A time every reader sees in their own time zone (Slack's date formatting), with a UTC
    fallback for clients that cannot format it."""
    try:
        moment = int(float(timestamp))
    except ValueError:
        return escape(str(timestamp))
    return f"<!date^{moment}^{{date_short_pretty}} at {{time}}|{when(timestamp)}>"


def mention(principal: str) -> str:
    """A principal as a mention that notifies: users <@U…>, groups <!subteam^S…>. A group
    handle cannot be pinged without its id (it is shown); "*" names nobody in particular."""
    if principal == "*":
        return "anyone in this channel"
    if principal[0] in "UW":
        return f"<@{principal}>"
    if principal[0] == "S":
        return f"<!subteam^{principal}>"
    return f"`{principal}`"


def _principals(text: str) -> list[str]:
    try:
        return [str(p) for p in json.loads(text)] if text else []
    except ValueError:
        return []


def timers_text(call: CallRecord) -> str:
    """E.g. "Expires <date> · Reminds approvers every 1h · Escalates to @x after 4h"."""
    parts = []
    if call.expires_at:
        parts.append(f":hourglass_flowing_sand: Expires {slack_date(call.expires_at)}")
    if call.remind_after and call.remind_max:
        times = "once" if call.remind_max == 1 else f"up to {call.remind_max} times"
        parts.append(f"Reminds approvers every {human(call.remind_after)} ({times})")
    escalated = call.escalated_principals()
    if escalated:
        parts.append(
            f"Escalated to {describe_principals(escalated)} {slack_date(call.escalated_at)}"
        )
    elif call.escalate_after and call.escalate_to:
        parts.append(
            f"Escalates to {describe_principals(_principals(call.escalate_to))} "
            f"after {human(call.escalate_after)}"
        )
    return "  ·  ".join(parts)


def reminder_message(call: CallRecord, which: str) -> str:
    """A thread reply on a card that waits: who must decide (mentioned: they are notified),
    and when it expires. `which` is the reminder's number, or "escalated"."""
    if call.kind == QUESTION_KIND:
        return question_blocks.question_reminder(call, which)
    approvers = _principals(call.approvers)
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


OUTCOME_WORDS = {
    "approved": ":white_check_mark: Approved",
    "rejected": ":no_entry: Rejected",
    "cancelled": ":no_entry_sign: Cancelled",
    "expired": ":hourglass: Expired",
}


def outcome_word(status: str) -> str:
    """How a call's outcome reads; a status this version does not know reads as itself."""
    return OUTCOME_WORDS.get(status, f":grey_question: {inline(status.capitalize(), 40)}")


def _decision_line(call: CallRecord, decided_at: str) -> str:
    if call.status == CallStatus.EXPIRED:
        return (
            f":hourglass: *Expired* at {decided_at}: no reviewer decided within "
            f"{human(call.expire_after)}, so the call was not run (the agent was told)."
        )
    verb = outcome_word(call.status)
    if call.status == CallStatus.CANCELLED and call.via == "cancel":
        return f"{verb} by <@{call.decided_by}> at {decided_at}, with its run"
    if not call.decided_by:
        return f"{verb} at {decided_at}"
    if call.decided_by == "policy":
        return f"{verb} automatically by policy rule `{inline(call.rule)}` at {decided_at}"
    voters = call.voter_ids()
    if call.status == CallStatus.APPROVED and len(voters) > 1:
        line = f"{verb} by " + ", ".join(f"<@{v}>" for v in voters) + f" at {decided_at}"
    else:
        line = f"{verb} by <@{call.decided_by}> at {decided_at}"
    granted = grant_forms.granted_text(call)  # a channel grant made or used (#19)
    if call.always and not granted:
        line += " (always, for the rest of this run)"
    if granted:
        line += granted
    elif call.via and call.status in (CallStatus.APPROVED, CallStatus.REJECTED):
        line += " through an *Always* decision on another call"
    return line


def _approvers(call: CallRecord) -> str:
    try:
        principals = json.loads(call.approvers) if call.approvers else []
    except ValueError:
        principals = []
    return describe_principals([str(p) for p in principals]) or "the channel's approvers"


def quorum_text(call: CallRecord) -> str:
    """E.g. "1 of 2 approvals: approved by @a; waiting for 1 more from `@sre-oncall`"."""
    voters = call.voter_ids()
    text = f":busts_in_silhouette: *{len(voters)} of {call.required} approvals*"
    if voters:
        text += ": approved by " + ", ".join(f"<@{v}>" for v in voters)
    missing = call.required - len(voters)
    return text + f"; waiting for {missing} more from {_approvers(call)}"


def _binding(call: CallRecord) -> str:
    """The short digest that binds a decision to this exact call, and the rule in force."""
    return (
        f"Call digest `{short(call.digest)}` · policy `{call.policy_version}` · "
        f"rule `{inline(call.rule)}` · approvers: {_approvers(call)}"
    )


def asked_by(run: RunRecord, call: CallRecord) -> str:
    """Who asked for the call: the run's starter ("Run started by @U1"), or in a later turn of
    its conversation, that turn's requester ("Asked by @U2 · turn 2 of @U1's run")."""
    if not call.requester and call.turn <= 1:
        return f"Run started by <@{run.user_id}>"
    whose = "their" if not call.requester else f"<@{run.user_id}>'s"
    turn = f"turn {call.turn} of {whose} run" if call.turn > 1 else f"in {whose} run"
    return f"Asked by <@{call.asked_by(run)}> · {turn}"


def approval_message(
    run: RunRecord, call: CallRecord, decided_at: str, context: CallContext | None = None
) -> tuple[str, list[Block]]:
    """One pending call: what would run, for which run, and the four decision buttons; with
    its `context` (calls posted since it is kept), why and what too (`bot.slack.explained`)."""
    if call.kind == QUESTION_KIND:  # the agent asks (ask_human): a question's card
        return question_blocks.question_message(run, call, decided_at)
    what = KIND_LABELS.get(call.kind, "tool")
    title = (
        f":warning: *Approval needed*: agent *{inline(call.agent)}* wants to run "
        f"{what} `{inline(call.tool)}`"
    )
    task, _ = truncate(escape(" ".join(run.task.split())), 300)
    origin = (
        f"{asked_by(run, call)}: _{task}_  ·  "
        f"<{permalink(run.channel_id, run.message_ts)}|run thread>"
        if run.message_ts
        else f"{asked_by(run, call)}: _{task}_"
    )
    label = ARGUMENT_LABELS.get(call.kind, "Arguments")
    shown = code_block(call.arguments, ARGUMENTS_LIMIT, call.arguments_chars)
    blocks: list[Block] = [
        SectionBlock(text=_md(title)),
        ContextBlock(elements=[_md(origin)]),
    ]
    if context is None:
        blocks.append(SectionBlock(text=_md(f"*{label}:*\n{shown}")))
    else:
        blocks.extend(context_blocks(call, context, ARGUMENTS_LIMIT))
    blocks.append(ContextBlock(elements=[_md(_binding(call))]))
    blocks.extend(edited_blocks(call))
    if call.decided:
        text = _decision_line(call, decided_at)
        if call.reason and call.status != CallStatus.EXPIRED:
            text += f"\n*Reason:*\n{blockquote(call.reason, 2500)}"  # a quote: never the bot's
        blocks.append(SectionBlock(text=_md(text)))
        fallback = f"{inline(call.tool)}: {call.status} by <@{call.decided_by}>"
        if call.status == CallStatus.EXPIRED:
            fallback = f"{inline(call.tool)}: expired undecided, not run"
    else:
        if call.required > 1:
            blocks.append(SectionBlock(text=_md(quorum_text(call))))
        if call.confirm:
            blocks.append(ContextBlock(elements=[_md(confirm_text(call))]))
        blocks.append(ActionsBlock(block_id="decision", elements=decision_buttons(call)))
        timers = timers_text(call)
        if timers:
            blocks.append(ContextBlock(elements=[_md(timers)]))
        blocks.append(
            ContextBlock(
                elements=[
                    _md(
                        "Reply in this thread to comment, or start a reply with `reject:` "
                        "(or `deny:`) to reject with that reason."
                    )
                ]
            )
        )
        fallback = f"Approval needed: {inline(call.agent)} wants to run {inline(call.tool)}"
    return fallback, blocks


def confirm_text(call: CallRecord) -> str:
    """The card's line for a call whose approval is typed (`confirm: type`)."""
    what = "the tool name" if call.confirm == "tool" else f"the value of `{inline(call.confirm)}`"
    return f":keyboard: Approving asks you to type {what} (policy rule `{inline(call.rule)}`)."


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
                text=_md(
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


VERSION_SEPARATOR = ":"  # never in an approval id (keys.APPROVAL_ID_RE)


def approving_value(call: CallRecord) -> str:
    """The value of a button that approves: the opaque approval id and, once the call was
    edited, the version token of its arguments (`<id>:<edits>`). The server only compares
    the token with the call's (decide.lua): a click on a card drawn before an edit is refused.
    A value without a token stands for version "0" (cards drawn before any edit, and before
    tokens existed, keep working while the call is unedited)."""
    if call.version == "0":
        return call.approval_id
    return f"{call.approval_id}{VERSION_SEPARATOR}{call.version}"


def approval_and_version(value: str) -> tuple[str, str]:
    """A clicked approving button's (approval id, version token) (see `approving_value`)."""
    approval_id, _, version = value.partition(VERSION_SEPARATOR)
    return approval_id, version or "0"


def decision_buttons(call: CallRecord) -> list[ButtonElement]:
    """A pending call's buttons (on its card, and on the App Home: the same action ids, so the
    same listeners and the same authorization apply). The approving ones carry the version of
    the call's arguments (`approving_value`); rejecting needs none (it runs nothing)."""
    if call.kind == QUESTION_KIND:
        return [question_blocks.answer_button(call)]
    approving = approving_value(call)
    buttons = [
        ButtonElement(text="Approve", action_id=APPROVE, value=approving, style="primary"),
        ButtonElement(text="Reject", action_id=REJECT, value=call.approval_id, style="danger"),
    ]
    if call.allow_always and call.required == 1 and not call.confirm and not call.edited_sha:
        buttons.append(
            ButtonElement(text="Always approve", action_id=ALWAYS_APPROVE, value=approving)
        )
    if call.allow_always:
        buttons.append(
            ButtonElement(text="Always reject", action_id=ALWAYS_REJECT, value=call.approval_id)
        )
    buttons.extend(edit_button(call))
    return buttons


def review_message(run: RunRecord, review_id: str, voters: list[str]) -> tuple[str, list[Block]]:
    """Ask a person to settle calls whose outcome is unknown, or show how it was settled.
    The question is the service's plain sentence (escaped here, once)."""
    if run.resolved_review == review_id:
        verb = (
            "marked the unknown call(s) done"
            if run.resolved_action == "done"
            else "chose to run them again"
        )
        text = f":white_check_mark: *Review settled:* <@{run.resolved_by}> {verb}; continuing."
        return "Review settled", [SectionBlock(text=_md(text))]
    if run.review_id != review_id:
        return "Review closed", [SectionBlock(text=_md("This review is closed."))]
    text = quote(run.error, SECTION_LIMIT - 300)
    blocks: list[Block] = [
        SectionBlock(text=_md(f":warning: *This run needs a review.*\n{text}")),
    ]
    if voters:
        names = ", ".join(f"<@{v}>" for v in voters)
        needed = f" of {run.review_required}" if run.review_required else ""
        blocks.append(
            ContextBlock(
                elements=[_md(f"Run again chosen by {names}: {len(voters)}{needed} approvals")]
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
    question = (
        "Your reply starts with *reject* or *deny*. Should it reject this call, with your reply "
        "as the reason the agent receives? (Start a reply with `reject:` to reject at once.)\n"
        f">{quote(text, 2000).replace(chr(10), chr(10) + '>')}"
    )
    blocks: list[Block] = [
        SectionBlock(text=_md(question)),
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


def reject_modal(call: CallRecord, *, always: bool, prefill: str) -> View:
    """The modal behind Reject and Always reject: an optional, multi-line reason."""
    title = "Always reject" if always else "Reject"
    initial, _ = truncate(reveal(prefill), 3000)  # plain text: revealed, not escaped
    element = PlainTextInputElement(
        action_id=REASON_INPUT,
        multiline=True,
        max_length=3000,
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
                text=_md(f"Reject `{inline(call.tool)}` requested by agent *{inline(call.agent)}*.")
            ),
            InputBlock(
                block_id=REASON_BLOCK,
                label=PlainTextObject(text="Reason (optional)"),
                element=element,
                optional=True,
            ),
        ],
    )


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


def arguments_diff(before: str, after: str, limit: int = ARGUMENTS_LIMIT - 200) -> str:
    """The change of an edit, as `diff` lines of the pretty JSON (one argument a line), in a
    code block (escaped, cut)."""
    lines = [
        line
        for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=1)
        if not line.startswith(("---", "+++", "@@"))
    ]
    return code_block("\n".join(lines) or "(no change)", limit)


def edited_blocks(call: CallRecord) -> list[Block]:
    """An edited call: who edited it, and the change, on its card."""
    if not call.edited_sha:
        return []
    head = (
        f":pencil2: *Edited by <@{call.edited_by}>* at {slack_date(call.edited_at)}: the call "
        "stands for the edited arguments; the original ones never run (once approved, the agent "
        "is asked to call it again with these, and only that call runs)."
    )
    digest = ""
    if call.original_digest:
        digest = f"Digest before the edit `{short(call.original_digest)}`"
    text = f"{head}\n{arguments_diff(call.arguments, call.edited_arguments)}"
    blocks: list[Block] = [SectionBlock(text=_md(text))]
    if digest:
        blocks.append(ContextBlock(elements=[_md(digest)]))
    return blocks


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
    one JSON text. Its metadata is only the call's opaque id (checked again on submit)."""
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
        private_metadata=json.dumps({"approval_id": call.approval_id}),
        blocks=[SectionBlock(text=_md(intro)), *inputs],
    )


def edit_error_block(form_fields: list[str], where: str) -> str:
    """The block of the modal an error about `where` (a field name, or "" for the whole
    arguments) is shown under."""
    if where and where in form_fields:
        return EDIT_FIELD + where
    return EDIT_FIELD + form_fields[0] if form_fields else EDIT_JSON_BLOCK


def as_dicts(blocks: list[Block]) -> list[dict[str, Any]]:
    return [block.to_dict() for block in blocks]
