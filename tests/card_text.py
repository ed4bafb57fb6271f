"""A message's Block Kit as a reader sees it, in plain text: the golden files of the card tests
and the measure of a card's size. Slack's own tokens are resolved as Slack shows them (a
mention as @name, a link as its label, a date as its fallback), volatile values (ids, dates)
are replaced by placeholders, and controls are drawn as `[Label]`; mrkdwn emphasis and emoji
shortcodes are kept as written."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

DATE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC")
RUN_ID = re.compile(r"\b[0-9a-f]{16}\b")
TOKEN = re.compile(r"<([^<>\n]+)>")


def _token(match: re.Match[str], names: dict[str, str]) -> str:
    inner = match.group(1)
    if inner.startswith("@"):
        return "@" + names.get(inner[1:], inner[1:])
    if inner.startswith("!date^"):
        return inner.partition("|")[2]
    if inner.startswith("!subteam^"):
        return "@" + inner[len("!subteam^") :].partition("|")[0]
    if inner.startswith("#"):
        return "#" + inner[1:].partition("|")[0]
    if inner.startswith("!"):
        return "@" + inner[1:]
    href, _, label = inner.partition("|")
    return label or href


def readable(text: str, names: dict[str, str] | None = None) -> str:
    """mrkdwn with Slack's tokens resolved and volatile values replaced."""
    text = TOKEN.sub(lambda m: _token(m, names or {}), text)
    text = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return RUN_ID.sub("<id>", DATE.sub("<date>", text))


def _control(element: dict[str, Any]) -> str:
    if element.get("type") == "overflow":
        options = " | ".join(o["text"]["text"] for o in element.get("options", []))
        return f"[… {options}]"
    return f"[{element.get('text', {}).get('text', '')}]"


def render(blocks: list[dict[str, Any]], names: dict[str, str] | None = None) -> str:
    """The blocks as text, one block after the other."""
    out: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind in ("section", "header"):
            text = readable(str((block.get("text") or {}).get("text", "")), names)
            accessory = block.get("accessory")
            if accessory:
                text += "  " + _control(accessory)
            out.append(text)
        elif kind == "context":
            texts = [readable(str(e.get("text", "")), names) for e in block.get("elements", [])]
            out.append("  ".join(texts))
        elif kind == "actions":
            out.append(" ".join(_control(e) for e in block.get("elements", [])))
        elif kind == "divider":
            out.append("---")
    return "\n".join(out) + "\n"


@dataclass(frozen=True)
class Size:
    """What a reader takes in: characters and lines of the text rendering, and controls."""

    characters: int
    lines: int
    buttons: int
    menus: int

    def __str__(self) -> str:
        return f"{self.characters} characters, {self.lines} lines, {self.buttons} buttons" + (
            f" and {self.menus} menu" if self.menus else ""
        )


def size(blocks: list[dict[str, Any]], names: dict[str, str] | None = None) -> Size:
    text = render(blocks, names).rstrip("\n")
    controls = [
        e
        for b in blocks
        for e in [*b.get("elements", []), b.get("accessory") or {}]
        if b.get("type") in ("actions", "section") and isinstance(e, dict) and e.get("type")
    ]
    buttons = sum(e.get("type") == "button" for e in controls)
    menus = sum(e.get("type") == "overflow" for e in controls)
    return Size(len(text), text.count("\n") + 1, buttons, menus)
