"""Block Kit for what people ask about runs: `/agent status`, `/agent list`, the App Home tab,
and the requester's message about their run's outcomes. All untrusted text goes through
`bot.slack.text`; links are built from the Slack in use (`base.permalink`), no API call."""

from __future__ import annotations

from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    CheckboxesElement,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    Option,
    SectionBlock,
)

from bot.engine.questions import QUESTION_KIND
from bot.service.digest import short
from bot.service.people import Overview, RunView, Waiting
from bot.service.replies import when
from bot.slack.blocks import HOME_BATCH_APPROVE, HOME_BATCH_REJECT, HOME_PICK, HOME_PICK_BLOCK
from bot.slack.render.base import (
    ARGUMENT_LABELS,
    ARGUMENTS_LIMIT,
    KIND_LABELS,
    as_dicts,
    md,
    permalink,
)
from bot.slack.render.card import outcome_word, quorum_text
from bot.slack.render.controls import approving_value, decision_buttons
from bot.slack.render.grants import home_grants
from bot.slack.render.run_message import status_text
from bot.slack.text import blockquote, code_block, escape, inline, truncate
from bot.store.records import CallRecord, CallStatus, RunRecord, RunStatus
from bot.untrusted import reveal

HOME_RUNS = 10
HOME_ARGUMENTS_LIMIT = 1000  # a call's arguments on the Home; longer ones are decided on the card
MAX_BLOCKS = 95  # a message or a Home view holds at most 100 blocks


def _task(run: RunRecord, limit: int = 150) -> str:
    text, cut = truncate(escape(" ".join(run.task.split())), limit)
    return text + ("…" if cut else "")


def _run_link(run: RunRecord, label: str = "run message") -> str:
    if not run.message_ts:
        return "_(run message not posted yet)_"
    return f"<{permalink(run.channel_id, run.message_ts)}|{label}>"


def _call_link(call: CallRecord, run: RunRecord, label: str) -> str:
    if not call.message_ts:
        return label
    return f"<{permalink(call.channel_id or run.channel_id, call.message_ts)}|{label}>"


def _run_line(view: RunView) -> str:
    run = view.run
    line = (
        f"`{run.run_id}` · *{inline(run.agent_name)}* by <@{run.user_id}> in <#{run.channel_id}>"
        f" · {status_text(run, view.waiting)}{f' · turn {run.turn}' if run.turn > 1 else ''} · "
        f"{_run_link(run)}\n_{_task(run)}_"
    )
    if view.waiting:
        links = ", ".join(_call_link(c, run, inline(c.tool, 60)) for c in view.waiting[:10])
        line += f"\nWaiting for: {links}"
    return line


def _waiting_line(item: Waiting) -> str:
    run, call = item.run, item.call
    what = KIND_LABELS.get(call.kind, "tool")
    text = (
        f"*{inline(call.agent)}* wants to run {what} `{inline(call.tool)}` · run `{run.run_id}` "
        f"by <@{run.user_id}> in <#{run.channel_id}> · "
        f"{_call_link(call, run, 'approval request')}\n_{_task(run, 120)}_"
    )
    if call.required > 1:
        text += "\n" + quorum_text(call)
    return text


def status_message(view: RunView) -> tuple[str, list[dict[str, Any]]]:
    """`/agent status <run id>`: status, agent, who started it, what it waits for, links."""
    run = view.run
    lines = [
        f"*Run `{run.run_id}`*: agent *{inline(run.agent_name)}*, started by <@{run.user_id}> "
        f"in <#{run.channel_id}> at {when(run.created_at)}",
        f"*Status:* {status_text(run, view.waiting)}"
        + (f" at {when(run.cancelled_at)}" if run.cancelled_at else ""),
        f"*Task:* _{_task(run, 500)}_",
        f"*Run message:* {_run_link(run)}",
    ]
    if view.waiting:
        lines.append("*Waiting for a decision on:*")
        for n, call in enumerate(view.waiting, start=1):
            votes = f" ({len(call.voter_ids())} of {call.required} approvals)" if (
                call.required > 1) else ""  # fmt: skip
            lines.append(
                f"• {_call_link(call, run, f'request {n}')}: `{inline(call.tool)}` by agent "
                f"*{inline(call.agent)}*{votes}"
            )
    elif run.status == RunStatus.NEEDS_REVIEW and run.review_ts:
        link = f"<{permalink(run.channel_id, run.review_ts)}|review request>"
        lines.append(f"*Waiting for:* a person to settle the {link}")
    lines.extend(edit_lines(view))
    lines.extend(turn_lines(view))
    text = "\n".join(lines)
    return f"Run {run.run_id}: {run.status}", as_dicts([SectionBlock(text=md(text))])


def turn_lines(view: RunView) -> list[str]:
    """The run's follow-up turns (replies in its thread), and those waiting for one."""
    if not view.turns and not view.queued:
        return []
    lines = ["*Follow-ups in its thread:*"]
    for turn in view.turns[-10:]:
        ended = {"finished": "answered", "failed": "failed"}.get(turn.status, "going on")
        lines.append(
            f"• turn {turn.turn}, <@{turn.follow_up.user}> at {when(turn.follow_up.at)}: "
            f"_{inline(turn.follow_up.text, 200)}_ ({ended})"
        )
    for follow_up in view.queued:
        lines.append(
            f"• waiting: <@{follow_up.user}> at {when(follow_up.at)}: "
            f"_{inline(follow_up.text, 200)}_"
        )
    return lines


def edit_lines(view: RunView) -> list[str]:
    """The run's edited calls: who edited which tool when, the digests before and after, and
    whether the agent's re-proposed call used the edit's approval."""
    if not view.edits:
        return []
    lines = ["*Edited calls:*"]
    for edit in view.edits[-10:]:
        used = "ran as edited" if edit.used else "approval not used yet"
        lines.append(
            f"• `{inline(edit.tool)}` edited by <@{edit.by}> at {when(edit.at)}: digest "
            f"`{short(edit.original_digest)}` → `{short(edit.digest)}` ({used})"
        )
    return lines


def overview_message(overview: Overview) -> tuple[str, list[dict[str, Any]]]:
    """`/agent list`: the calls waiting for the asker's decision, then the channel's runs."""
    blocks: list[Block] = []
    if overview.mine:
        blocks.append(SectionBlock(text=md(f"*Waiting for your decision ({len(overview.mine)}):*")))
        blocks.extend(SectionBlock(text=md(_waiting_line(w))) for w in overview.mine)
    else:
        blocks.append(SectionBlock(text=md("*Waiting for your decision:* nothing.")))
    blocks.append(DividerBlock())
    if overview.runs:
        blocks.append(
            SectionBlock(text=md(f"*Unfinished runs in this channel ({len(overview.runs)}):*"))
        )
        blocks.extend(SectionBlock(text=md(_run_line(v))) for v in overview.runs)
    else:
        blocks.append(SectionBlock(text=md("*Unfinished runs in this channel:* none.")))
    text = f"{len(overview.mine)} call(s) waiting for you; {len(overview.runs)} unfinished run(s)"
    return text, as_dicts(blocks[:MAX_BLOCKS])


def whole_on_home(call: CallRecord) -> bool:
    """Whether the Home shows the call's arguments as its card does (else it is decided on
    its card, where they are shown)."""
    shown = code_block(call.arguments, HOME_ARGUMENTS_LIMIT, call.arguments_chars)
    return shown == code_block(call.arguments, ARGUMENTS_LIMIT, call.arguments_chars)


def _home_call(item: Waiting) -> list[Block]:
    """One call on the Home: what it is, its arguments (shortened), and the card's buttons
    only when the Home shows the arguments as the card does; a call whose arguments the Home
    cuts is decided on its card, one click away (nobody decides what they have not seen)."""
    call = item.call
    label = ARGUMENT_LABELS.get(call.kind, "Arguments")
    shown = code_block(call.arguments, HOME_ARGUMENTS_LIMIT, call.arguments_chars)
    whole = whole_on_home(call)
    blocks: list[Block] = [
        SectionBlock(text=md(_waiting_line(item))),
        SectionBlock(text=md(f"*{label}:*\n{shown}")),
    ]
    if whole:
        blocks.append(
            ActionsBlock(
                block_id=f"home:{call.approval_id}", elements=decision_buttons(call, details=False)
            )
        )
    else:
        card = _call_link(call, item.run, "its approval request")
        blocks.append(
            ContextBlock(
                elements=[md(f"The arguments are too long for this tab: decide on {card}.")]
            )
        )
    return blocks


PICK_OPTIONS = 10  # a checkbox group holds at most 10 options


def home_batch(mine: list[Waiting]) -> list[Block]:
    """Decide several at once (#33): a box beside each waiting call (its value: the call's
    opaque id and version), then Approve selected and Reject selected, which open the form
    that lists what each would do; from two calls on (questions are answered, and a call whose
    arguments the Home cuts is decided on its card, not batched)."""
    calls = [w for w in mine if w.call.kind != QUESTION_KIND and whole_on_home(w.call)]
    if len(calls) < 2:
        return []
    blocks: list[Block] = [SectionBlock(text=md("*Decide several at once:* tick them, then"))]
    for n in range(0, min(len(calls), PICK_OPTIONS * 3), PICK_OPTIONS):
        options = [
            Option(
                label=truncate(reveal(f"{w.call.tool} · run {w.run.run_id}"), 70)[0],
                value=approving_value(w.call),
            )
            for w in calls[n : n + PICK_OPTIONS]
        ]
        group = CheckboxesElement(action_id=HOME_PICK, options=options)
        blocks.append(ActionsBlock(block_id=f"{HOME_PICK_BLOCK}:{n}", elements=[group]))
    buttons = [
        ButtonElement(text="Approve selected", action_id=HOME_BATCH_APPROVE, style="primary"),
        ButtonElement(text="Reject selected", action_id=HOME_BATCH_REJECT),
    ]
    blocks.append(ActionsBlock(block_id="home_batch", elements=buttons))
    return blocks


def home_view(overview: Overview) -> dict[str, Any]:
    """The App Home tab of one person: the calls waiting for their decision, each with its
    arguments and the card's own buttons, and their recent runs."""
    blocks: list[Block] = [HeaderBlock(text="Waiting for your decision")]
    if not overview.mine:
        blocks.append(SectionBlock(text=md("Nothing is waiting for your decision.")))
    for item in overview.mine:
        blocks.extend(_home_call(item))
    blocks.extend(home_batch(overview.mine))
    blocks.append(DividerBlock())
    grants = home_grants(overview.grants)
    if grants:
        blocks.extend([*grants, DividerBlock()])
    blocks.append(HeaderBlock(text="Your recent runs"))
    if not overview.runs:
        blocks.append(SectionBlock(text=md("You have not started a run yet: `/agent <task>`.")))
    blocks.extend(SectionBlock(text=md(_run_line(v))) for v in overview.runs[:HOME_RUNS])
    blocks.append(
        ContextBlock(elements=[md("This tab follows your runs and decisions as they change.")])
    )
    return {"type": "home", "blocks": as_dicts(blocks[:MAX_BLOCKS])}


def _outcome_line(call: CallRecord) -> str:
    if call.kind == QUESTION_KIND and call.status == CallStatus.APPROVED:
        return (
            f"• The question of agent *{inline(call.agent)}* was answered by "
            f"<@{call.decided_by}>:\n{blockquote(call.reason, 300)}"
        )
    line = f"• `{inline(call.tool)}` (agent *{inline(call.agent)}*): {outcome_word(call.status)}"
    if call.decided_by == "policy":
        line += " automatically by policy"
    elif call.decided_by:
        line += f" by <@{call.decided_by}>"
    if call.status == CallStatus.CANCELLED and call.via == "cancel":
        line += " (the run was cancelled)"
    if call.reason and call.status == CallStatus.REJECTED:
        line += f":\n{blockquote(call.reason, 300)}"  # a quote: it cannot pass for "*Now:*"
    return line


def notice_message(run: RunRecord, calls: list[CallRecord], ended: bool, user: str = "") -> str:
    """The requester's message: what happened to what they asked of the run since they were
    last told (one message for a burst of decisions), and where the run stands now. `user`:
    whom it is for (the starter, or a later turn's requester: "Your request in @U1's run")."""
    whose = "Your run" if user in ("", run.user_id) else f"Your request in <@{run.user_id}>'s run"
    lines = [f"{whose} `{run.run_id}` of agent *{inline(run.agent_name)}* ({_run_link(run)}):"]
    lines.extend(_outcome_line(c) for c in calls)
    if ended or run.status != RunStatus.RUNNING:
        lines.append(f"*Now:* {status_text(run)}")
    return "\n".join(lines)
