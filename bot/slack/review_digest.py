"""The weekly review digest as Slack shows it (bot/service/oversight/review_digest.py decides when
and for which channel): one message to the channel, a line for everyone and one per approver,
who is mentioned, so the digest reaches the people it is about.

The figures come from the audit trail; the ids in it came from Slack, but are shown as
untrusted text all the same: an approver is mentioned only when their id is a user id, and
everything else is escaped."""

from __future__ import annotations

import time

from slack_sdk.web.async_client import AsyncWebClient

from bot.learning.reviews import EVERYONE, USER_ID, ReviewFigures
from bot.slack.api.serving import serving
from bot.slack.text import fit, inline

PEOPLE_SHOWN = 30  # approvers listed; the rest are counted (the report lists them all)
TEXT_LIMIT = 3900


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 90:
        return f"{value:.0f} s"
    return f"{value / 60:.0f} min" if value < 5400 else f"{value / 3600:.1f} h"


def _plural(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def figures_line(row: ReviewFigures) -> str:
    """One row's figures, in words."""
    parts = [
        f"{_plural(row.decisions, 'decision', 'decisions')} "
        f"({row.approvals} approved, {row.rejections} rejected)"
    ]
    if row.seconds:
        parts.append(f"time to decision p50 {_seconds(row.p50)}, p95 {_seconds(row.p95)}")
    if row.too_fast:
        parts.append(f"{row.too_fast} faster than the card can be read")
    if row.unopened:
        parts.append(f"{_plural(row.unopened, 'folded card', 'folded cards')} decided unopened")
    if row.expiries:
        parts.append(f"{row.expiries} expired")
    if row.alarms:
        parts.append(_plural(row.alarms, "rubber-stamp alarm", "rubber-stamp alarms"))
    return "; ".join(parts)


def who(approver: str) -> str:
    """A mention of a user id; anything else as escaped text."""
    return f"<@{approver}>" if USER_ID.match(approver) else f"`{inline(approver, 40)}`"


def digest_text(channel: str, rows: list[ReviewFigures], week_end: float) -> str:
    """The digest of `channel` (its rows: everyone's first, then its approvers')."""
    since = time.strftime("%b %d", time.gmtime(week_end - 7 * 86400))
    until = time.strftime("%b %d %H:%M UTC", time.gmtime(week_end))
    lines = [f"*Review digest* for the week {since} to {until}: how closely calls were reviewed."]
    people = [r for r in rows if r.approver != EVERYONE]
    lines += [f"*Everyone*: {figures_line(r)}" for r in rows if r.approver == EVERYONE]
    lines += [f"{who(r.approver)}: {figures_line(r)}" for r in people[:PEOPLE_SHOWN]]
    if len(people) > PEOPLE_SHOWN:
        lines.append(f"_and {len(people) - PEOPLE_SHOWN} more approvers._")
    lines.append(
        f"_An approval is worth the reading behind it. Every figure: `approval-bot report "
        f"reviews --channel {inline(channel, 40)}`._"
    )
    return fit("\n".join(lines), TEXT_LIMIT)


class DigestPoster:
    """Posts a channel's digest (`bot.service.oversight.review_digest.PostDigest`)."""

    def __init__(self, client: AsyncWebClient) -> None:
        self.client = client

    async def post(
        self, team: str, channel: str, rows: list[ReviewFigures], week_end: float
    ) -> None:
        text = digest_text(channel, rows, week_end)
        if not team:  # an entry without its workspace: the one installation's token
            await self._post(channel, text)
            return
        with serving(team):  # that workspace's token
            await self._post(channel, text)

    async def _post(self, channel: str, text: str) -> None:
        await self.client.chat_postMessage(
            channel=channel, text=text, unfurl_links=False, unfurl_media=False
        )
