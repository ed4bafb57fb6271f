"""The modals behind a card's "Show all" (the whole call) and its details (what the card leaves
out: digest, policy, rule, timers; then the run's task and its conversation up to the call, with
the run's decisions so far). Within Slack's modal
limits (100 blocks, 3,000 characters a section, a 24-character title), escaped like the card.
"""

from __future__ import annotations

import json

from slack_sdk.models.blocks import Block, ContextBlock, DividerBlock, SectionBlock
from slack_sdk.models.views import View

from bot.conversation import Turn
from bot.engine.questions import QUESTION_KIND
from bot.service.digest import short
from bot.service.oversight.details import Conversation, WholeCall
from bot.service.replies import when
from bot.slack.render.base import (
    approvers_text,
    asked_by,
    expiry_text,
    md,
    person,
    timers_text,
)
from bot.slack.render.card import decision_line, what_text
from bot.slack.render.card_context import description_text, unified_diff
from bot.slack.text import blockquote, clean, escape, inline, truncate
from bot.store.records import CallContext, CallRecord, CallStatus
from bot.untrusted import ZWSP

MODAL_BLOCKS = 100
CHUNK = 2900  # characters of code per section (Slack: 3,000)
CLOSE = {"type": "plain_text", "text": "Close"}


def _chunks(text: str, room: int) -> tuple[list[str], int]:
    """Untrusted text as code blocks of at most CHUNK characters each, at most `room` of them;
    returns them and how many characters of the escaped text were left out."""
    body = escape(clean(text)).replace("```", f"`{ZWSP}`{ZWSP}`")
    found: list[str] = []
    while body and len(found) < room:
        part, _ = truncate(body, CHUNK - 6)
        found.append(f"```{part}```")
        body = body[len(part) :]
    return found, len(body)


def _view(title: str, blocks: list[Block]) -> View:
    return View(type="modal", title=title, close=CLOSE, blocks=blocks[:MODAL_BLOCKS])


def whole_call_modal(whole: WholeCall) -> View:
    """Show all: every argument of the call whole (a function tool's by name), in sections of
    code; past the modal's 100 blocks, a note says how much is left out."""
    call = whole.call
    blocks: list[Block] = [
        SectionBlock(
            text=md(f"*{inline(call.agent)}* wants to run `{inline(call.tool)}`: the whole call.")
        )
    ]
    parts: list[tuple[str, str]] = []
    try:
        data = json.loads(whole.text) if call.kind in ("function", "mcp") else None
    except ValueError:
        data = None
    if isinstance(data, dict) and data:
        for name, value in data.items():
            text = value if isinstance(value, str) else json.dumps(value, indent=2)
            parts.append((f"*{inline(str(name), 100)}* ({len(text):,} characters)", text))
    elif call.kind == "apply_patch":
        parts.append(("*Patch:*", unified_diff(whole.text)))
    else:
        parts.append(("*Commands:*" if call.kind == "shell" else "*Arguments:*", whole.text))
    left_out = 0
    for label, text in parts:
        room = MODAL_BLOCKS - len(blocks) - 2
        if room <= 0:
            left_out += len(text)
            continue
        chunks, rest = _chunks(text, room)
        blocks.append(SectionBlock(text=md(label)))
        blocks.extend(SectionBlock(text=md(chunk)) for chunk in chunks)
        left_out += rest
    if left_out:
        blocks = blocks[: MODAL_BLOCKS - 1]
        note = f"_(the modal holds no more: {left_out:,} characters are not shown)_"
        blocks.append(ContextBlock(elements=[md(note)]))
    return _view("The whole call", blocks)


_LABELS = {
    "user": ":bust_in_silhouette: *User*",
    "assistant": ":robot_face: *{agent}* said",
    "reasoning": ":thought_balloon: *{agent}* thought",
    "call": ":hammer_and_wrench: *{agent}* called `{tool}`",
    "result": ":inbox_tray: Result",
    "handoff": ":arrow_right: Handoff",
}
TURN_SHOWN = 1200  # characters of one turn in the modal


def _turn_text(turn: Turn, decision: str) -> str:
    label = _LABELS[turn.kind].format(agent=inline(turn.agent, 80), tool=inline(turn.tool, 80))
    if turn.kind in ("call", "result"):
        body, _ = _chunks(turn.text[:TURN_SHOWN] + ("…" if len(turn.text) > TURN_SHOWN else ""), 1)
        text = f"{label}:\n{body[0] if body else '``` ```'}"
    else:
        shown = turn.text[:TURN_SHOWN] + ("…" if len(turn.text) > TURN_SHOWN else "")
        text = f"{label}:\n{blockquote(shown, TURN_SHOWN + 300)}"
    return text + (f"\n{decision}" if decision else "")


def _decision(call: CallRecord, this: CallRecord) -> str:
    mine = call.approval_id == this.approval_id
    if not call.decided:
        if mine:
            return ":point_left: *This call*: waiting for a decision"
        return ":hourglass_flowing_sand: Waiting for a decision"
    line = ("*This call*: " if mine else "") + decision_line(call, when(call.decided_at))
    # What the agent was told: a rejection's reason, an answer (an approval's stored reason,
    # such as the grant or Always decision that settled it, is the audit trail's).
    if call.reason and (call.status == CallStatus.REJECTED or call.kind == QUESTION_KIND):
        line += "\n" + blockquote(call.reason, 600)
    return line


def call_facts(conversation: Conversation) -> list[Block]:
    """What the card leaves out: the tool's description, the digest that binds a decision to
    this exact call, the policy's version and rule, who may decide, the timers, and how to
    answer in the card's thread."""
    run, call = conversation.run, conversation.call
    lines = [f"{what_text(call, conversation.context)} · {asked_by(run, call)}"]
    about = description_text(call, conversation.context or CallContext())
    if about:
        lines.append(about)
    facts = [
        f"Call digest `{short(call.digest)}`" if call.digest else "",
        f"policy `{inline(call.policy_version)}`" if call.policy_version else "",
        f"rule `{inline(call.rule)}`" if call.rule else "",
        f"approvers {approvers_text(call)}",
    ]
    if call.original_digest:
        facts.append(f"digest before the edit `{short(call.original_digest)}`")
    context = [" · ".join(f for f in facts if f)]
    timers = " · ".join(t for t in (expiry_text(call), timers_text(call)) if t)
    if timers:
        context.append(timers)
    if not call.decided:
        context.append(
            "Reply in the card's thread to comment, or start a reply with `reject:` (or "
            "`deny:`) to reject with that reason."
        )
    return [
        SectionBlock(text=md("\n".join(lines))),
        ContextBlock(elements=[md("\n".join(context))]),
        DividerBlock(),
    ]


def conversation_modal(conversation: Conversation) -> View:
    """The call's details: what the card leaves out (`call_facts`), then the run's task and
    its conversation up to this call (user, assistant, tool calls and results, with the
    decisions on them), newest last."""
    run, call = conversation.run, conversation.call
    task = blockquote(run.task, 1500, run.task_chars)
    head = (
        f"Run `{inline(run.run_id)}` started by {person(run.user_id)}, agent "
        f"*{inline(run.agent_name)}*"
    )
    blocks: list[Block] = call_facts(conversation)
    blocks.append(SectionBlock(text=md(f"{head}\n*Task:*\n{task}")))
    by_call = {c.call_id: c for c in conversation.decisions}
    found = conversation.transcript
    turns: list[str] = []
    shown_calls: set[str] = set()
    if found is not None:
        for turn in found.turns:
            decision = ""
            if turn.kind == "call" and turn.call_id in by_call:
                decision = _decision(by_call[turn.call_id], call)
                shown_calls.add(turn.call_id)
            turns.append(_turn_text(turn, decision))
    else:
        blocks.append(
            ContextBlock(
                elements=[md("_The run's stored conversation is no longer kept (it ended)._")]
            )
        )
    others = [c for c in conversation.decisions if c.call_id not in shown_calls]
    room = MODAL_BLOCKS - len(blocks) - 2 - (1 if others else 0)
    dropped = (found.dropped if found is not None else 0) + max(0, len(turns) - room)
    if dropped:
        note = f"_{dropped:,} earlier step{'s' if dropped != 1 else ''} not shown._"
        blocks.append(ContextBlock(elements=[md(note)]))
    blocks.extend(SectionBlock(text=md(t)) for t in turns[max(0, len(turns) - room) :])
    if others:
        lines = [f"• `{inline(c.tool, 80)}`: {_decision(c, call)}" for c in others]
        blocks.append(SectionBlock(text=md("*Decisions in this run:*\n" + "\n".join(lines))))
    return _view("Details", blocks)
