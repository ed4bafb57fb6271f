"""A long answer as several thread messages, each within what one Slack message shows well.

Slack cuts a message's text at about 4,000 characters in most clients. An answer longer than
that is split where a reader would pause: between paragraphs (a blank line), else between
lines, else between words; never inside an entity (`&amp;`). A code block split across two
messages is closed at the end of the first and opened again at the start of the next, so each
message renders on its own. At most `most` messages: the last then says how much was left out.
"""

from __future__ import annotations

import re

FENCE = "```"
ENTITY_TAIL = re.compile(r"&[#\w]{0,8}$")


def split_answer(text: str, limit: int, most: int) -> list[str]:
    """`text` (Slack mrkdwn, escaped) in parts of at most `limit` characters each."""
    if len(text) <= limit:
        return [text]
    room = limit - len(FENCE) * 2 - 2  # for a code block closed and opened again
    parts = _fenced(_packed(text, room))
    if len(parts) > most:
        left = sum(len(p) for p in parts[most:])
        note = f"\n_(truncated: {left:,} more characters not shown)_"
        parts = parts[:most]
        parts[-1] = parts[-1][: limit - len(note)] + note
    return parts


def _packed(text: str, room: int) -> list[str]:
    """Paragraphs packed greedily into parts of at most `room`; a paragraph too long alone is
    split by lines, and a line too long alone by words."""
    parts: list[str] = []
    for piece in _pieces(text, room):
        if parts and len(parts[-1]) + len(piece) <= room:
            parts[-1] += piece
        else:
            parts.append(piece)
    return [p.strip("\n") for p in parts if p.strip()]


def _pieces(text: str, room: int) -> list[str]:
    """`text` in pieces no longer than `room` that end where a reader pauses, in order; joined
    again they are `text`."""
    out: list[str] = []
    for paragraph in re.split(r"(?<=\n\n)", text):
        if len(paragraph) <= room:
            out.append(paragraph)
            continue
        for line in re.split(r"(?<=\n)", paragraph):
            while len(line) > room:
                cut = line.rfind(" ", 0, room)
                if cut <= room // 2:  # no space late enough: cut hard (not in an entity)
                    cut = room
                    tail = ENTITY_TAIL.search(line[:cut])
                    if tail is not None and tail.start() > 0:
                        cut = tail.start()
                out.append(line[:cut])
                line = line[cut:]
            out.append(line)
    return out


def _fenced(parts: list[str]) -> list[str]:
    """Each part with its code blocks whole: one left open is closed, and opened again next."""
    fenced: list[str] = []
    inside = False
    for part in parts:
        body = (FENCE + "\n" + part) if inside else part
        if part.count(FENCE) % 2 == 1:
            inside = not inside
        fenced.append(body + ("\n" + FENCE if inside else ""))
    return fenced
