"""Channel members from Slack's `conversations.members`: the service's ChannelDirectory.

`approvers: ["*"]` means "anyone in this channel" (what the card's reminders say): the card is
seen only by the channel's members, and every other surface that lets a person decide, cancel
or see a run (the App Home, `/agent list`, status, cancel) asks this directory the same
question, so a private channel's runs never reach a non-member.

Cached like the user groups (`bot.slack.groups`), per channel:

- one lookup at a time: concurrent callers share the one in flight (single flight);
- its result is fresh for `ttl`; a stale one (up to `max_stale` old) is served at once while
  one refresh runs in the background;
- a failed lookup is remembered for `failure_ttl`: callers get the same reason without a call;
- with nothing usable cached, a caller waits at most `wait` seconds, then is refused with the
  reason (fail closed); the lookup goes on for the next caller.

A lookup reads every page (`limit` 1000 per page), at most `MAX_PAGES` pages: a channel larger
than that is refused with the reason rather than half-known.
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
MAX_STALE_SECONDS = 600.0  # past this age a list is not trusted at all (people leave)
WAIT_SECONDS = 2.0
PAGE = 1000
MAX_PAGES = 50  # 50,000 members

Key = tuple[str, str]  # (team, channel)


@dataclass
class _Entry:
    """What is known of one channel: its last member list, its last failure."""

    members: frozenset[str] | None = None
    fetched_at: float = -math.inf
    error: str = ""
    failed_at: float = -math.inf


class SlackChannels:
    """Answers "who is in this channel"; at most one lookup per channel in flight."""

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
        self._entries: dict[Key, _Entry] = {}
        self._inflight: dict[Key, asyncio.Task[None]] = {}

    async def members(self, team_id: str, channel: str) -> frozenset[str]:
        """The channel's members; raises GroupLookupError (with the reason) when unknown."""
        key = (team_id, channel)
        known = self._known(key, refresh=True)
        if known is not None:
            return known
        try:
            await asyncio.wait_for(asyncio.shield(self._refresh(key)), self.wait)
        except TimeoutError:
            raise GroupLookupError(
                f"Slack did not list the channel's members within {self.wait:g} s"
            ) from None
        known = self._known(key, refresh=False)
        if known is None:
            entry = self._entries.get(key) or _Entry()
            raise GroupLookupError(entry.error or "Slack did not list the channel's members")
        return known

    def forget(self) -> None:
        """Drop everything known: the next lookup asks Slack."""
        self._entries.clear()

    async def close(self) -> None:
        """Stop the lookups still in flight (on shutdown)."""
        tasks = list(self._inflight.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _known(self, key: Key, *, refresh: bool) -> frozenset[str] | None:
        """The members to answer with without waiting (refreshed in the background when
        stale); raises the remembered failure while it is recent; None: wait for a lookup."""
        entry = self._entries.setdefault(key, _Entry())
        now = time.monotonic()
        age = now - entry.fetched_at
        recent_failure = (
            now - entry.failed_at < self.failure_ttl and entry.failed_at > entry.fetched_at
        )
        if entry.members is not None and age < self.ttl:
            return entry.members
        if entry.members is not None and age < self.max_stale:
            if refresh and not recent_failure:
                self._refresh(key)
            return entry.members
        if recent_failure:
            raise GroupLookupError(entry.error)
        return None

    def _refresh(self, key: Key) -> asyncio.Task[None]:
        """The channel's lookup in flight, started if there is none."""
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.create_task(self._fetch(key), name=f"conversations.members {key[1]}")
            self._inflight[key] = task
            task.add_done_callback(lambda _: self._inflight.pop(key, None))
        return task

    async def _fetch(self, key: Key) -> None:
        """Every page of `conversations.members`; the outcome is recorded, never raised."""
        channel = key[1]
        members: set[str] = set()
        cursor = ""
        try:
            for _ in range(MAX_PAGES):
                response = await self.client.conversations_members(
                    channel=channel, limit=PAGE, cursor=cursor or None
                )
                members.update(str(u) for u in response.get("members") or [])
                cursor = str((response.get("response_metadata") or {}).get("next_cursor") or "")
                if not cursor:
                    break
            else:
                raise GroupLookupError(f"the channel has more than {PAGE * MAX_PAGES} members")
        except Exception as exc:
            self._failed(key, exc)
            return
        entry = self._entries.setdefault(key, _Entry())
        entry.members, entry.fetched_at = frozenset(members), time.monotonic()

    def _failed(self, key: Key, exc: Exception) -> None:
        entry = self._entries.setdefault(key, _Entry())
        if isinstance(exc, SlackApiError):
            entry.error = f"Slack answered {exc.response.get('error', 'an error')}"
        elif isinstance(exc, GroupLookupError):
            entry.error = str(exc)
        else:  # network trouble: say so, grant nothing
            entry.error = f"Slack could not be reached: {type(exc).__name__}"
        entry.failed_at = time.monotonic()
        log.warning("could not list the members of channel %s: %s", key[1], entry.error)
