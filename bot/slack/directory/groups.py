"""User groups from Slack's `usergroups.list`: the service's GroupDirectory.

A storm of clicks must not become a storm of lookups (Slack rate-limits `usergroups.list`, and
every refused lookup refuses a click), and a click must not wait for Slack when the bot already
knows the answer: one list per team, cached and shared as `bot.slack.directory.lookups` says.
"""

from __future__ import annotations

from bot.service.ports import GroupLookupError
from bot.slack.api.serving import serving
from bot.slack.directory.lookups import SlackLookup

Groups = dict[str, frozenset[str]]  # `S...` id or `@handle` -> member ids


class SlackGroups(SlackLookup[str, Groups]):
    """Resolves `S...` ids and `@handles`; at most one `usergroups.list` per team in flight."""

    what = "the user groups"

    async def members(self, team_id: str, ref: str) -> frozenset[str]:
        groups = await self.lookup.get(team_id)
        if ref not in groups:
            raise GroupLookupError("no such user group in this workspace")
        return groups[ref]

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
