"""The service's answers (`bot.service.replies.Text`) written as Slack mrkdwn: a person as a
mention, a literal as inline code, strong words in bold."""

from __future__ import annotations

from typing import assert_never

from bot.service.replies import Code, Mention, Part, Plain, Reply, Strong, Text
from bot.slack.text import inline


def render(text: Text) -> str:
    """`text` as Slack mrkdwn."""
    return "".join(_part(part) for part in text.parts)


def shown(reply: Reply) -> str:
    """What the person who acted is told, as Slack mrkdwn."""
    return render(reply.said)


def _part(part: Part) -> str:
    if isinstance(part, str):
        return part  # the service's own words, with untrusted values already made safe
    if isinstance(part, Mention):
        return f"<@{inline(part.user_id, 40)}>"
    if isinstance(part, Code):
        return f"`{inline(part.text, part.limit)}`"
    if isinstance(part, Plain):
        return inline(part.text, part.limit)
    if isinstance(part, Strong):
        return f"*{inline(part.text)}*"
    assert_never(part)
