"""Acks first: deferred work waits for a lull in Slack's requests, a bounded time at most.

The gate is driven with events: a "request" holds the count until the test lets it go, and
the loop is stepped (`asyncio.sleep(0)`: one iteration, no time) to see who has left."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from contextlib import contextmanager

from bot.service.foreground import Foreground

FOREVER = 3600.0


async def steps(count: int = 20) -> None:
    """Let the loop run `count` iterations."""
    for _ in range(count):
        await asyncio.sleep(0)


@contextmanager
def held(foreground: Foreground) -> Iterator[asyncio.Event]:
    """A request in flight until the returned event is set (and the test steps once)."""
    done = asyncio.Event()

    async def request() -> None:
        with foreground.request():
            await done.wait()

    task = asyncio.create_task(request())
    try:
        yield done
    finally:
        done.set()
        task.cancel()


async def test_nothing_in_flight_means_no_wait() -> None:
    foreground = Foreground(max_wait=FOREVER)
    waiter = asyncio.create_task(foreground.lull())
    await steps(1)
    assert waiter.done()


async def test_deferred_work_waits_until_the_last_request_is_answered() -> None:
    foreground = Foreground(max_wait=FOREVER)
    order: list[str] = []
    with held(foreground) as first, held(foreground) as second:
        await steps(1)
        assert foreground.in_flight == 2

        async def deferred() -> None:
            await foreground.lull()
            order.append("deferred")

        waiter = asyncio.create_task(deferred())
        await steps()
        assert not waiter.done() and foreground.waiting == 1
        first.set()
        await steps()
        assert foreground.in_flight == 1 and not waiter.done()  # one is still in flight
        second.set()
        order.append("answered")
        await waiter
    assert order == ["answered", "deferred"]
    assert foreground.in_flight == 0 and foreground.waiting == 0


async def test_an_exception_in_a_request_still_ends_it() -> None:
    foreground = Foreground(max_wait=FOREVER)
    try:
        with foreground.request():
            raise RuntimeError("the listener failed")
    except RuntimeError:
        pass
    assert foreground.in_flight == 0


async def test_the_wait_is_bounded_while_requests_stay_in_flight() -> None:
    foreground = Foreground(max_wait=0.05)
    loop = asyncio.get_running_loop()
    with held(foreground):
        await steps(1)
        started = loop.time()
        await asyncio.wait_for(foreground.lull(), 5.0)
        assert loop.time() - started >= 0.05 - 0.002  # timers may fire a clock tick early
        assert foreground.in_flight == 1


async def test_waiting_disabled() -> None:
    foreground = Foreground(max_wait=0)
    with held(foreground):
        await steps(1)
        waiter = asyncio.create_task(foreground.lull())
        await steps(1)
        assert waiter.done()


async def test_waiters_leave_in_order_a_few_per_loop_iteration() -> None:
    foreground = Foreground(max_wait=FOREVER, batch=4)
    released: list[int] = []
    seen: list[int] = []

    async def deferred(i: int) -> None:
        await foreground.lull()
        released.append(i)

    with held(foreground) as done:
        await steps(1)
        waiters = [asyncio.create_task(deferred(i)) for i in range(10)]
        await steps()
        waiters[3].cancel()  # a waiter cancelled meanwhile is skipped
        await steps()
        assert released == [] and foreground.waiting == 9
        done.set()
        while len(released) < 9:
            await steps(1)
            seen.append(len(released))
    assert released == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    assert all(b - a <= 4 for a, b in zip([0, *seen], seen, strict=False))
    assert any(0 < n < 9 for n in seen)  # not all at once


async def test_a_new_request_stops_the_release_of_waiters_not_yet_due() -> None:
    foreground = Foreground(max_wait=FOREVER, batch=2)
    released: list[int] = []

    async def deferred(i: int) -> None:
        await foreground.lull()
        released.append(i)

    with foreground.request():
        waiters = [asyncio.create_task(deferred(i)) for i in range(6)]
        await steps()
    while not released:
        await steps(1)
    with foreground.request():  # a request arrives after the first release
        await steps()
        assert 0 < len(released) < 6 and foreground.waiting == 6 - len(released)
    await asyncio.gather(*waiters)
    assert released == list(range(6))


async def test_another_serving_processs_requests_hold_deferred_work_here_too() -> None:
    """`serve --processes 2`: two gates sharing one `InFlight` (the supervisor's shared
    memory, here in one process): a request in flight in one holds the other's deferred work
    until it is answered, and each publishes its own count only."""
    from bot.processes import InFlight

    shared = InFlight(2)
    here = Foreground(max_wait=FOREVER, elsewhere=shared.of(0))
    there = Foreground(max_wait=FOREVER, elsewhere=shared.of(1))
    with held(there) as answered:
        await steps(1)
        assert list(shared.slots) == [0, 1]
        waiter = asyncio.create_task(here.lull())
        await steps()
        assert not waiter.done()
        answered.set()
        await asyncio.wait_for(waiter, timeout=30)  # (seen at its next look: PEER_POLL)
    assert list(shared.slots) == [0, 0]
    assert await asyncio.wait_for(here.lull(), timeout=30) is None  # nothing in flight: at once


async def test_a_decision_let_go_holds_its_own_processs_deferred_work_not_anothers() -> None:
    """`serve --processes 2`: a decision past its lull holds what waits for a lull in its own
    process (its resumes and deliveries wait for it), not in the other one, which has a core
    of its own (#32: the process with fewer of a burst's clicks sat idle while the other
    decided); a Slack request holds both."""
    from bot.processes import InFlight

    shared = InFlight(2)
    here = Foreground(max_wait=FOREVER, elsewhere=shared.of(0))
    there = Foreground(max_wait=FOREVER, elsewhere=shared.of(1))
    decided = asyncio.Event()

    async def decision() -> None:
        async with there.deciding():
            await decided.wait()

    deciding = asyncio.create_task(decision())
    await steps()
    assert there.in_flight == 1 and list(shared.slots) == [0, 0]
    assert await asyncio.wait_for(here.lull(), timeout=30) is None  # not held
    waiter = asyncio.create_task(there.lull())
    await steps()
    assert not waiter.done()  # its own process's deferred work waits for it
    with held(there) as answered:  # a Slack request there holds both
        await steps(1)
        assert list(shared.slots) == [0, 1]
        held_here = asyncio.create_task(here.lull())
        await steps()
        assert not held_here.done()
        answered.set()
        await asyncio.wait_for(held_here, timeout=30)
    assert not waiter.done()
    decided.set()
    await asyncio.wait_for(asyncio.gather(deciding, waiter), timeout=30)
    assert list(shared.slots) == [0, 0] and there.in_flight == 0


async def test_decisions_let_go_run_a_few_at_a_time_first_come_first() -> None:
    """Decisions past their lull run `deciding` at a time, in the order they came, each
    counted as a request in flight from the moment it was let go (its turn awaited too)."""
    foreground = Foreground(max_wait=FOREVER, deciding=2, turn=FOREVER)
    entered: list[int] = []
    finish = [asyncio.Event() for _ in range(5)]

    async def decision(i: int) -> None:
        async with foreground.deciding():
            entered.append(i)
            await finish[i].wait()

    decisions = [asyncio.create_task(decision(i)) for i in range(5)]
    await steps()
    assert entered == [0, 1] and foreground.in_flight == 5
    waiter = asyncio.create_task(foreground.lull())  # what waits for a lull waits for them all
    finish[1].set()
    await steps()
    assert entered == [0, 1, 2] and foreground.in_flight == 4
    finish[0].set()
    await steps()
    assert entered == [0, 1, 2, 3]
    for event in finish:
        event.set()
    await asyncio.gather(*decisions)
    assert entered == [0, 1, 2, 3, 4] and foreground.in_flight == 0
    await asyncio.wait_for(waiter, timeout=30)


async def test_a_decision_that_waits_on_something_else_gives_up_its_turn() -> None:
    """A decision still going `turn` seconds after its turn came (waiting for Slack, say) lets
    the next one go."""
    foreground = Foreground(max_wait=FOREVER, deciding=1, turn=0.05)
    loop = asyncio.get_running_loop()
    entered: dict[int, float] = {}
    finish = [asyncio.Event() for _ in range(2)]

    async def decision(i: int) -> None:
        async with foreground.deciding():
            entered[i] = loop.time()
            await finish[i].wait()

    decisions = [asyncio.create_task(decision(0))]
    await steps()
    decisions.append(asyncio.create_task(decision(1)))
    await steps()
    assert list(entered) == [0]
    await wait_for_entry(entered, 1)
    assert entered[1] - entered[0] >= 0.05 - 0.002  # timers may fire a clock tick early
    assert foreground.in_flight == 2  # the first still counted
    for event in finish:
        event.set()
    await asyncio.gather(*decisions)
    assert foreground.in_flight == 0


async def wait_for_entry(entered: dict[int, float], i: int) -> None:
    """Until decision `i` has its turn (a bound only a broken gate reaches)."""
    for _ in range(3000):
        if i in entered:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"decision {i} never had its turn")


async def test_alone_is_the_callers_request_with_nothing_else_in_flight_or_waiting() -> None:
    """`alone()`, asked by a listener inside its request: its request is the one in flight,
    here and in the other serving processes, and nothing waits for a lull (a click's read then
    goes at once, `Decisions.read_ahead`); never with the waiting disabled."""
    from bot.processes import InFlight

    shared = InFlight(2)
    here = Foreground(max_wait=FOREVER, elsewhere=shared.of(0))
    there = Foreground(max_wait=FOREVER, elsewhere=shared.of(1))
    assert not here.alone()  # (no request: not a listener's question)
    with here.request():
        assert here.alone()
        with held(here):  # another request here
            await steps(1)
            assert not here.alone()
        await steps(1)
        assert here.alone()
        with held(there):  # another serving process's
            await steps(1)
            assert not here.alone()
        await steps(1)
        async with here.deciding():  # a decision let go
            assert not here.alone()
        waiter = asyncio.create_task(here.lull())  # deferred work waiting
        await steps(1)
        assert not waiter.done() and not here.alone()
    await asyncio.wait_for(waiter, timeout=30)
    disabled = Foreground(max_wait=0)
    with disabled.request():
        assert not disabled.alone()


async def test_collections_are_held_while_a_request_is_in_flight_and_let_go_at_the_lull() -> None:
    """`collect_at_lulls`: the cyclic GC is off from a request's start; its end (the answer is
    written after it, in the same step) leaves it off, and the next loop iteration with no
    request in flight turns it on; a request then starts before that iteration keeps it off.
    Without it, the collector is left alone."""
    foreground = Foreground(max_wait=FOREVER, collect_at_lulls=True)
    assert gc.isenabled()
    try:
        with foreground.request():
            assert not gc.isenabled()
        assert not gc.isenabled()  # (the answer is still to be written)
        with foreground.request():  # the next one, before the loop looked again
            pass
        with held(foreground):
            await steps(1)
            assert not gc.isenabled()  # held by the request still in flight
        await steps(2)
        assert gc.isenabled()
        with held(Foreground(max_wait=FOREVER)):  # not asked for
            await steps(1)
            assert gc.isenabled()
    finally:
        gc.enable()


async def test_collections_stay_held_while_another_serving_process_has_requests() -> None:
    """A moment with no request here but some in another serving process (between two clicks
    of a burst) is no lull: the collector stays off until the other's last one ends too."""
    from bot.processes import InFlight

    shared = InFlight(2)
    here = Foreground(max_wait=FOREVER, elsewhere=shared.of(0), collect_at_lulls=True)
    there = Foreground(max_wait=FOREVER, elsewhere=shared.of(1))
    try:
        with held(there) as done:
            await steps(1)
            with here.request():
                pass
            await steps(5)
            assert not gc.isenabled()  # held: the other process is still answering
            done.set()
            for _ in range(3000):  # (it looks again every PEER_POLL)
                if gc.isenabled():
                    break
                await asyncio.sleep(0.001)
            assert gc.isenabled()
    finally:
        gc.enable()
