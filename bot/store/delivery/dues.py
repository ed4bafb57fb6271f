"""When what this process indexed for later falls due: its loop (the projector, the App Home
publisher) looks at its index then, not sooner. What it indexed due now wakes the loop at once
(an `asyncio.Event` beside this), so the loop's other looks are only for what other processes
indexed (#32: they are no longer frequent after every Slack request)."""

from __future__ import annotations

import heapq
import time

LIMIT = 4096  # moments remembered at most (past it, the loop's idle look finds the rest)


def now_ms() -> float:
    return time.time() * 1000


class Dues:
    """The moments (ms, this process's clock, as the index's scores) at which entries this
    process indexed fall due, the earliest first, until a look passes them."""

    def __init__(self) -> None:
        self._heap: list[float] = []

    def add(self, at: float) -> None:
        """An entry indexed as due at `at` (ms); nothing kept when it is due already."""
        if at > now_ms() and len(self._heap) < LIMIT:
            heapq.heappush(self._heap, at)

    def next(self) -> float | None:
        """The earliest moment (ms) no look has passed; None: none."""
        return self._heap[0] if self._heap else None

    def looked(self, at: float) -> None:
        """A claim at `at` (ms) took what was due then: the moments up to it are passed."""
        heap = self._heap
        while heap and heap[0] <= at:
            heapq.heappop(heap)

    def wait(self, at_most: float, margin: float) -> float | None:
        """Seconds until the next look should be for the earliest moment (`margin` after it:
        asyncio may run a timer a little early, and the claim must find the entry due), when
        that is sooner than `at_most`; None otherwise."""
        due = self.next()
        if due is None:
            return None
        until = max(0.0, (due - now_ms()) / 1000) + margin
        return until if until < at_most else None
