"""A clock that a test moves forward, so that time-based behaviour (a call's expiry, its
reminders, its escalation) happens at once instead of after real seconds (the model:
Temporal's time-skipping test environment).

    clock = SkippingClock()
    async with BotHarness(redis_url, agents, policy, clock=clock) as bot:
        ...
        clock.advance(2)  # the two-second expiry is due now; the timer loop fires it

It runs with real time (so everything not driven by it goes on as usual) plus what the test
skipped; it never goes back. `SkippingClock(start=t)` begins at Unix time `t` instead of now: a
test that loads records written on another day (a fixture of an older layout, its calls timed
then) runs as if just after they were written, however long ago that is.
"""

from __future__ import annotations

import asyncio
import contextlib
import time


class SkippingClock:
    """Real time plus the seconds `advance` skipped (a `bot.clock.Clock`)."""

    def __init__(self, start: float | None = None) -> None:
        self.skipped = 0.0
        self._behind = 0.0 if start is None else time.time() - start  # of time() only
        self._moved = asyncio.Event()  # set (and replaced) by each `advance`: sleepers look

    def advance(self, seconds: float) -> None:
        """Move time forward by `seconds` (a sleep on this clock ends that much sooner)."""
        if seconds < 0:
            raise ValueError("a clock does not go back")
        self.skipped += seconds
        moved, self._moved = self._moved, asyncio.Event()
        moved.set()

    def time(self) -> float:
        return time.time() - self._behind + self.skipped

    def monotonic(self) -> float:
        return time.monotonic() + self.skipped

    async def sleep(self, seconds: float) -> None:
        """Ends when `seconds` have passed on this clock, real or skipped."""
        until = self.monotonic() + seconds
        while (left := until - self.monotonic()) > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._moved.wait(), left)
