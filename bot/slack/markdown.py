"""An agent's Markdown as Slack mrkdwn, for its answers: bold, italics, strikethrough, headings,
lists, links and code keep their meaning. It works on text already escaped (`bot.untrusted.
escape`: `&`, `<` and `>` are entities), so nothing in the agent's words can become a mention,
a channel ping or a link the bot did not make: the only `<...>` it writes are links to http(s)
URLs with their own text. Code (fenced blocks and inline spans) is left exactly as written.

A link whose text looks like an address (a URL, a domain name, an e-mail or IP address) shows
the address it opens instead, on every path the agent's words take (`to_mrkdwn` for posted and
updated messages, `safe_markdown` for Slack's streams): `[https://bank.example](https://evil.
example)` would read as one address and open another. The text is dropped rather than shown
beside the address: Slack links a bare address by itself, so "https://bank.example
(evil.example)" would still offer a link to the address the text names."""

from __future__ import annotations

import re
import unicodedata

from bot.untrusted import ZWSP, clean, reveal

FENCE = re.compile(r"```.*?(?:```|\Z)", re.S)
INLINE_CODE = re.compile(r"`[^`\n]+`")
LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^\s()|]+)\)")
BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__")
ITALIC = re.compile(r"(?<![*\w])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![*\w])")
STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)
BULLET = re.compile(r"^([ \t]*)[-*+][ \t]+", re.M)
# What a reader takes for an address: a URL (a scheme, `www.`), a domain name (labels joined
# by dots, ending in two letters or more: `bank.example`, `user@bank.example`), an IPv4
# address. Characters that browsers (or readers) take for dots count as dots.
_DOT = "[.\u2024\u3002\uff0e\uff61\ufe52]"
ADDRESS = re.compile(
    rf"[a-z][a-z0-9+.-]*:/|\bwww{_DOT}"
    rf"|(?<![\w-])(?:[^\W_][\w-]*{_DOT})+[^\W\d_]{{2,}}(?![\w-])"
    rf"|\b\d{{1,3}}(?:{_DOT}\d{{1,3}}){{3}}\b",
    re.IGNORECASE,
)
_REVEALED = re.compile(r"&lt;U\+[0-9A-F]{4,6}&gt;")  # an invisible character, written out


def looks_like_address(label: str) -> bool:
    """Whether a link's text could be read as where it leads (see the module docstring).
    Invisible characters are ignored (`bank<U+200B>.example` reads as `bank.example`)."""
    seen = "".join(c for c in label if unicodedata.category(c) != "Cf")
    return ADDRESS.search(seen) is not None


# A placeholder for code while the rest is rewritten (private-use characters, never typed).
HOLD = "\ue000{}\ue001"
HELD = re.compile("\ue000(\\d+)\ue001")


def to_mrkdwn(escaped: str) -> str:
    """Markdown (already escaped for Slack) as mrkdwn."""
    held: list[str] = []

    def keep(piece: str) -> str:
        held.append(piece)
        return HOLD.format(len(held) - 1)

    def link(match: re.Match[str]) -> str:
        # Slack's `<url|text>`; the text cannot end the link early (`>` is an entity here).
        # A text that looks like an address: the address it opens, as Slack shows a bare link.
        label = match.group(1).replace("|", "\u2223")
        if looks_like_address(_REVEALED.sub("", label).replace("&amp;", "&")):
            return keep(f"<{match.group(2)}>")
        return keep(f"<{match.group(2)}|{label}>")

    text = FENCE.sub(lambda m: keep(m.group(0)), escaped)
    text = INLINE_CODE.sub(lambda m: keep(m.group(0)), text)
    text = LINK.sub(link, text)
    # Bold is marked apart first, so that italics do not take its asterisks.
    text = HEADING.sub(lambda m: f"\ue002{m.group(1)}\ue003", text)
    text = BOLD.sub(lambda m: f"\ue002{m.group(1) or m.group(2)}\ue003", text)
    text = ITALIC.sub(lambda m: f"_{m.group(1)}_", text)
    text = STRIKE.sub(lambda m: f"~{m.group(1)}~", text)
    text = BULLET.sub(lambda m: f"{m.group(1)}• ", text)
    text = text.replace("\ue002", "*").replace("\ue003", "*")
    return HELD.sub(lambda m: held[int(m.group(1))], text)


# Slack's own markdown (`markdown_text` of its streaming methods): the agent's words are sent
# as they are, but nothing in them can become a mention, a channel ping or a special link.
_SPECIAL = re.compile(r"<(?=\S)|@(?=(?:here|channel|everyone)\b)", re.I)
# Markdown's inline link: `[text](destination)` or `[text](<destination>)`, with or without a
# title (`"..."` or `'...'`).
MD_LINK = re.compile(
    r"\[([^\]\n]+)\]\((?:<([^<>\s]+)>|([^()\s\[\]<>]+))"
    r"(?:[ \t]+(?:\"[^\"\n]*\"|'[^'\n]*'))?[ \t]*\)"
)
# The start of what may still become such a link (its text, or its destination, unfinished).
OPEN_LINK = re.compile(r"\[[^\]\n]*(?:\]\([^)\n]*)?\Z")


def _honest_link(match: re.Match[str]) -> str:
    """A Markdown link whose text looks like an address: the address it opens, as its text."""
    if not looks_like_address(match.group(1)):
        return match.group(0)
    url = match.group(2) or match.group(3)
    return f"[{url}]({url})"


def safe_markdown(text: str) -> str:
    """An agent's Markdown for Slack's markdown rendering: Slack's own syntax (`<@U...>`,
    `<#C...>`, `<!here>`, `<url|text>`) and `@here` / `@channel` / `@everyone` broken by a
    zero-width space (shown, not acted on); Markdown's links `[text](url)` stay links, but one
    whose text looks like an address reads as the address it opens; invisible format
    characters written out."""
    honest = MD_LINK.sub(_honest_link, clean(text))
    return _SPECIAL.sub(lambda m: m.group(0) + ZWSP, reveal(honest))
