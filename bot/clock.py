"""The time that decides when a pending call's timers (expiry, reminders, escalation) are due.

Production uses `SYSTEM_CLOCK` (the machine's clocks and `asyncio.sleep`). It is passed in by
the runtime so that tests can run the same code on a clock they move forward
(`bot.testing.clock.SkippingClock`): a two-second expiry is skipped, not waited for.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    """Wall time (Unix seconds, as stored in Redis), a monotonic time, and sleeping."""

    def time(self) -> float: ...

    def monotonic(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clocks."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


SYSTEM_CLOCK: Clock = SystemClock()
