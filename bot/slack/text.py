"""Slack renderings of untrusted text: code blocks and quotes (escaping is in `bot.untrusted`)."""

from __future__ import annotations

import re

from bot.untrusted import ZWSP, clean, escape, inline, truncate, unescape

__all__ = [
    "blockquote",
    "clean",
    "code_block",
    "escape",
    "fit",
    "inline",
    "quote",
    "truncate",
    "unescape",
]


def code_block(text: str, limit: int, whole: int = 0) -> str:
    """Untrusted text as a mrkdwn code block of at most `limit` characters, with a visible note
    when it was cut (here, or before it was stored: `whole` is then its full length)."""
    body = escape(clean(text)).replace("```", f"`{ZWSP}`{ZWSP}`")
    note_room = 80
    body, cut = truncate(body, limit - note_room)
    block = f"```{body}```"
    if cut or whole > len(text):
        block += f"\n_(truncated: showing {len(body):,} of {max(whole, len(text)):,} characters)_"
    return block


# Every character a client may break a line at (Unicode's line boundaries): each starts a line
# of its own, and so gets its own quote mark.
LINE_BREAKS = re.compile("\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")


def blockquote(text: str, limit: int, whole: int = 0) -> str:
    """Untrusted multi-line text as a mrkdwn quote (`>` on every line, whatever breaks it) of
    at most `limit` characters, the quoting included, with a visible note when it was cut (or
    was cut before it was stored: `whole` is then its full length in characters). Nothing in
    it can pass for a line of the bot's own."""
    lines = LINE_BREAKS.split(escape(clean(text)))
    body = "\n".join(">" + line for line in lines)
    cut_body, cut = truncate(body, limit - 80)
    shown = cut_body.count("\n") + 1
    if whole > len(text) or (cut and shown >= len(lines)):  # cut within its last line
        return cut_body + f"\n_(truncated)_ (the task has {max(whole, len(text)):,} characters)"
    if not cut:
        return body
    return cut_body + f"\n_(truncated: showing {shown:,} of {len(lines):,} lines)_"


def fit(text: str, limit: int) -> str:
    """Already-rendered mrkdwn cut to a block's limit, with a visible note (a last guard)."""
    if len(text) <= limit:
        return text
    body, _ = truncate(text, limit - 20)
    return body + "\n_(truncated)_"


def quote(text: str, limit: int, whole: int = 0) -> str:
    """Untrusted multi-line text shown as plain escaped text, cut with a note if too long (or
    if it was cut before it was stored: `whole` is then its full length)."""
    body = escape(clean(text))
    body, cut = truncate(body, limit - 60)
    return body + ("\n_(truncated)_" if cut or whole > len(text) else "")
