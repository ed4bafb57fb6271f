"""The requester's notice protocol (`notice.lua`, #32 part 2): each step is one round trip, and
the step that finds the list of runs with news empty gives the notice back in the same script,
so a run listed a moment later finds the notice free (its own pass tells it) and no news is
left listed with nobody to tell it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.crc import key_slot

from bot.store import keys
from bot.store.delivery.outbox import Claim, now_ms
from bot.store.delivery.outcomes import NoticeLease, NoticeTurn
from bot.store.delivery.pacing import SharedPacer, Urgency
from bot.store.runs import RunStore
from bot.store.scripts import Batch

PERSON = "T1:U1"


def held_by(token: str) -> NoticeLease:
    """PERSON's notice held with `token` (a 30 s lease, up to 50 runs a step)."""
    return NoticeLease(PERSON, token, 30, 50)


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RunStore]:
    client = aioredis.Redis.from_url(redis_url)
    yield RunStore(client, retention_seconds=600)
    await client.aclose()


async def take(store: RunStore, run_id: str, token: str) -> NoticeTurn:
    """A run's notice pass's first step (with a Slack token, and its news read)."""
    pacer = SharedPacer(store.redis, "post", rate=1.0, burst=5)
    turn, taken, _, _ = await store.outcomes.open_notice(
        held_by(token), run_id, lambda b: pacer.take_in(b, PERSON, Urgency.OUTPUT), []
    )
    assert taken.taken
    return turn


def test_a_persons_notice_keys_share_one_slot() -> None:
    found = {key_slot(k(PERSON).encode()) for k in
             (keys.notice_runs_key, keys.notice_lock_key, keys.notice_next_key)}  # fmt: skip
    assert len(found) == 1


async def test_the_holder_tells_what_others_list_and_lets_go_when_none_is_left(
    store: RunStore,
) -> None:
    outcomes = store.outcomes
    first = await take(store, "r1", "a")
    assert first.held and list(first.listed) == ["r1"]
    # Another run's pass while it is held: its run is listed for the holder, it is done.
    other = await take(store, "r2", "b")
    assert not other.held and not other.paced_until
    # The holder told r1 (a notice went): the next step gives it r2, the notice still its.
    then = await outcomes.told_notice(held_by("a"), first.listed, window=5.0)
    assert then.held and list(then.listed) == ["r2"]
    assert await store.redis.get(keys.notice_lock_key(PERSON)) == b"a"
    # r2 told, nothing left: given back in the same step.
    done = await outcomes.told_notice(held_by("a"), then.listed, window=5.0)
    assert not done.held and not done.listed
    assert await store.redis.get(keys.notice_lock_key(PERSON)) is None
    # A run with news within the window is listed, and told after it (no one holds it).
    paced = await take(store, "r3", "c")
    assert not paced.held and paced.paced_until > 0
    assert await store.redis.get(keys.notice_lock_key(PERSON)) is None
    assert await store.redis.zrange(keys.notice_runs_key(PERSON), 0, -1) == [b"r3"]


async def test_a_run_listed_again_while_being_told_stays_listed(store: RunStore) -> None:
    outcomes = store.outcomes
    turn = await take(store, "r1", "a")
    # r1 gets more news while its notice is written: listed anew (a later time)
    await store.redis.zadd(keys.notice_runs_key(PERSON), {"r1": float(turn.listed["r1"]) + 1})
    again = await outcomes.told_notice(held_by("a"), turn.listed, window=0.0)
    assert again.held and list(again.listed) == ["r1"]  # told in the same hold, not forgotten


async def test_a_release_keeps_whichever_is_due_first(store: RunStore) -> None:
    """A pass that must come back soon (a retry) is not held back by a change made due later
    during it (its notice's window): the release keeps the earlier of the two."""
    outbox = store.outbox
    await outbox.schedule("r1")
    [claim] = await outbox.claim(1, 30)
    await outbox.schedule("r1", 20.0)  # a change during the pass, due before the lease ends
    await outbox.release(claim, 0.0)
    assert await outbox.claim(1, 30)  # due now, not in 20 s


async def test_a_pass_started_with_a_write_waits_for_a_pass_that_holds_the_run(
    store: RunStore,
) -> None:
    """A run's end claims its run for the pass it starts in the same round trip
    (`Outbox.claim_one_in`, #32): a run another pass holds is not taken from it, and is left
    due now, so that its pass's release hands it on (the end's marks are shown after it);
    a run no one holds is taken, due or not, and no other claim takes it until released."""
    outbox = store.outbox

    async def claim_one(run_id: str) -> Claim | None:
        async with store.redis.pipeline(transaction=False) as pipe:
            batch = Batch(pipe)
            claimed = outbox.claim_one_in(batch, run_id, 30, now_ms())
            return claimed(await batch.execute())

    await outbox.schedule("r1")
    [held] = await outbox.claim(1, 30)
    assert await claim_one("r1") is None
    assert await outbox.claim(1, 30) == []  # still held
    await outbox.release(held, None)  # its pass ends: it had nothing more to show
    assert [c.run_id for c in await outbox.claim(1, 30)] == ["r1"]  # the end's marks
    taken = await claim_one("r2")  # not indexed before: taken, and indexed by the claim
    assert taken is not None and taken.run_id == "r2"
    assert await outbox.claim(1, 30) == []
    await outbox.release(taken, None)
    assert not await outbox.indexed("r2")
