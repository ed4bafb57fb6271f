"""A run's own message (who started which agent on what, where it stands now, its steps so far,
links to what it waits for, Cancel), the run thread's status line, and a follow-up turn's
message while it works. Every word matches the state it shows: a finished run's steps are
steps taken, a cancelled run says who cancelled it and offers nothing more."""

from __future__ import annotations

from slack_sdk.models.blocks import ActionsBlock, Block, ContextBlock, SectionBlock

from bot.engine.questions import QUESTION_KIND
from bot.slack.render.base import SECTION_LIMIT, md, permalink, person
from bot.slack.render.batch import batch_buttons
from bot.slack.render.controls import cancel_button
from bot.slack.text import blockquote, inline
from bot.store.records import CallRecord, RunRecord, RunStatus


def _counted(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def waiting_text(run: RunRecord, waiting: list[CallRecord] | None) -> str:
    """What a paused run waits for, e.g. "2 approvals", "1 approval and 1 answer"."""
    pending = [c for c in waiting or [] if not c.decided]
    if not pending:
        n = run.undecided
        return f"{n} request{'s' if n != 1 else ''}"
    questions = sum(c.kind == QUESTION_KIND for c in pending)
    approvals = len(pending) - questions
    parts = []
    if approvals:
        parts.append(_counted(approvals, "approval"))
    if questions:
        parts.append(_counted(questions, "answer"))
    return " and ".join(parts)


def status_text(run: RunRecord, waiting: list[CallRecord] | None = None) -> str:
    """Where the run stands, e.g. ":raised_hand: waiting for 2 approvals"."""
    if run.status == RunStatus.PAUSED:
        return f":raised_hand: waiting for {waiting_text(run, waiting)}"
    if run.status == RunStatus.CANCELLED:
        by = f" by {person(run.cancelled_by)}" if run.cancelled_by else ""
        return f":no_entry_sign: cancelled{by}"
    return {
        "running": ":hourglass_flowing_sand: running",
        "resuming": ":hourglass_flowing_sand: running",
        "needs_review": ":warning: needs review (see the thread)",
        "finished": ":white_check_mark: finished",
        "failed": ":x: failed (see the thread)",
    }.get(run.status, inline(run.status, 40))


def _links(run: RunRecord, waiting: list[CallRecord] | None) -> list[str]:
    return [
        f"<{permalink(c.channel_id or run.channel_id, c.message_ts)}|request {n}>"
        for n, c in enumerate(waiting or [], start=1)
        if c.message_ts and not c.decided
    ]


def run_message(
    run: RunRecord, progress: list[str] | None = None, waiting: list[CallRecord] | None = None
) -> tuple[str, list[Block]]:
    """The run's own message: who started which agent on what, where it stands, its latest
    steps, and links to the requests it waits for."""
    header = f"{person(run.user_id)} started agent *{inline(run.agent_name)}*"
    status = status_text(run, waiting)
    turn = f"  ·  turn {run.turn}" if run.turn > 1 else ""
    # A reply in a finished run's thread is its next turn (a failed or cancelled run refuses).
    more = "  ·  reply in the thread to continue" if run.status == RunStatus.FINISHED else ""
    task = blockquote(run.task, SECTION_LIMIT - len(header) - 1, run.task_chars)
    blocks: list[Block] = [
        SectionBlock(text=md(f"{header}\n{task}")),
        ContextBlock(elements=[md(f"*Status:* {status}{turn}{more}  ·  run `{run.run_id}`")]),
    ]
    links = _links(run, waiting)
    if links and run.status == RunStatus.PAUSED:
        blocks.append(ContextBlock(elements=[md("Waiting for: " + ", ".join(links))]))
    if progress:
        lines = "\n".join(f"• {inline(line, 300)}" for line in progress)
        label = "Steps" if run.ended else "Progress"
        blocks.append(ContextBlock(elements=[md(f"*{label}:*\n{lines}")]))
    if not run.ended:
        controls = [*batch_buttons(run, waiting), cancel_button(run)]
        blocks.append(ActionsBlock(block_id="run", elements=controls))
    return f"Agent run by {person(run.user_id)}: {status}", blocks


def thread_status(
    run: RunRecord, progress: list[str] | None = None, waiting: list[CallRecord] | None = None
) -> str:
    """The run thread's status line (Slack shows "<the bot> <status>" under the thread while
    the bot works; it clears when the bot posts there, or after two minutes): what the run
    does now; empty once it ended (cleared)."""
    if run.ended:
        return ""
    if run.status == RunStatus.PAUSED:
        return f"is waiting for {waiting_text(run, waiting)}"
    if run.status == RunStatus.NEEDS_REVIEW:
        return "is waiting for a review"
    if run.status == RunStatus.RESUMING:
        return "is resuming after the decision…"
    latest = (progress or [""])[-1]
    if latest:  # "ops called restart_service" (plain text: Slack shows it as such)
        return "is working: " + (latest if len(latest) <= 80 else latest[:79] + "…")
    return "is working on it…"


def turn_progress(
    run: RunRecord, progress: list[str] | None = None, waiting: list[CallRecord] | None = None
) -> str:
    """A follow-up turn's message in the run's thread before its answer: what the agent is
    doing now (working, waiting with links to the requests, resuming) and its latest steps;
    it becomes the answer once the agent writes one."""
    if run.status == RunStatus.PAUSED:
        links = _links(run, waiting)
        now = f":raised_hand: _waiting for {waiting_text(run, waiting)}_" + (
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
