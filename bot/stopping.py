"""Stopping a task for sure, on Python 3.11 too.

On Python 3.11 `asyncio.wait_for` drops a cancellation that arrives in the moment its inner
future completes: it returns the result, and the cancelled task runs on (CPython gh-86296,
fixed in 3.12 only). redis-py sends every command under `asyncio.wait_for`, so cancelling a
task in the middle of a Redis call was lost about one time in three in a tight loop (measured
with `PING`). `task.cancel(); await task` then waited for ever: a projector pass kept renewing
its lease of a run and never posted the run's result (the outputs a loaded CI machine waited
minutes for), and a worker's job slot could hang the same way.

`cancel_and_wait` cancels again until the task is done; the loops it stops have nothing to
clean up that a second cancellation could interrupt.
"""

from __future__ import annotations

import asyncio
from typing import Any

AGAIN_AFTER = 0.1  # seconds before a cancellation that was lost is made again


async def cancel_and_wait(
    task: asyncio.Future[Any] | None, again_after: float = AGAIN_AFTER
) -> None:
    """Cancel `task` and return once it is done (its exception, if any, is retrieved)."""
    if task is None:
        return
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=again_after)
    if not task.cancelled():
        task.exception()  # retrieved: never "exception was never retrieved"
