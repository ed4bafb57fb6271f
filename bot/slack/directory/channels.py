"""Channel members from Slack's `conversations.members`: the service's ChannelDirectory.

`approvers: ["*"]` means "anyone in this channel" (what the card's reminders say): the card is
seen only by the channel's members, and every other surface that lets a person decide, cancel
or see a run (the App Home, `/agent list`, status, cancel) asks this directory the same
question, so a private channel's runs never reach a non-member.

Cached and shared per channel like the user groups (`bot.slack.directory.lookups`): single flight,
fresh for a while, stale-while-refresh, failures remembered, a cold lookup bounded.

A lookup reads every page (`limit` 1000 per page), at most `MAX_PAGES` pages: a channel larger
than that is refused with the reason rather than half-known.
"""

from __future__ import annotations

from bot.service.ports import GroupLookupError
from bot.slack.api.serving import serving
from bot.slack.directory.lookups import SlackLookup

PAGE = 1000
MAX_PAGES = 50  # 50,000 members

Key = tuple[str, str]  # (team, channel)


class SlackChannels(SlackLookup[Key, frozenset[str]]):
    """Answers "who is in this channel"; at most one lookup per channel in flight."""

    what = "the channel's members"

    async def members(self, team_id: str, channel: str) -> frozenset[str]:
        """The channel's members; raises GroupLookupError (with the reason) when unknown."""
        return await self.lookup.get((team_id, channel))

    async def _fetch(self, key: Key) -> frozenset[str]:
        """Every page of `conversations.members`."""
        members: set[str] = set()
        cursor = ""
        for _ in range(MAX_PAGES):
            with serving(key[0]):
                response = await self.client.conversations_members(
                    channel=key[1], limit=PAGE, cursor=cursor or None
                )
            members.update(str(u) for u in response.get("members") or [])
            cursor = str((response.get("response_metadata") or {}).get("next_cursor") or "")
            if not cursor:
                return frozenset(members)
        raise GroupLookupError(f"the channel has more than {PAGE * MAX_PAGES} members")
