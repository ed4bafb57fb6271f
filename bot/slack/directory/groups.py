"""User groups from Slack's `usergroups.list`: the service's GroupDirectory.

A storm of clicks must not become a storm of lookups (Slack rate-limits `usergroups.list`, and
every refused lookup refuses a click), and a click must not wait for Slack when the bot already
knows the answer: one list per team, cached and shared as `bot.slack.directory.lookups` says.
"""

from __future__ import annotations

from slack_sdk.web.async_client import AsyncWebClient

from bot.service.ports import GroupLookupError
from bot.slack.api.serving import serving
from bot.slack.directory.lookups import (
    CACHE_SECONDS,
    FAILURE_SECONDS,
    MAX_STALE_SECONDS,
    WAIT_SECONDS,
    CachedLookup,
)

Groups = dict[str, frozenset[str]]  # `S...` id or `@handle` -> member ids


class SlackGroups:
    """Resolves `S...` ids and `@handles`; at most one `usergroups.list` per team in flight."""

    def __init__(
        self,
        client: AsyncWebClient,
        *,
        ttl: float = CACHE_SECONDS,
        failure_ttl: float = FAILURE_SECONDS,
        max_stale: float = MAX_STALE_SECONDS,
        wait: float = WAIT_SECONDS,
    ) -> None:
        self.client = client
        self.lookup: CachedLookup[str, Groups] = CachedLookup(
            self._fetch,
            "the user groups",
            ttl=ttl,
            failure_ttl=failure_ttl,
            max_stale=max_stale,
            wait=wait,
        )

    async def members(self, team_id: str, ref: str) -> frozenset[str]:
        groups = await self.lookup.get(team_id)
        if ref not in groups:
            raise GroupLookupError("no such user group in this workspace")
        return groups[ref]

    def forget(self) -> None:
        """Drop everything known: the next lookup asks Slack."""
        self.lookup.forget()

    async def close(self) -> None:
        """Stop the lookups still in flight (on shutdown)."""
        await self.lookup.close()

    async def _fetch(self, team_id: str) -> Groups:
        """One `usergroups.list`, by id and by handle."""
        with serving(team_id):
            response = await self.client.usergroups_list(team_id=team_id, include_users=True)
        groups: Groups = {}
        for group in response.get("usergroups") or []:
            members = frozenset(str(u) for u in group.get("users") or [])
            groups[str(group.get("id"))] = members
            if group.get("handle"):
                groups["@" + str(group["handle"])] = members
        return groups
