"""A cached Slack lookup (user groups, channel members) that a storm of clicks cannot turn into a
storm of calls, and that never makes a click wait for Slack when the answer is known.

Per key (a team's groups, a channel's members):

- one lookup at a time: concurrent callers share the one in flight (single flight);
- its result is fresh for `ttl`; a stale one (up to `max_stale` old) is served at once while
  one refresh runs in the background;
- a failed lookup is remembered for `failure_ttl`: callers get the same reason without a call;
- with nothing usable cached, a caller waits at most `wait` seconds, then is refused with the
  reason (fail closed: "not allowed", never "allowed"); the lookup goes on for the next caller.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.service.ports import GroupLookupError
from bot.slack.api.metered import error_code
from bot.stopping import cancel_and_wait

log = logging.getLogger(__name__)

CACHE_SECONDS = 60.0
FAILURE_SECONDS = 10.0
# Past this age a cached answer is not trusted at all (people leave): lookups wait again.
MAX_STALE_SECONDS = 600.0
WAIT_SECONDS = 2.0

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass
class _Entry(Generic[V]):
    """What is known for one key: the last answer fetched, the last failure."""

    value: V | None = None
    fetched_at: float = -math.inf
    error: str = ""
    failed_at: float = -math.inf


class CachedLookup(Generic[K, V]):
    """`get(key)` answers from `fetch(key)` as the module docstring says; `what` names the
    lookup in refusals and logs ("the user groups", "the channel's members")."""

    def __init__(
        self,
        fetch: Callable[[K], Awaitable[V]],
        what: str,
        *,
        ttl: float = CACHE_SECONDS,
        failure_ttl: float = FAILURE_SECONDS,
        max_stale: float = MAX_STALE_SECONDS,
        wait: float = WAIT_SECONDS,
    ) -> None:
        self.fetch = fetch
        self.what = what
        self.ttl = ttl
        self.failure_ttl = failure_ttl
        self.max_stale = max(max_stale, ttl)
        self.wait = wait
        self._entries: dict[K, _Entry[V]] = {}
        self._inflight: dict[K, asyncio.Task[None]] = {}

    async def get(self, key: K) -> V:
        """The answer for `key`; raises GroupLookupError (with the reason) when unknown."""
        known = self._known(key, refresh=True)
        if known is not None:
            return known
        try:
            await asyncio.wait_for(asyncio.shield(self._refresh(key)), self.wait)
        except TimeoutError:
            raise GroupLookupError(
                f"Slack did not list {self.what} within {self.wait:g} s"
            ) from None
        known = self._known(key, refresh=False)
        if known is None:
            entry = self._entries.get(key) or _Entry()
            raise GroupLookupError(entry.error or f"Slack did not list {self.what}")
        return known

    def forget(self) -> None:
        """Drop everything known (answers and remembered failures): the next lookup asks
        Slack. Lookups in flight still finish and record what they learn."""
        self._entries.clear()

    async def close(self) -> None:
        """Stop the lookups still in flight (on shutdown)."""
        for task in list(self._inflight.values()):
            await cancel_and_wait(task)

    def _known(self, key: K, *, refresh: bool) -> V | None:
        """The answer to give without waiting (refreshed in the background when stale);
        raises the remembered failure while it is recent; None: wait for a lookup."""
        entry = self._entries.setdefault(key, _Entry())
        now = time.monotonic()
        age = now - entry.fetched_at
        recent_failure = (
            now - entry.failed_at < self.failure_ttl and entry.failed_at > entry.fetched_at
        )
        if entry.value is not None and age < self.ttl:
            return entry.value
        if entry.value is not None and age < self.max_stale:
            if refresh and not recent_failure:
                self._refresh(key)
            return entry.value
        if recent_failure:
            raise GroupLookupError(entry.error)
        return None

    def _refresh(self, key: K) -> asyncio.Task[None]:
        """The key's lookup in flight, started if there is none."""
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.create_task(self._record(key), name=f"lookup {self.what} {key}")
            self._inflight[key] = task
            task.add_done_callback(lambda _: self._inflight.pop(key, None))
        return task

    async def _record(self, key: K) -> None:
        """One lookup; its outcome, success or failure, is recorded (never raised)."""
        try:
            value = await self.fetch(key)
        except Exception as exc:
            entry = self._entries.setdefault(key, _Entry())
            if isinstance(exc, SlackApiError):
                entry.error = f"Slack answered {error_code(exc, default='an error')}"
            elif isinstance(exc, GroupLookupError):
                entry.error = str(exc)
            else:  # network trouble: say so, grant nothing
                entry.error = f"Slack could not be reached: {type(exc).__name__}"
            entry.failed_at = time.monotonic()
            log.warning("could not list %s (%s): %s", self.what, key, entry.error)
            return
        entry = self._entries.setdefault(key, _Entry())
        entry.value, entry.fetched_at = value, time.monotonic()


class SlackLookup(Generic[K, V]):
    """One of Slack's directories (user groups, channel members) answered through a
    `CachedLookup` of `_fetch`; `what` names it in refusals and logs."""

    what = ""

    def __init__(self, client: AsyncWebClient, **timing: float) -> None:
        """`timing`: the lookup's `ttl`, `failure_ttl`, `max_stale` and `wait` (seconds;
        `CachedLookup`'s defaults for those not given)."""
        self.client = client
        self.lookup: CachedLookup[K, V] = CachedLookup(self._fetch, self.what, **timing)

    def forget(self) -> None:
        """Drop everything known: the next lookup asks Slack."""
        self.lookup.forget()

    async def close(self) -> None:
        """Stop the lookups still in flight (on shutdown)."""
        await self.lookup.close()

    async def _fetch(self, key: K) -> V:
        raise NotImplementedError
