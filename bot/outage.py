"""A Redis outage is an expected condition, told once: one WARNING when it starts, one INFO
when it ends, a gauge (`approval_bot_redis_up`) and a counter of the time down; no traceback
per request, per worker poll or per projector pass.

Every place that catches a failure and would log it asks `outage.absorbs(exc)` first: when the
failure is Redis being unreachable (a refused or lost connection, a timeout), the outage is
noted (and, the first time, a probe starts that pings Redis until it answers) and the caller
logs nothing more; the person concerned is still told, as before. Anything else is the
caller's to log as it always did.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import Awaitable, Callable

import redis.exceptions

from bot import metrics
from bot.errors import cause_of
from bot.stopping import cancel_and_wait

log = logging.getLogger(__name__)

Ping = Callable[[], Awaitable[object]]
UNREACHABLE = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


def unreachable(exc: BaseException) -> bool:
    """Whether `exc`, or what it was raised from, is redis-py failing to reach Redis (a
    refused or lost connection, a timeout): nothing else counts."""
    return cause_of(exc, UNREACHABLE) is not None


class Outage:
    """This process's view of Redis: up, or down since when (see the module docstring)."""

    def __init__(self) -> None:
        self.since: float | None = None  # monotonic start of the outage in progress
        self._ping: Ping | None = None
        self._interval = 1.0
        self._probe: asyncio.Task[None] | None = None
        self.recoveries = 0  # outages ended so far: what a write lost in one may need redone
        metrics.REDIS_UP.set(1)

    def attach(self, ping: Ping, interval: float = 1.0) -> None:
        """How to tell that Redis is back (the runtime's client's PING), and how often."""
        self._ping = ping
        self._interval = interval

    @property
    def down(self) -> bool:
        return self.since is not None

    def absorbs(self, exc: BaseException) -> bool:
        """True when `exc` is Redis being unreachable: noted here, and the caller logs
        nothing more. False for anything else (the caller logs it as usual)."""
        if not unreachable(exc):
            return False
        if self.since is None:
            self.since = time.monotonic()
            metrics.REDIS_UP.set(0)
            log.warning(
                "Redis is unreachable (%s: %s); requests that need it are answered with an "
                "apology until it is back",
                type(exc).__name__, exc,
            )  # fmt: skip
            self._start_probe()
        return True

    def _start_probe(self) -> None:
        if self._ping is None or (self._probe is not None and not self._probe.done()):
            return
        with contextlib.suppress(RuntimeError):  # no running loop: the next failure starts it
            self._probe = asyncio.get_running_loop().create_task(self._until_back())

    async def _until_back(self) -> None:
        assert self._ping is not None
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self._ping()
            except Exception:
                continue
            self.back()
            return

    def back(self) -> None:
        """Redis answered again: the outage (if any) ends here."""
        if self.since is None:
            return
        down = time.monotonic() - self.since
        self.since = None
        self.recoveries += 1
        metrics.REDIS_UP.set(1)
        metrics.REDIS_DOWN_SECONDS.inc(down)
        log.info("Redis is reachable again, after %.1f s", down)

    async def detach(self) -> None:
        """The runtime is closing its client: no more probing; an outage in progress is
        forgotten (the next runtime in this process starts with Redis taken as up)."""
        if self._probe is not None:
            await cancel_and_wait(self._probe)
            self._probe = None
        self._ping = None
        self.since = None
        metrics.REDIS_UP.set(1)


# One per process: every layer that catches failures reports to the same outage.
OUTAGE = Outage()


def log_failure(
    logger: logging.Logger, message: str, *args: object, level: int = logging.ERROR
) -> None:
    """In an `except` block: log the failure being handled with its traceback at `level`,
    unless it is Redis being unreachable, which `OUTAGE` tells once for the whole outage."""
    exc = sys.exc_info()[1]
    if exc is not None and OUTAGE.absorbs(exc):
        return
    logger.log(level, message, *args, exc_info=True)
