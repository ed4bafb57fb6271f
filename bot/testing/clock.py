"""A clock that a test moves forward, so that time-based behaviour (a call's expiry, its
reminders, its escalation) happens at once instead of after real seconds (the model:
Temporal's time-skipping test environment).

    clock = SkippingClock()
    async with BotHarness(redis_url, agents, policy, clock=clock) as bot:
        ...
        clock.advance(2)  # the two-second expiry is due now; the timer loop fires it

It runs with real time (so everything not driven by it goes on as usual) plus what the test
skipped; it never goes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import time


class SkippingClock:
    """Real time plus the seconds `advance` skipped (a `bot.clock.Clock`)."""

    def __init__(self) -> None:
        self.skipped = 0.0
        self._moved = asyncio.Event()  # set (and replaced) by each `advance`: sleepers look

    def advance(self, seconds: float) -> None:
        """Move time forward by `seconds` (a sleep on this clock ends that much sooner)."""
        if seconds < 0:
            raise ValueError("a clock does not go back")
        self.skipped += seconds
        moved, self._moved = self._moved, asyncio.Event()
        moved.set()

    def time(self) -> float:
        return time.time() + self.skipped

    def monotonic(self) -> float:
        return time.monotonic() + self.skipped

    async def sleep(self, seconds: float) -> None:
        """Ends when `seconds` have passed on this clock, real or skipped."""
        until = self.monotonic() + seconds
        while (left := until - self.monotonic()) > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._moved.wait(), left)
