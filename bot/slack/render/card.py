"""An approval card: one call waiting for a decision, then its outcome.

Read in seconds, top to bottom: the header (what, on what, who asked; once decided, the
outcome), the agent's reason, the arguments (long values folded, with Show all), one context
line (expiry, approvers, rule, the run), the controls (`controls`). The digest and the policy's
version are in the call's details (`details.conversation_modal`) and the audit trail, not here.
"""

from __future__ import annotations

import difflib
import json

from slack_sdk.models.blocks import ActionsBlock, Block, ContextBlock, SectionBlock

from bot.engine.questions import QUESTION_KIND
from bot.service.oversight.advised import read_advised
from bot.service.policy.rules import human
from bot.slack.render import question
from bot.slack.render.base import (
    ARGUMENTS_LIMIT,
    KIND_LABELS,
    approvers_text,
    asked_by,
    describe_principals,
    expiry_text,
    md,
    person,
    principals_of,
    run_link,
    slack_date,
)
from bot.slack.render.card_context import context_blocks
from bot.slack.render.controls import decision_buttons
from bot.slack.render.grants import granted_text
from bot.slack.text import blockquote, code_block, inline
from bot.store.records import BY_BATCH, BY_REACTION, CallContext, CallRecord, CallStatus, RunRecord

# Argument names that usually say what a call acts on, most telling first.
TARGET_NAMES = (
    "target", "host", "hostname", "server", "service", "path", "file", "filename", "filepath",
    "directory", "dir", "resource", "repo", "repository", "database", "db", "table", "bucket",
    "cluster", "namespace", "branch", "url", "channel", "user", "email", "account", "name", "id",
)  # fmt: skip
TARGET_SHOWN = 60

OUTCOME_ICONS = {
    CallStatus.APPROVED: ":white_check_mark:",
    CallStatus.REJECTED: ":no_entry:",
    CallStatus.CANCELLED: ":no_entry_sign:",
    CallStatus.EXPIRED: ":hourglass:",
}
OUTCOME_WORDS = {
    "approved": ":white_check_mark: Approved",
    "rejected": ":no_entry: Rejected",
    "cancelled": ":no_entry_sign: Cancelled",
    "expired": ":hourglass: Expired",
}


def outcome_word(status: str) -> str:
    """How a call's outcome reads; a status this version does not know reads as itself."""
    return OUTCOME_WORDS.get(status, f":grey_question: {inline(status.capitalize(), 40)}")


def _arguments_of(call: CallRecord) -> dict[str, object]:
    text = call.edited_arguments or call.arguments
    if call.arguments_chars > len(call.arguments) and not call.edited_arguments:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def target_of(call: CallRecord) -> str:
    """What the call acts on, in a few words (escaped; '' when nothing says): a function
    tool's most telling short argument, a shell call's first command, a patch's file."""
    if call.kind == "shell":
        first = (call.edited_arguments or call.arguments).strip().partition("\n")[0]
        return inline(first, TARGET_SHOWN)
    if call.kind == "apply_patch":
        header = (call.edited_arguments or call.arguments).partition("\n")[0]
        return inline(header.partition(" ")[2], TARGET_SHOWN)
    data = _arguments_of(call)
    short = {
        str(name).lower(): value
        for name, value in data.items()
        if isinstance(value, str | int) and not isinstance(value, bool)
        and "\n" not in str(value) and 0 < len(str(value)) <= 200
    }  # fmt: skip
    for name in TARGET_NAMES:
        if name in short:
            return inline(str(short[name]), TARGET_SHOWN)
    for value in short.values():
        if isinstance(value, str):
            return inline(value, TARGET_SHOWN)
    return ""


def operations_of(context: CallContext | None) -> int:
    """How many operations a patch has, when its card's context says (0: it does not)."""
    return 0 if context is None else max(context.operations_total, len(context.operations))


def what_text(call: CallRecord, context: CallContext | None = None) -> str:
    """E.g. "*restart_service* on `web-1`", "shell `make deploy`", "MCP tool `vault/read` on
    `db`"; a patch of several operations says how many (not its first one's file alone)."""
    target = target_of(call)
    if call.kind == "shell":
        return f"shell `{target}`" if target else "shell"
    if call.kind == "apply_patch":
        if operations_of(context) > 1:
            return f"patch of {operations_of(context):,} operations"
        return "patch" + (f" on `{target}`" if target else "")
    what = f"*{inline(call.tool)}*"
    if call.kind in KIND_LABELS and call.kind != "function":
        what = f"{KIND_LABELS[call.kind]} `{inline(call.tool)}`"
    return what + (f" on `{target}`" if target else "")


def outcome_text(call: CallRecord) -> str:
    """Who settled the call and how, e.g. "Approved by @Bob (always, for the rest of this run)",
    "Expired (no reviewer decided within 24h)"."""
    if call.status == CallStatus.EXPIRED:
        return f"Expired (no reviewer decided within {human(call.expire_after)})"
    verb = outcome_word(call.status).partition(" ")[2]
    if call.status == CallStatus.CANCELLED and call.via == "cancel":
        return f"{verb} by {person(call.decided_by)} with its run"
    if not call.decided_by:
        return verb
    if call.decided_by == "policy":
        return f"{verb} automatically by policy rule `{inline(call.rule)}`"
    voters = call.voter_ids()
    if call.status == CallStatus.APPROVED and len(voters) > 1:
        line = f"{verb} by " + ", ".join(person(v) for v in voters)
    else:
        line = f"{verb} by {person(call.decided_by)}"
    granted = granted_text(call)  # a channel grant made or used (#19)
    if call.always and not granted:
        line += " (always, for the rest of this run)"
    if granted:
        line += granted
    elif call.via == BY_BATCH:
        line += " (with other calls at once)"
    elif call.via == BY_REACTION:
        line += " (by reaction)"
    elif call.via and call.status in (CallStatus.APPROVED, CallStatus.REJECTED):
        line += " through an *Always* decision on another call"
    return line


def decision_line(call: CallRecord, decided_at: str) -> str:
    """The outcome with its icon and time (the details modal lists a run's decisions so)."""
    icon = OUTCOME_ICONS.get(call.status, ":grey_question:")
    return f"{icon} {outcome_text(call)} at {decided_at}"


def quorum_text(call: CallRecord) -> str:
    """E.g. "1 of 2 approvals: approved by @a; waiting for 1 more from `@sre-oncall`"."""
    voters = call.voter_ids()
    text = f":busts_in_silhouette: *{len(voters)} of {call.required} approvals*"
    if voters:
        text += ": approved by " + ", ".join(person(v) for v in voters)
    missing = call.required - len(voters)
    return text + f"; waiting for {missing} more from {approvers_text(call)}"


def confirm_text(call: CallRecord) -> str:
    """The card's line for a call whose approval is typed (`confirm: type`)."""
    what = "the tool name" if call.confirm == "tool" else f"the value of `{inline(call.confirm)}`"
    return f":keyboard: Approving asks you to type {what}."


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
    """An edited call: who edited it, and the change (the arguments it now stands for)."""
    if not call.edited_sha:
        return []
    head = f":pencil2: *Edited by {person(call.edited_by)}* {slack_date(call.edited_at)}:"
    if not call.decided:
        head = head[:-1] + ": approving runs these arguments, not the agent's."
    diff = arguments_diff(call.arguments, call.edited_arguments)
    return [SectionBlock(text=md(f"{head}\n{diff}"))]


RISK_ICONS = {"low": ":large_green_circle:", "medium": ":large_orange_circle:",
              "high": ":red_circle:"}  # fmt: skip
RATIONALE_SHOWN = 300
CONCERN_SHOWN = 80


def advice_text(call: CallRecord) -> str:
    """The advisor's second opinion, e.g. ":red_circle: Risk: *high*. Deletes the only admin
    account." and its concerns (untrusted: escaped, cut), or why there is none; '' before the
    advisor answered (or with no advisor)."""
    advised = read_advised(call)
    if advised is None:
        return ""
    advice = advised.advice
    if advice is None:
        return f":mag: No advice ({advised.said})."
    text = (
        f"{RISK_ICONS.get(advice.risk, ':mag:')} *Second opinion:* Risk: *{advice.risk}*. "
        f"{inline(advice.rationale, RATIONALE_SHOWN)}"
    )
    if advice.concerns:
        text += "\nConcerns: " + " · ".join(inline(c, CONCERN_SHOWN) for c in advice.concerns)
    if call.edited_sha:
        text += "\n_(on the arguments before the edit)_"
    return text


def _header(run: RunRecord, call: CallRecord, context: CallContext | None) -> str:
    asked = asked_by(run, call)
    if not call.decided:
        return f":raised_hand: {what_text(call, context)} · {asked}"
    icon = OUTCOME_ICONS.get(call.status, ":grey_question:")
    return f"{icon} {outcome_text(call)}: {what_text(call, context)} · {asked}"


def _context_line(run: RunRecord, call: CallRecord, decided_at: str) -> str:
    """Pending: expiry, approvers, rule, the run. Decided: when, the rule, the run."""
    link = run_link(run)
    rule = f"rule `{inline(call.rule)}`" if call.rule else ""
    if call.decided:
        verb = outcome_word(call.status).partition(" ")[2].lower()
        when = f"{verb} {slack_date(call.decided_at)}" if call.decided_at else decided_at
        if call.status == CallStatus.EXPIRED:
            when += " · not run (the agent was told)"
        elif call.status == CallStatus.CANCELLED:
            when += " · not run"
        parts = [when.lstrip(" ·"), rule, link]
    else:
        escalated = call.escalated_principals()
        named = describe_principals(principals_of(call.approvers)) or "the channel's approvers"
        who = f"approvers {named}"
        if escalated:
            who += (
                f" · Escalated to {describe_principals(escalated)} {slack_date(call.escalated_at)}"
            )
        parts = [expiry_text(call), who, rule, link]
    return " · ".join(p for p in parts if p)


def approval_message(
    run: RunRecord, call: CallRecord, decided_at: str, context: CallContext | None = None
) -> tuple[str, list[Block]]:
    """One call's card: the header, why, the arguments, one context line, the controls; once
    decided, the outcome in the header and no controls. A question's card is
    `question.question_message`."""
    if call.kind == QUESTION_KIND:  # the agent asks (ask_human): a question's card
        return question.question_message(run, call, decided_at)
    blocks: list[Block] = [SectionBlock(text=md(_header(run, call, context)))]
    if context is not None:
        found = context_blocks(call, context, ARGUMENTS_LIMIT)
        blocks.extend(found[:1] if call.edited_sha else found)  # an edit shows its own change
    elif not call.edited_sha:
        blocks.append(
            SectionBlock(text=md(code_block(call.arguments, ARGUMENTS_LIMIT, call.arguments_chars)))
        )
    blocks.extend(edited_blocks(call))
    advice = "" if call.decided else advice_text(call)
    if advice:
        blocks.append(ContextBlock(elements=[md(advice)]))
    if call.status == CallStatus.REJECTED and call.reason:  # what the agent was told
        reason = f"*Reason:*\n{blockquote(call.reason, 2500)}"  # a quote: never the bot's
        blocks.append(SectionBlock(text=md(reason)))
    if not call.decided and call.required > 1:
        blocks.append(SectionBlock(text=md(quorum_text(call))))
    if not call.decided and call.confirm:
        blocks.append(ContextBlock(elements=[md(confirm_text(call))]))
    blocks.append(ContextBlock(elements=[md(_context_line(run, call, decided_at))]))
    what = f"{inline(call.tool)}" + (f" on {target_of(call)}" if target_of(call) else "")
    if operations_of(context) > 1:
        what = f"{inline(call.tool)} ({operations_of(context):,} operations)"
    if call.decided:
        blocks_text = f"{what}: {outcome_text(call)}"
        return blocks_text, blocks
    blocks.append(ActionsBlock(block_id="decision", elements=decision_buttons(call)))
    return f"Approval needed: {what} ({asked_by(run, call)})", blocks
