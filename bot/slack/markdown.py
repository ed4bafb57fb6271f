"""An agent's Markdown as Slack mrkdwn, for its answers: bold, italics, strikethrough, headings,
lists, links and code keep their meaning. It works on text already escaped (`bot.untrusted.
escape`: `&`, `<` and `>` are entities), so nothing in the agent's words can become a mention,
a channel ping or a link the bot did not make: the only `<...>` it writes are links to http(s)
URLs with their own text. Code (fenced blocks and inline spans) is left exactly as written."""

from __future__ import annotations

import re

from bot.untrusted import ZWSP, clean, reveal

FENCE = re.compile(r"```.*?(?:```|\Z)", re.S)
INLINE_CODE = re.compile(r"`[^`\n]+`")
LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^\s()|]+)\)")
BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__")
ITALIC = re.compile(r"(?<![*\w])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![*\w])")
STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)
BULLET = re.compile(r"^([ \t]*)[-*+][ \t]+", re.M)
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
        label = match.group(1).replace("|", "\u2223")
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


def safe_markdown(text: str) -> str:
    """An agent's Markdown for Slack's markdown rendering: Slack's own syntax (`<@U...>`,
    `<#C...>`, `<!here>`, `<url|text>`) and `@here` / `@channel` / `@everyone` broken by a
    zero-width space (shown, not acted on); Markdown's links `[text](url)` stay links;
    invisible format characters written out."""
    return _SPECIAL.sub(lambda m: m.group(0) + ZWSP, reveal(clean(text)))
