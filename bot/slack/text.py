"""Untrusted text in and out of Slack: the one place it is escaped, decoded and truncated.

Slack encodes `&`, `<` and `>` in message and command text; anything we show that came from a
model, a tool or a person is escaped again so that it cannot mention `@channel`, ping users,
or forge links, and so that it cannot close a code block it is shown in.
"""

from __future__ import annotations

ZWSP = "\u200b"


def escape(text: str) -> str:
    """Escape Slack's control characters so that text is shown, never interpreted."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def unescape(text: str) -> str:
    """Decode what Slack encoded, giving the text exactly as the person typed it."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def clean(text: str) -> str:
    """Replace lone surrogates (invalid in UTF-8, which Slack's API requires) with U+FFFD."""
    return text.encode("utf-8", "replace").decode("utf-8")


def truncate(text: str, limit: int) -> tuple[str, bool]:
    """Cut escaped `text` to at most `limit` characters, never inside an `&...;` entity;
    returns (text, was_cut)."""
    if len(text) <= limit:
        return text, False
    cut = text[:limit]
    amp = cut.rfind("&", max(0, limit - 5))
    if amp != -1 and ";" not in cut[amp:]:
        cut = cut[:amp]
    return cut, True


def code_block(text: str, limit: int) -> str:
    """Untrusted text as a mrkdwn code block of at most `limit` characters, with a visible note
    when it was cut."""
    body = escape(clean(text)).replace("```", f"`{ZWSP}`{ZWSP}`")
    note_room = 80
    body, cut = truncate(body, limit - note_room)
    block = f"```{body}```"
    if cut:
        block += f"\n_(truncated: showing {len(body):,} of {len(text):,} characters)_"
    return block


def inline(text: str, limit: int = 200) -> str:
    """Untrusted text shown inline (a tool or agent name): escaped, one line, short."""
    flat, cut = truncate(escape(" ".join(clean(text).split())), limit)
    return flat.replace("`", "'") + ("…" if cut else "")


def quote(text: str, limit: int) -> str:
    """Untrusted multi-line text shown as plain escaped text, cut with a note if too long."""
    body = escape(clean(text))
    body, cut = truncate(body, limit - 60)
    return body + ("\n_(truncated)_" if cut else "")
