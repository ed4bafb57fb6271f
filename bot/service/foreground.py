"""Acks first: deferrable background work waits for a lull in Slack's requests.

Everything of one process shares one event loop, and asyncio runs every ready callback before
it looks at its sockets again: fifty decision tasks made ready by fifty clicks delay the
answer to every new request by their CPU. Slack counts a late answer as a failure, while a
decision recorded half a second later is not noticed. So the transport counts the requests it
is answering (`request()`), and work that can wait (a click's decision, the worker's jobs just
read, the projector's and the App Home's next claims) first awaits `lull()`: at once when
nothing is in flight, otherwise when the last request in flight is answered or after
`max_wait` seconds at most, whichever comes first. A decision, once let go, counts as a
request in flight itself (its clicker waits for it: past the ack budget they are told "still
working"), so resumes and deliveries wait for the decisions too: acks first, decisions next,
the rest after.

Waiters are released in the order they came, a few per loop iteration, so that a large set
of deferred tasks never becomes ready all at once: between two releases the loop accepts new
requests, and a new request in flight stops the release of those not yet due. Decisions let go
then run at most `DECIDING` at a time, in the order they came (`deciding()`): asyncio runs
every ready callback between two looks at its sockets, and an ack takes several loop
iterations from its request's bytes to its answer, so fifty decisions running together put
fifty decisions' steps into each of them (#32: the slowest acks of a burst of clicks waited
mostly for decisions); a few at a time finish as soon, one after another.

Serving processes on one machine share its cores (`serve --processes`, `bot/processes.py`):
there the count of Slack requests is shared too (`Elsewhere`: each process publishes its own,
and a lull is a moment with no request in flight in any of them), so that one process's
resumes do not take a core from another's acks. Another process's requests ending is seen by
looking again every `PEER_POLL` seconds while they are the only ones in flight. A decision let
go counts in its own process only: it holds that process's resumes and deliveries, not the
others' (#32: with decisions shared, the process that got fewer of a burst's clicks sat idle
while the other decided its share, its own decisions and resumes waiting for them, a tenth of
a second of a core at the start of a burst of 200).

Collections wait for lulls too (`collect_at_lulls`, as the bot serves): the cyclic GC's
collections stop every request in flight in the process, and in a burst of clicks they came
at the bot's own allocations as often as every few dozen requests (a young collection 3-8 ms of
CPU, an older one up to 70 ms on a busy machine, each added to the ack of every click in
flight: #32). So while a Slack request is in flight here the collector is off, and it is on
again at the first loop iteration with none here nor in the other serving processes (a moment
with none here alone comes between two clicks of a burst, the next one arriving): what is due
is collected then, by the allocation that comes next, as usual. Bounded: past `GC_HELD_MAX`
new objects uncollected, a request that starts, or a look while only the other processes have
requests in flight, turns it on again (a process that never sees a lull collects as before).
"""

from __future__ import annotations

import asyncio
import collections
import gc
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Protocol

MAX_WAIT_SECONDS = 0.5  # the default of APPROVAL_BOT_LULL_MAX_SECONDS
# Waiters released per loop iteration (they are then ready together in the next one).
RELEASE_BATCH = 4
EARLY = 0.001  # asyncio may run a timer this much before its time
PEER_POLL = 0.003  # seconds between looks at other processes' requests while only they are busy
DECIDING = 4  # decisions let go that run at once (the others wait their turn, in order)
# A decision holds its turn this long at most: past it, it waits for something else than this
# process (Slack's directory, a modal being opened), and the next one may go.
TURN_SECONDS = 0.1
# New container objects left uncollected while requests are in flight, at most (about ten
# of the bot's young collections, `bot.runtime.GC_YOUNG`): past it, collections go on as usual.
GC_HELD_MAX = 70_000


class Elsewhere(Protocol):
    """The requests in flight in the other serving processes of this machine."""

    def publish(self, count: int) -> None:
        """Tell the others this process's count."""

    def others(self) -> int:
        """The others' counts, summed."""


class Foreground:
    """Counts the Slack requests being answered; lets background work wait for a lull.

    One per process, on one event loop. `max_wait` 0 disables the waiting."""

    def __init__(
        self,
        max_wait: float = MAX_WAIT_SECONDS,
        batch: int = RELEASE_BATCH,
        elsewhere: Elsewhere | None = None,
        deciding: int = DECIDING,
        turn: float = TURN_SECONDS,
        collect_at_lulls: bool = False,
    ) -> None:
        """`collect_at_lulls`: the cyclic GC is off while a Slack request is in flight here
        (see the module's docstring)."""
        self.max_wait = max_wait
        self.batch = max(1, batch)
        self._deciding = asyncio.Semaphore(max(1, deciding))
        self.turn = turn
        self.elsewhere = elsewhere  # the other serving processes' requests (None: alone)
        self._in_flight = 0  # Slack requests and decisions let go, in this process
        self._requests = 0  # of which Slack requests (the count the other processes see)
        # (deadline, future) in arrival order; deadlines ascend as max_wait is fixed.
        self._waiters: collections.deque[tuple[float, asyncio.Future[None]]] = collections.deque()
        self._pump: asyncio.TimerHandle | asyncio.Handle | None = None
        self.collect_at_lulls = collect_at_lulls
        self._gc_held = False  # the collector turned off here, to be turned on at a lull
        self._gc_look: asyncio.TimerHandle | asyncio.Handle | None = None

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def waiting(self) -> int:
        return sum(not f.done() for _, f in self._waiters)

    @contextmanager
    def request(self) -> Iterator[None]:
        """Around the answer to one Slack request, whatever way it ends."""
        with self._counted(shared=True):
            yield

    @contextmanager
    def _counted(self, *, shared: bool) -> Iterator[None]:
        """In flight here; `shared`: a Slack request, published to the other processes too."""
        self._in_flight += 1
        if shared:
            self._requests += 1
            if self.elsewhere is not None:
                self.elsewhere.publish(self._requests)
            if self.collect_at_lulls:
                self._hold_collections()
        try:
            yield
        finally:
            self._in_flight -= 1
            if shared:
                self._requests -= 1
                if self.elsewhere is not None:
                    self.elsewhere.publish(self._requests)
                if self._requests == 0 and self._gc_held:
                    self._lull_soon()
            if self._in_flight == 0 and self._waiters:
                self._schedule(soon=True)

    def _hold_collections(self) -> None:
        """A Slack request starts: the cyclic GC off until the next lull, unless too much is
        uncollected already (then on, and collecting as usual until that lull)."""
        if gc.get_count()[0] > GC_HELD_MAX:
            if self._gc_held:
                self._gc_held = False
                gc.enable()
        elif not self._gc_held and gc.isenabled():
            self._gc_held = True
            gc.disable()

    def _lull_soon(self) -> None:
        """The last request here ended: its answer is still to be written, in this same step,
        so the collector goes on again at the next loop iteration at the earliest (at once
        with no loop: a request closed as its process ends)."""
        if self._gc_look is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._gc_held = False
            gc.enable()
            return
        self._gc_look = loop.call_soon(self._let_collections_go)

    def _let_collections_go(self) -> None:
        """The collector on again at a lull: no Slack request in flight here nor in the other
        serving processes (which are looked at again every `PEER_POLL` while only they have
        some, as `lull` does), or too much left uncollected meanwhile. A request that starts
        here first keeps it off (its end looks again)."""
        self._gc_look = None
        if self._requests or not self._gc_held:
            return
        elsewhere = self.elsewhere is not None and self.elsewhere.others() > 0
        if elsewhere and gc.get_count()[0] <= GC_HELD_MAX:
            loop = asyncio.get_running_loop()
            self._gc_look = loop.call_later(PEER_POLL, self._let_collections_go)
            return
        self._gc_held = False
        gc.enable()

    def busy(self) -> bool:
        """Whether work that can wait would wait now (`lull`): a request in flight here or in
        another serving process (never with the waiting disabled)."""
        return self.max_wait > 0 and self._busy()

    @asynccontextmanager
    async def deciding(self) -> AsyncIterator[None]:
        """Around a click's decision once its lull came: it counts as a request in flight in
        this process from now on (what waits for a lull here waits for it, its turn included;
        the other serving processes do not), and it runs with at most `deciding - 1` others,
        the first come first, for `turn` seconds at most (see the module's docstring)."""
        with self._counted(shared=False):
            await self._deciding.acquire()
            released = False

            def release() -> None:
                nonlocal released
                if not released:
                    released = True
                    self._deciding.release()

            timer = asyncio.get_running_loop().call_later(self.turn, release)
            try:
                yield
            finally:
                timer.cancel()
                release()

    def alone(self) -> bool:
        """Whether the one Slack request in flight, here and in the other serving processes,
        is the caller's (a listener's), with nothing else waiting for a lull: its deferred work
        would then start as soon as it is answered (a click's read may go at once,
        `Decisions.read_ahead`). Never with the waiting disabled."""
        return (
            self.max_wait > 0
            and self._in_flight == 1
            and self._requests == 1
            and not self._waiters
            and (self.elsewhere is None or self.elsewhere.others() == 0)
        )

    def _busy(self) -> bool:
        """A request in flight here or in another serving process."""
        return self._in_flight > 0 or (self.elsewhere is not None and self.elsewhere.others() > 0)

    async def lull(self) -> None:
        """Return when no Slack request is in flight, or after `max_wait` seconds at most
        (a little more when many waiters are due together: they leave a few at a time)."""
        if self.max_wait <= 0 or not self._busy():
            return
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append((loop.time() + self.max_wait, waiter))
        if self._pump is None:
            self._schedule(soon=False)
        await waiter  # cancelled: the pump skips it

    def _schedule(self, *, soon: bool) -> None:
        """Run the pump in the next loop iteration (`soon`), or when the first waiter is due
        (sooner, every `PEER_POLL`, while only other processes have requests in flight)."""
        loop = asyncio.get_running_loop()
        if self._pump is not None:
            self._pump.cancel()
        if soon or not self._waiters:
            self._pump = loop.call_soon(self._release)
            return
        due = self._waiters[0][0]
        if self._in_flight == 0 and self.elsewhere is not None:
            due = min(due, loop.time() + PEER_POLL)
        self._pump = loop.call_at(due, self._release)

    def _release(self) -> None:
        """Let out up to `batch` waiters that may go (nothing in flight, or their wait is
        over), oldest first; then look again next iteration, or when the next one is due."""
        self._pump = None
        now = asyncio.get_running_loop().time()
        released = 0
        busy: bool | None = None  # (looked at once per release)
        while self._waiters and released < self.batch:
            deadline, waiter = self._waiters[0]
            if waiter.done():  # cancelled while waiting
                self._waiters.popleft()
                continue
            if busy is None:
                busy = self._busy()
            if busy and deadline > now + EARLY:
                break
            self._waiters.popleft()
            waiter.set_result(None)
            released += 1
        if not self._waiters:
            return
        due = not self._busy() or self._waiters[0][0] <= now + EARLY
        self._schedule(soon=due)
