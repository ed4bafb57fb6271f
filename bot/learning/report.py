"""`approval-bot report`: what the audit trail says, one section per concern.

Each section reads the same `History` (one read of the trail for the window) and gives lines
for a terminal, plain JSON and, for a table, CSV. A new concern is a new entry of `SECTIONS`;
`approval-bot report` prints every section, `approval-bot report NAME...` the ones named.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bot.learning import reviews, shadow_report
from bot.learning.history import History


@dataclass(frozen=True)
class Options:
    """What the command was asked for, and the settings a section reads."""

    limit: int = 20  # calls listed per list (0: all)
    channel: str = ""  # only this channel ("": every one)
    read_chars_per_second: float = 500.0  # APPROVAL_BOT_REVIEW_READ_CHARS_PER_SECOND


@dataclass(frozen=True)
class Section:
    """One concern of the report."""

    name: str
    about: str  # one line, for `--help`
    text: Callable[[History, Options], list[str]]
    data: Callable[[History, Options], Any]  # plain JSON values
    csv: Callable[[History, Options], str] | None = None  # a table's rows, when it is one


def _reviews(history: History, options: Options) -> list[reviews.ReviewFigures]:
    return reviews.review_figures(
        history, read_chars_per_second=options.read_chars_per_second, channel=options.channel
    )


SECTIONS: dict[str, Section] = {
    section.name: section
    for section in (
        Section(
            "shadow",
            "per shadow rule (mode: shadow): how often it agreed with people, and every call "
            "it would have approved that people rejected",
            lambda history, options: shadow_report.render(history, limit=options.limit),
            lambda history, _: [r.as_json() for r in shadow_report.shadow_report(history)],
        ),
        Section(
            "reviews",
            "per approver and channel: time to decision (p50, p95), approvals, rejections, "
            "decisions faster than the card can be read, folded cards decided unopened, "
            "expiries, rubber-stamp alarms",
            lambda history, options: reviews.render(_reviews(history, options), history),
            lambda history, options: [r.as_json() for r in _reviews(history, options)],
            lambda history, options: reviews.csv_text(_reviews(history, options)),
        ),
    )
}
# `--csv` with no section named: the tables.
TABLES = [name for name, section in SECTIONS.items() if section.csv is not None]


def report_text(history: History, names: list[str], options: Options) -> list[str]:
    """The named sections (all, when none is named) as lines, a blank line between them."""
    lines: list[str] = []
    for name in names or list(SECTIONS):
        if lines:
            lines.append("")
        lines += SECTIONS[name].text(history, options)
    return lines


def report_data(history: History, names: list[str], options: Options) -> dict[str, Any]:
    """The named sections (all, when none is named) as one JSON object, by section name."""
    return {
        "since": history.since,
        "until": history.until,
        **{name: SECTIONS[name].data(history, options) for name in names or list(SECTIONS)},
    }


def report_csv(history: History, name: str, options: Options) -> str:
    """Section `name` (one of `TABLES`) as CSV."""
    table = SECTIONS[name].csv
    assert table is not None
    return table(history, options)
