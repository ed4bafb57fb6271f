"""Untrusted text (from models, tools and people) made safe to show inside chat markup.

The one place where `&`, `<` and `>` are escaped, lone surrogates replaced and text cut, so that
shown text cannot mention `@channel`, ping users or forge links. Used by the service layer for
sentences that quote untrusted values, and by the Slack layer for everything it renders.
"""

from __future__ import annotations

import re
import unicodedata

ZWSP = "\u200b"


def reveal(text: str) -> str:
    """Invisible format characters (Unicode category Cf: bidirectional controls such as U+202E
    and U+2066..U+2069, zero-width joiners and spaces, ...) written out as `<U+202E>`, so that
    what a reviewer reads is what runs: no reordered or hidden text."""
    if text.isascii():
        return text
    return "".join(f"<U+{ord(c):04X}>" if unicodedata.category(c) == "Cf" else c for c in text)


def escape(text: str) -> str:
    """Make untrusted text safe to show: invisible format characters revealed, then Slack's
    control characters escaped, so that the text is shown, never interpreted."""
    return reveal(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


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


def plain(text: str, limit: int = 200) -> str:
    """Untrusted text inside a stored sentence that is escaped once, where it is shown: one
    line, short, no backticks (so it cannot leave a code span). Not escaped here."""
    flat = " ".join(clean(text).split())
    return (flat[:limit] + "…" if len(flat) > limit else flat).replace("`", "'")


def inline(text: str, limit: int = 200) -> str:
    """Untrusted text shown inline (a tool or agent name): escaped, one line, short."""
    flat, cut = truncate(escape(" ".join(clean(text).split())), limit)
    return flat.replace("`", "'") + ("…" if cut else "")


_SECRETS = [
    (re.compile(r"(\b[a-z][a-z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@", re.IGNORECASE), r"\1***@"),
    (
        re.compile(
            r"([?&;](?:access_token|api[_-]?key|key|token|secret|password|passwd|sig|signature)=)"
            r"[^&\s]+",
            re.IGNORECASE,
        ),
        r"\1***",
    ),
    (re.compile(r"\b(?:sk|rk|pk)-[A-Za-z0-9_-]{8,}"), "***"),
    (re.compile(r"\bxox[abposre]-[A-Za-z0-9-]+"), "***"),
    (re.compile(r"\bxapp-[A-Za-z0-9-]+"), "***"),
    (re.compile(r"\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+", re.IGNORECASE), r"\1 ***"),
]


def redact(text: str) -> str:
    """Mask what looks like a credential (URL passwords, token parameters, API keys, Slack
    tokens, Authorization values) in error text before it is shown or stored."""
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text
