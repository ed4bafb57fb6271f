"""User groups from Slack's `usergroups.list`, cached briefly: the service's GroupDirectory."""

from __future__ import annotations

import time

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.service.ports import GroupLookupError

CACHE_SECONDS = 60.0


class SlackGroups:
    """Resolves `S...` ids and `@handles`; one API call per team per minute at most."""

    def __init__(self, client: AsyncWebClient, *, ttl: float = CACHE_SECONDS) -> None:
        self.client = client
        self.ttl = ttl
        self._cache: dict[str, tuple[float, dict[str, frozenset[str]]]] = {}

    async def _groups(self, team_id: str) -> dict[str, frozenset[str]]:
        cached = self._cache.get(team_id)
        if cached is not None and time.monotonic() - cached[0] < self.ttl:
            return cached[1]
        try:
            response = await self.client.usergroups_list(team_id=team_id, include_users=True)
        except SlackApiError as exc:
            raise GroupLookupError(
                f"Slack answered {exc.response.get('error', 'an error')}"
            ) from exc
        except Exception as exc:  # network trouble: say so, grant nothing
            raise GroupLookupError(f"Slack could not be reached: {type(exc).__name__}") from exc
        groups: dict[str, frozenset[str]] = {}
        for group in response.get("usergroups") or []:
            members = frozenset(str(u) for u in group.get("users") or [])
            groups[str(group.get("id"))] = members
            if group.get("handle"):
                groups["@" + str(group["handle"])] = members
        self._cache[team_id] = (time.monotonic(), groups)
        return groups

    async def members(self, team_id: str, ref: str) -> frozenset[str]:
        groups = await self._groups(team_id)
        if ref not in groups:
            raise GroupLookupError("no such user group in this workspace")
        return groups[ref]
