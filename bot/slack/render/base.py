"""The pieces every kind of message is built from: mrkdwn cut to Block Kit's limits, links to
messages, dates every reader sees in their own time zone, people as mentions, and a call's
timers in words."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from slack_sdk.models.blocks import Block, MarkdownTextObject

from bot.service.authorize import principal_parts
from bot.service.policy.rules import human
from bot.service.replies import Text, when
from bot.slack.replies import render
from bot.slack.text import escape, fit, inline
from bot.store.records import CallRecord, RunRecord

SECTION_LIMIT = 3000
ARGUMENTS_LIMIT = 2900
KIND_LABELS = {
    "function": "tool",
    "mcp": "MCP tool",
    "hosted_mcp": "hosted MCP tool",
    "shell": "shell",
    "apply_patch": "patch",
}
ARGUMENT_LABELS = {"shell": "Commands", "apply_patch": "Patch", "question": "Question"}

_web_base = "https://slack.com"


def md(text: str) -> MarkdownTextObject:
    """Every mrkdwn text goes through here: cut to Block Kit's 3,000 characters, with a note."""
    return MarkdownTextObject(text=fit(text, SECTION_LIMIT))


def as_dicts(blocks: list[Block]) -> list[dict[str, Any]]:
    return [block.to_dict() for block in blocks]


def use_slack_api(api_url: str) -> None:
    """Permalinks follow the Slack in use: its API URL's host is its web host (slack.com,
    GovSlack's slack-gov.com, or a stand-in's own address). The runtime calls this at start."""
    global _web_base
    parts = urlsplit(api_url)
    _web_base = f"{parts.scheme or 'https'}://{parts.netloc or 'slack.com'}"


def permalink(channel: str, ts: str) -> str:
    """A link to a message that Slack clients resolve without an API call."""
    return f"{_web_base}/archives/{channel}/p{ts.replace('.', '')}"


def slack_date(timestamp: float | str) -> str:
    """A time every reader sees in their own time zone (Slack's date formatting), with a UTC
    fallback for clients that cannot format it."""
    try:
        moment = int(float(timestamp))
    except ValueError:
        return escape(str(timestamp))
    return f"<!date^{moment}^{{date_short_pretty}} at {{time}}|{when(timestamp)}>"


def person(user_id: str) -> str:
    """A person by their user id, as Slack shows people: a mention (never a raw id)."""
    return f"<@{inline(user_id, 40)}>"


def mention(principal: str) -> str:
    """A principal as a mention that notifies: users <@U…>, groups <!subteam^S…>. A group
    handle cannot be pinged without its id (it is shown); "*" names nobody in particular."""
    if principal == "*":
        return "anyone in this channel"
    if principal[0] in "UW":
        return person(principal)
    if principal[0] == "S":
        return f"<!subteam^{inline(principal, 40)}>"
    return f"`{inline(principal, 80)}`"


def describe_principals(principals: tuple[str, ...] | list[str]) -> str:
    """Principals as people read them: users as mentions, groups by handle or id, never pinged."""
    return render(Text(principal_parts(principals)))


def principals_of(text: str) -> list[str]:
    """A call's stored list of principals (JSON), or none when it is not one."""
    try:
        found = json.loads(text) if text else []
    except ValueError:
        return []
    return [str(p) for p in found] if isinstance(found, list) else []


def approvers_text(call: CallRecord) -> str:
    """Who may decide the call (the escalation's people too, once it fired)."""
    named = principals_of(call.approvers)
    named += [p for p in call.escalated_principals() if p not in named]
    return describe_principals(named) or "the channel's approvers"


def asked_by(run: RunRecord, call: CallRecord) -> str:
    """Who asked for the call: "asked by @U1" (the run's starter), or, in a turn a follow-up's
    author began, "asked by @U2 · turn 2 of @U1's run"."""
    who = call.asked_by(run)
    if who == run.user_id:
        return f"asked by {person(who)}"
    turn = f"turn {call.turn}" if call.turn > 1 else "a turn"
    return f"asked by {person(who)} · {turn} of {person(run.user_id)}'s run"


def expiry_text(call: CallRecord) -> str:
    """When a waiting call expires, e.g. ":hourglass_flowing_sand: Expires Dec 3 at 04:46"."""
    if not call.expires_at:
        return ""
    return f":hourglass_flowing_sand: Expires {slack_date(call.expires_at)}"


def timers_text(call: CallRecord, who: str = "approvers") -> str:
    """E.g. "Reminds approvers every 1h (up to 3 times) · Escalates to @x after 4h" (expiry
    apart: `expiry_text`; the card's details show them)."""
    parts = []
    if call.remind_after and call.remind_max:
        times = "once" if call.remind_max == 1 else f"up to {call.remind_max} times"
        parts.append(f"Reminds {who} every {human(call.remind_after)} ({times})")
    escalated = call.escalated_principals()
    if escalated:
        parts.append(
            f"Escalated to {describe_principals(escalated)} {slack_date(call.escalated_at)}"
        )
    elif call.escalate_after and call.escalate_to:
        parts.append(
            f"Escalates to {describe_principals(principals_of(call.escalate_to))} "
            f"after {human(call.escalate_after)}"
        )
    return "  ·  ".join(parts)


def run_link(run: RunRecord, label: str = "run thread") -> str:
    """A link to the run's message (its thread), or '' before it is posted."""
    if not run.message_ts:
        return ""
    return f"<{permalink(run.channel_id, run.message_ts)}|{label}>"
