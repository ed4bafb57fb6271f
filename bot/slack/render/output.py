"""The run's answer in its thread: the output (its Markdown as mrkdwn, escaped) in as many
messages as it takes, or the error; and an answer while the agent writes it."""

from __future__ import annotations

from bot.slack.answer_parts import split_answer
from bot.slack.markdown import to_mrkdwn
from bot.slack.text import escape, quote
from bot.store.records import RunRecord, RunStatus
from bot.untrusted import clean

OUTPUT_LIMIT = 3900
MAX_ANSWER_PARTS = 10  # an answer is at most this many thread messages (about 39,000 chars)
WRITING = "\n:writing_hand: _still writing…_"


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


def partial_answer(text: str) -> str:
    """An answer while the agent writes it (plain text, escaped here): never mistaken for a
    finished one. Empty: the agent turned to its tools after starting to write."""
    if not text:
        return ":hourglass_flowing_sand: _working on it…_"
    return to_mrkdwn(quote(text, OUTPUT_LIMIT - len(WRITING))) + WRITING
