"""User groups from Slack's `usergroups.list`: the service's GroupDirectory.

A storm of clicks must not become a storm of lookups (Slack rate-limits `usergroups.list`, and
every refused lookup refuses a click), and a click must not wait for Slack when the bot already
knows the answer. So, per team:

- one lookup at a time: concurrent callers share the one in flight (single flight);
- its result is fresh for `ttl`; a stale one (up to `max_stale` old) is served at once while
  one refresh runs in the background;
- a failed lookup is remembered for `failure_ttl`: callers get the same reason without a call;
- with nothing usable cached, a caller waits at most `wait` seconds, then is refused with the
  reason (fail closed: "not allowed", never "allowed"); the lookup goes on for the next caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from dataclasses import dataclass

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.service.ports import GroupLookupError

log = logging.getLogger(__name__)

CACHE_SECONDS = 60.0
FAILURE_SECONDS = 10.0
# Past this age a cached list is not trusted at all (people leave groups): lookups wait again.
MAX_STALE_SECONDS = 600.0
WAIT_SECONDS = 2.0


@dataclass
class _Entry:
    """What is known of one team's groups: the last list fetched, the last failure."""

    groups: dict[str, frozenset[str]] | None = None
    fetched_at: float = -math.inf
    error: str = ""
    failed_at: float = -math.inf


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
        self.ttl = ttl
        self.failure_ttl = failure_ttl
        self.max_stale = max(max_stale, ttl)
        self.wait = wait
        self._entries: dict[str, _Entry] = {}
        self._inflight: dict[str, asyncio.Task[None]] = {}

    async def members(self, team_id: str, ref: str) -> frozenset[str]:
        groups = await self._groups(team_id)
        if ref not in groups:
            raise GroupLookupError("no such user group in this workspace")
        return groups[ref]

    def forget(self) -> None:
        """Drop everything known (fetched lists and remembered failures): the next lookup asks
        Slack. Lookups in flight still finish and record what they learn."""
        self._entries.clear()

    async def close(self) -> None:
        """Stop the lookups still in flight (on shutdown)."""
        tasks = list(self._inflight.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _groups(self, team_id: str) -> dict[str, frozenset[str]]:
        entry = self._entries.setdefault(team_id, _Entry())
        known = self._known(team_id, entry, refresh=True)
        if known is not None:
            return known
        try:
            await asyncio.wait_for(asyncio.shield(self._refresh(team_id)), self.wait)
        except TimeoutError:
            raise GroupLookupError(
                f"Slack did not list the user groups within {self.wait:g} s"
            ) from None
        entry = self._entries.setdefault(team_id, _Entry())  # forget() may have replaced it
        known = self._known(team_id, entry, refresh=False)
        if known is None:
            raise GroupLookupError(entry.error or "Slack did not list the user groups")
        return known

    def _known(
        self, team_id: str, entry: _Entry, *, refresh: bool
    ) -> dict[str, frozenset[str]] | None:
        """The groups to answer with without waiting (refreshing them in the background when
        stale); raises the remembered failure while it is recent; None: a lookup must be
        waited for."""
        now = time.monotonic()
        age = now - entry.fetched_at
        recent_failure = (
            now - entry.failed_at < self.failure_ttl and entry.failed_at > entry.fetched_at
        )
        if entry.groups is not None and age < self.ttl:
            return entry.groups
        if entry.groups is not None and age < self.max_stale:
            if refresh and not recent_failure:
                self._refresh(team_id)
            return entry.groups
        if recent_failure:
            raise GroupLookupError(entry.error)
        return None

    def _refresh(self, team_id: str) -> asyncio.Task[None]:
        """The team's lookup in flight, started if there is none."""
        task = self._inflight.get(team_id)
        if task is None:
            task = asyncio.create_task(self._fetch(team_id), name=f"usergroups.list {team_id}")
            self._inflight[team_id] = task
            task.add_done_callback(lambda _: self._inflight.pop(team_id, None))
        return task

    async def _fetch(self, team_id: str) -> None:
        """One `usergroups.list`; its outcome, success or failure, is recorded (never raised)."""
        try:
            response = await self.client.usergroups_list(team_id=team_id, include_users=True)
        except Exception as exc:
            self._failed(team_id, exc)
            return
        groups: dict[str, frozenset[str]] = {}
        for group in response.get("usergroups") or []:
            members = frozenset(str(u) for u in group.get("users") or [])
            groups[str(group.get("id"))] = members
            if group.get("handle"):
                groups["@" + str(group["handle"])] = members
        entry = self._entries.setdefault(team_id, _Entry())
        entry.groups, entry.fetched_at = groups, time.monotonic()

    def _failed(self, team_id: str, exc: Exception) -> None:
        entry = self._entries.setdefault(team_id, _Entry())
        if isinstance(exc, SlackApiError):
            entry.error = f"Slack answered {exc.response.get('error', 'an error')}"
        else:  # network trouble: say so, grant nothing
            entry.error = f"Slack could not be reached: {type(exc).__name__}"
        entry.failed_at = time.monotonic()
        log.warning("could not list the user groups of team %s: %s", team_id, entry.error)
