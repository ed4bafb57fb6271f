"""Plain text for a terminal (or a CI log) from what the trail kept.

Tool and agent names, user ids and arguments come from agents and people: printed, they must
not move the cursor, recolour the screen or hide text. Every such value goes through
`printable`: control and invisible format characters are written as `\\u....` escapes, and long
values are cut.
"""

from __future__ import annotations

import json
import unicodedata
from datetime import UTC, datetime
from typing import Any

from bot.learning.history import DecidedCall


def printable(text: str, limit: int = 120) -> str:
    """`text` on one line, safe for a terminal, at most `limit` characters (with `…`)."""
    shown = "".join(
        f"\\u{ord(c):04x}" if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") else c
        for c in text
    )
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def compact(value: Any, limit: int = 120) -> str:
    """A JSON value (a subject, its `args`) as one printable line."""
    return printable(json.dumps(value, separators=(",", ":"), ensure_ascii=False), limit)


def when(stamp: float) -> str:
    """Unix seconds as `2026-11-02 14:03` UTC."""
    if not stamp:
        return "?"
    return datetime.fromtimestamp(stamp, tz=UTC).strftime("%Y-%m-%d %H:%M")


def by_whom(call: DecidedCall) -> str:
    """`rejected by U2`, `approved by the policy`, `expired`, `edited by U3`."""
    if call.outcome == "expired":
        return "expired undecided"
    who = printable(call.decider, 40) if call.decider else "the policy"
    return f"{call.outcome} by {who}"


def call_line(call: DecidedCall, *, subject_limit: int = 100) -> str:
    """One settled call: when, where, what, how it was settled, and its arguments."""
    what = f"{printable(call.agent, 40)}/{printable(call.tool, 60)}"
    subject = call.subject or {}
    shown = compact(subject.get("args", subject), subject_limit)
    return (
        f"{when(call.at)}  {printable(call.channel, 20)}  {what}  {by_whom(call)}  "
        f"{shown}  [{printable(call.approval_id, 60)}]"
    )


def count(number: int, noun: str) -> str:
    """`1 call`, `12 calls` (with thousands separators)."""
    return f"{number:,} {noun}{'' if number == 1 else 's'}"
