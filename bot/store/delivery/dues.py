"""When what this process indexed for later falls due: its loop (the projector, the App Home
publisher) is woken then, as it is at once by what this process indexed due now, so that its
other looks at its index are only for what other processes indexed (#32: they are no longer
frequent after every Slack request).

One timer for the earliest moment (a burst indexes hundreds): it wakes the loop `margin` after
it (asyncio may run a timer a little early, and the claim that follows must find the entry
due), and no sooner than `gap` after the timer's last wake-up, so a burst's moments cost a look
every `gap` at most, as a loop that polls every `gap` would."""

from __future__ import annotations

import asyncio
import heapq
import time

LIMIT = 4096  # moments remembered at most (past it, the loop's own idle looks find the rest)
MARGIN = 0.002  # seconds after a moment that its wake-up comes
GAP = 0.05  # seconds between two wake-ups of the timer at least


def now_ms() -> float:
    return time.time() * 1000


class Dues:
    """The moments (ms, this process's clock, as the index's scores) at which entries this
    process indexed fall due, until a look passes them; `woken` is set at each."""

    def __init__(self, woken: asyncio.Event, *, margin: float = MARGIN, gap: float = GAP) -> None:
        self.woken = woken
        self.margin = margin
        self.gap = gap
        self._heap: list[float] = []
        self._timer: asyncio.TimerHandle | None = None
        self._armed_for = 0.0  # the moment (ms) the timer is for
        self._fired = 0.0  # when (loop time) the timer last woke the loop

    def add(self, at: float) -> None:
        """An entry indexed as due at `at` (ms): the loop woken then (nothing when it is due
        already: the write's answer wakes it)."""
        if at <= now_ms() or len(self._heap) >= LIMIT:
            return
        heapq.heappush(self._heap, at)
        if self._timer is None or at < self._armed_for:
            self._arm()

    def next(self) -> float | None:
        """The earliest moment (ms) no look has passed; None: none."""
        return self._heap[0] if self._heap else None

    def looked(self, at: float) -> None:
        """A claim at `at` (ms) took what was due then: the moments up to it are passed."""
        heap = self._heap
        if not heap or heap[0] > at:
            return
        while heap and heap[0] <= at:
            heapq.heappop(heap)
        self._arm()

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._heap:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # (no loop: nothing waits)
            return
        self._armed_for = self._heap[0]
        delay = max(0.0, (self._armed_for - now_ms()) / 1000) + self.margin
        delay = max(delay, self._fired + self.gap - loop.time())
        self._timer = loop.call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._fired = asyncio.get_running_loop().time()
        self.looked(now_ms())  # (passed: the look it wakes takes them; re-armed for the next)
        self.woken.set()
        if self._timer is None and self._heap:
            self._arm()
