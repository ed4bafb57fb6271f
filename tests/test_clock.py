"""The test kit's skipping clock: time moved forward by a test, never back."""

from __future__ import annotations

import asyncio
import time

import pytest

from bot.clock import SYSTEM_CLOCK
from bot.testing.clock import SkippingClock


async def test_a_skipped_hour_ends_a_sleep_at_once() -> None:
    clock = SkippingClock()
    wall = clock.time()
    sleeper = asyncio.create_task(clock.sleep(3600))
    await asyncio.sleep(0)
    assert not sleeper.done()
    clock.advance(3600)
    await asyncio.wait_for(sleeper, 30)  # (had it slept on, an hour)
    assert clock.time() - wall >= 3600 and clock.monotonic() - time.monotonic() > 3599.99


async def test_a_short_sleep_ends_on_real_time_too() -> None:
    clock = SkippingClock()
    await asyncio.wait_for(clock.sleep(0.05), 30)
    with pytest.raises(ValueError):
        clock.advance(-1)


async def test_the_system_clock_is_the_machines() -> None:
    assert abs(SYSTEM_CLOCK.time() - time.time()) < 1
    assert abs(SYSTEM_CLOCK.monotonic() - time.monotonic()) < 1
    await SYSTEM_CLOCK.sleep(0)
