"""`approval-bot report`: what the audit trail says, one section per concern.

Each section reads the same `History` (one read of the trail for the window) and gives lines
for a terminal and plain JSON. A new concern is a new entry of `SECTIONS`; `approval-bot
report` prints every section, `approval-bot report NAME...` the ones named.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bot.learning import shadow_report
from bot.learning.history import History


@dataclass(frozen=True)
class Section:
    """One concern of the report."""

    name: str
    about: str  # one line, for `--help`
    text: Callable[[History, int], list[str]]  # (history, limit) -> lines
    data: Callable[[History], Any]  # plain JSON values


SECTIONS: dict[str, Section] = {
    section.name: section
    for section in (
        Section(
            "shadow",
            "per shadow rule (mode: shadow): how often it agreed with people, and every call "
            "it would have approved that people rejected",
            lambda history, limit: shadow_report.render(history, limit=limit),
            lambda history: [r.as_json() for r in shadow_report.shadow_report(history)],
        ),
    )
}


def report_text(history: History, names: list[str], *, limit: int) -> list[str]:
    """The named sections (all, when none is named) as lines, a blank line between them."""
    lines: list[str] = []
    for name in names or list(SECTIONS):
        if lines:
            lines.append("")
        lines += SECTIONS[name].text(history, limit)
    return lines


def report_data(history: History, names: list[str]) -> dict[str, Any]:
    """The named sections (all, when none is named) as one JSON object, by section name."""
    return {
        "since": history.since,
        "until": history.until,
        **{name: SECTIONS[name].data(history) for name in names or list(SECTIONS)},
    }
