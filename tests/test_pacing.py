"""Slack's rate limits shared by every replica (issue #21): one token bucket per limit and scope
in Redis, a 429's Retry-After seen by one replica holding the others, and approval cards ahead
of outputs and status updates when tokens are short. The buckets are tried on a real Redis
with two clients (two replicas); the whole bot with two replicas on one Redis against the
Slack stand-in enforcing Slack's limits."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from agents import Agent, function_tool

from bot.slack.blocks import APPROVE
from bot.store import keys
from bot.store.delivery.outbox import Shown
from bot.store.delivery.pacing import SharedPacer, Urgency
from bot.store.scripts import Batch
from bot.testing.harness import BotHarness, wait_until
from bot.testing.slack_api import FakeSlackAPI
from tests.agents_for_tests import POLICY
from tests.stateless_agents import StatelessModel

# The scripts read Redis's clock, so a wait is what is left of a turn when Redis ran the
# script: the test bounds it with what its own clock saw pass (a busy machine's slow round
# trips make waits shorter, never longer), and the scripts round to the millisecond.
ROUNDING = 0.002
HOLD = 60.0  # seconds: a 429's Retry-After that outlasts any pause of a busy machine


class Stopwatch:
    """Seconds since it was made."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def __call__(self) -> float:
        return time.monotonic() - self.started


@pytest.fixture
async def two_clients(redis_url: str) -> AsyncIterator[tuple[aioredis.Redis, aioredis.Redis]]:
    """Two connections to one Redis, as two replicas have."""
    a, b = aioredis.Redis.from_url(redis_url), aioredis.Redis.from_url(redis_url)
    await a.flushall()
    try:
        yield a, b
    finally:
        await a.aclose()
        await b.aclose()


async def test_two_replicas_take_from_one_bucket(
    two_clients: tuple[aioredis.Redis, aioredis.Redis],
) -> None:
    """Ten cards posted in one channel through two replicas, alternating: the first five
    (the burst) go at once, the next ones a token (0.1 s at 10/s) apart, as from one process."""
    a, b = (SharedPacer(c, "post", rate=10.0, burst=5) for c in two_clients)
    started = time.monotonic()
    waits, taken_at = [], []
    for i in range(10):
        taken_at.append(time.monotonic() - started)
        waits.append((await (a, b)[i % 2].take("C1", Urgency.CARD)).wait)
    assert waits[:5] == [0.0] * 5, waits
    assert waits[5] > 0 or taken_at[5] >= 0.05, (waits, taken_at)  # one bucket, not two
    for n, (wait, at) in enumerate(zip(waits[5:], taken_at[5:], strict=True), start=1):
        # Its turn is n tokens after the burst; what the bucket refilled meanwhile (a busy
        # machine between two takes) comes off the wait.
        assert n * 0.1 - at - 0.05 <= wait <= n * 0.1 + 0.001, (waits, taken_at)
    # Another channel has its own bucket; a bucket's key goes once it would be full again.
    assert (await a.take("C2", Urgency.CARD)).wait == 0.0
    ttl = await two_clients[0].pttl(keys.pace_key("post", "C1"))
    assert 0 < ttl <= 2000, ttl


async def test_a_retry_after_seen_by_one_replica_holds_the_other(
    two_clients: tuple[aioredis.Redis, aioredis.Redis],
) -> None:
    a, b = (SharedPacer(c, "update", rate=100.0, burst=10) for c in two_clients)
    held = Stopwatch()  # the hold runs down as the test goes on (on a busy machine, more)
    # A minute's hold (Slack's are often shorter): nothing here waits it out, and a busy
    # machine's pauses, however long, do not see it end while the test looks.
    await a.hold("T1", HOLD)
    # (then the bucket is empty: a token is 10 ms at 100/s; a status update waits for 4)
    ahead = await b.ahead("T1")  # (read before the stopwatch: the bound is what passed by then)
    assert HOLD - held() - ROUNDING <= ahead <= HOLD + 0.01
    for urgency, tokens in ((Urgency.OUTPUT, 1), (Urgency.STATUS, 4)):  # asked again then
        taken = await b.take("T1", urgency)
        assert not taken.taken and HOLD - held() - ROUNDING <= taken.wait - tokens / 100 <= HOLD

    between = Stopwatch()
    card = await b.take("T1", Urgency.CARD)  # a card queues behind the hold, a token after it
    assert card.taken and HOLD - held() - ROUNDING <= card.wait <= HOLD + 0.01, card
    second = await a.take("T1", Urgency.CARD)  # nothing refilled during the hold
    # A token (10 ms) later: its wait, plus what passed between the two takes.
    assert second.wait + between() - card.wait >= 0.01 - ROUNDING, (card, second)
    assert await b.ahead("T2") == 0.0  # another workspace is not held
    await b.hold("T1", 0.5)  # a shorter hold never shortens a longer one
    ahead = await a.ahead("T1")
    assert ahead >= HOLD - held() - ROUNDING


async def test_a_card_never_waits_behind_status_updates(
    two_clients: tuple[aioredis.Redis, aioredis.Redis],
) -> None:
    """Sixty status updates due at once (before: each took its place in the queue, and the
    cards after them waited their turn): they take the burst but its reserve (3 of 10), then
    wait; outputs take the reserve; a card goes at once and only then queues. A token a
    minute (Slack's limit is 50 a minute): none refills while the sixty are asked, however
    slowly a busy machine asks them."""
    a, b = (SharedPacer(c, "update", rate=1 / 60, burst=10) for c in two_clients)
    refilling = Stopwatch()
    statuses = [await (a, b)[i % 2].take("T1", Urgency.STATUS) for i in range(60)]
    assert sum(t.taken for t in statuses) == 7
    assert all(t.wait == 0 for t in statuses if t.taken)
    assert all(t.wait > 0 for t in statuses if not t.taken)  # tried again then, not queued
    card = await a.take("T1", Urgency.CARD)
    assert card.taken and card.wait == 0.0
    output = await b.take("T1", Urgency.OUTPUT)
    assert output.taken and output.wait == 0.0
    assert not (await a.take("T1", Urgency.STATUS)).taken  # the reserve is not theirs
    cards = [await b.take("T1", Urgency.CARD) for _ in range(3)]
    assert [c.wait for c in cards[:1]] == [0.0]
    # The burst is used up: one token (60 s) per card, less what refilled meanwhile.
    assert 120 - refilling() - ROUNDING <= cards[2].wait <= 120 + ROUNDING, cards


async def test_a_cards_turn_is_kept_for_it_across_replicas(
    two_clients: tuple[aioredis.Redis, aioredis.Redis],
) -> None:
    """A card whose turn is seconds away is given that same turn when it is tried again, by
    either replica, without a second token; at its turn it is used up. (Its turn is 3 s away,
    a token a second: what this looks at before then is not outrun by a busy machine's
    pauses; the test waits the 3 s out once.)"""
    a, b = (SharedPacer(c, "update", rate=1.0, burst=1) for c in two_clients)
    since_burst = Stopwatch()  # the turns come closer as time passes (a busy machine: more)
    assert (await a.take("T1", Urgency.CARD)).wait == 0.0  # the burst
    for _ in range(2):  # two cards queue: the fourth's turn is 3 s away
        await a.take("T1", Urgency.CARD)
    since_first = Stopwatch()
    first = await a.take("T1", Urgency.CARD, message="r/card:x")
    assert 3.0 - since_burst() - ROUNDING <= first.wait <= 3.0, first
    again = await b.take("T1", Urgency.CARD, message="r/card:x")  # the other replica
    assert again.taken and first.wait - since_first() - ROUNDING <= again.wait <= first.wait, again
    other = await b.take("T1", Urgency.CARD, message="r/card:y")  # a new card: the next turn
    assert other.wait + since_first() >= first.wait + 1.0 - ROUNDING, other
    await asyncio.sleep(again.wait - 0.02)
    due = await a.take("T1", Urgency.CARD, message="r/card:x")
    assert due.wait <= 0.05  # its turn: sent now, the kept turn used up
    assert not await two_clients[0].exists(keys.turn_key("update", "T1", "r/card:x"))
    later = await a.take("T1", Urgency.CARD, message="r/card:x")  # its next change: a new turn
    assert later.wait + since_first() >= other.wait + 1.0 - ROUNDING, later


def _agent(done: list[str]) -> Agent[Any]:
    """An agent any replica can continue: it asks to delete the logs its task names, then
    says what the tool said."""

    @function_tool(needs_approval=True)
    async def delete_logs(path: str) -> str:
        """Delete logs under a path."""
        done.append(path)
        return f"deleted {path}"

    return Agent(name="ops", model=StatelessModel(), tools=[delete_logs])


PACED = {
    "user_start_burst": 0,
    "channel_start_burst": 0,
    "user_open_runs": 0,
    "channel_open_runs": 0,
    # Slack's pacing at ten times Slack's rates (the stand-in enforces the same ten times):
    # the same buckets, a test ten times shorter.
    "slack_posts_per_second": 10.0,
    "slack_updates_per_minute": 500.0,
    "projector_coalesce_seconds": 0.2,
}


async def test_two_replicas_stay_within_slacks_limits_together(redis_url: str) -> None:
    """Two replicas on one Redis start and decide 10 runs in one channel, alternating: every
    post and update within Slack's limits counted together (not a 429), every run finished and
    shown. (With a bucket per process, two replicas send twice what one may.)"""
    done: list[str] = []
    async with FakeSlackAPI() as slack:
        # Slack's rates, and bursts a few calls above the bot's own (posts 5, updates 10): the
        # stand-in counts a call when it arrives, and on a busy machine one call may take
        # longer from its token to Slack than the next (CI: one card's post counted over the
        # limit); 4 posts (0.4 s) and 5 updates (0.6 s) of such delay are absorbed. A bucket
        # per replica would still be caught at once: its bursts together are 10 and 20.
        slack.enforce_limits(
            posts_per_second=10.0, post_burst=9, updates_per_minute=500.0, update_burst=15
        )
        async with (
            BotHarness(redis_url, _agent(done), POLICY, slack=slack, settings=PACED) as a,
            BotHarness(redis_url, _agent(done), POLICY, slack=slack, settings=PACED) as b,
        ):
            replicas = (a, b)
            for i in range(10):
                sent = await replicas[i % 2].slack.command(f"/var/log/{i}", user="U1", channel="C1")
                assert sent.status == 200
            cards = await a.wait_for_approvals(10, timeout=30)
            for i, card in enumerate(cards):
                assert (await replicas[i % 2].click(card, APPROVE, user="U2")).status == 200
            await wait_until(lambda: len(done) == 10, timeout=30, what="ten tools run")
            await wait_until(
                lambda: sum("tool said: deleted" in m.text for m in slack.messages.values()) == 10,
                timeout=30,
                what="ten outputs shown",
            )
            await a.idle()
            await b.idle()
        assert sorted(done) == sorted(f"/var/log/{i}" for i in range(10))
        for card in cards:
            assert "Approved" in slack.messages[(card.channel, card.ts)].all_text()
        assert slack.limited == [], [(c.method, c.params.get("channel")) for c in slack.limited]
        assert len(slack.calls_to("chat.postMessage")) >= 30  # run messages, cards, outputs


async def test_a_429_one_replica_meets_holds_the_other_replicas_posts(redis_url: str) -> None:
    """Slack answers replica A's post in C1 with 429 and Retry-After: 2; replica B's posts in
    C1 wait the two seconds out too, and then everything is posted once."""
    done: list[str] = []
    async with FakeSlackAPI() as slack:
        async with (
            BotHarness(redis_url, _agent(done), POLICY, slack=slack, settings=PACED) as a,
            BotHarness(redis_url, _agent(done), POLICY, slack=slack, settings=PACED) as b,
        ):
            slack.rate_limit("chat.postMessage", times=1, retry_after=2)
            assert (await a.slack.command("/var/log/a", user="U1", channel="C1")).status == 200
            await wait_until(lambda: slack.calls_to("chat.postMessage"), what="A's first post")
            limited_at = slack.calls_to("chat.postMessage")[0].at

            async def held() -> bool:  # A holds C1's posts in Redis for the 2 s: B starts then
                return await a.runtime.projector.posts.ahead("C1") > 0

            await wait_until(held, what="A's hold on C1's posts (Slack's Retry-After)")
            assert (await b.slack.command("/var/log/b", user="U1", channel="C1")).status == 200
            await b.wait_for_approvals(2)
        posts = [c for c in slack.calls_to("chat.postMessage") if c.params["channel"] == "C1"]
        later = [c.at - limited_at for c in posts[1:]]
        assert later and min(later) >= 1.9, later  # B's run message and card waited too
        made = [
            (
                c.params["metadata"]["event_payload"]["run_id"],
                c.params["metadata"]["event_payload"]["target"],
            )
            for c in posts[1:]
            if c.params.get("metadata")
        ]
        assert len(made) == len(set(made)) >= 4, made  # two run messages, two cards: once


def test_a_limits_bucket_and_its_kept_turns_lie_in_one_slot() -> None:
    """pace.lua gets both (a Redis Cluster runs a script only on keys of one slot); limits of
    different channels and workspaces spread over the slots."""
    from redis.crc import key_slot

    bucket = keys.pace_key("update", "T1").encode()
    assert key_slot(bucket) == key_slot(keys.turn_key("update", "T1", "r/card:x").encode())
    slots = {key_slot(keys.pace_key("post", f"C{i}").encode()) for i in range(20)}
    assert len(slots) > 15


async def test_pacing_needs_no_replica_while_transitions_wait_for_one(redis_url: str) -> None:
    """With APPROVAL_BOT_REDIS_WAIT_REPLICAS=1 and no replica in sync (as during a failover),
    a transition script is refused (`ReplicasBehind`), but Slack's pacing goes on: what it
    keeps may be lost in a failover at no cost."""
    from bot.store.connection import ReplicasBehind, connect

    client = connect(redis_url, max_connections=4, replicas=1, wait_ms=20)
    try:
        transition = client.register_script("return redis.call('SET', KEYS[1], 'x')")
        with pytest.raises(ReplicasBehind):
            await transition(keys=["ab:test:transition"])
        pacer = SharedPacer(client, "post", rate=10.0, burst=5)
        assert (await pacer.take("C9", Urgency.CARD)).taken
        held = Stopwatch()
        await pacer.hold("C9", HOLD)
        assert await pacer.ahead("C9") >= HOLD - held() - ROUNDING
    finally:
        await client.aclose()


# An output's token taken with its run's end (#32) --------------------------------------------

RUN_ID = "0123456789abcdef0123"


async def _ended_run(client: aioredis.Redis, *, turn: int = 1) -> None:
    """A run that has just ended with its message in Slack and its output marked, as finish.lua
    leaves it (the fields output_token.lua reads)."""
    await client.hset(keys.run_key(RUN_ID), mapping={"status": "finished", "turn": str(turn),
                                                     "message_ts": "1.000100"})  # fmt: skip
    await client.hset(keys.outbox_key(RUN_ID), "result" if turn == 1 else f"result:{turn}", 1)


async def _take_output(client: aioredis.Redis, pacer: SharedPacer, score: str) -> Any:
    async with client.pipeline(transaction=False) as pipe:
        batch = Batch(pipe)
        decoded = pacer.take_output_in(batch, "C1", RUN_ID, score, 3600)
        return decoded(await batch.execute())


async def _tokens(client: aioredis.Redis) -> float:
    return float(await client.hget(keys.pace_key("post", "C1"), "tokens") or 5)


async def test_an_outputs_token_is_taken_with_its_runs_end_only_for_the_pass_that_posts_it(
    two_clients: tuple[aioredis.Redis, aioredis.Redis],
) -> None:
    """output_token.lua (#32) takes the output's post token, and records the post as attempted,
    only under the claim of the pass that the run's end starts (a second projector holding the
    run takes it instead: the first neither takes a token nor writes a record), for a run that
    ended with its message in Slack, and an output marked and never posted or tried (else the
    pass takes its own, as before, or finds it posted)."""
    client, _ = two_clients
    pacer = SharedPacer(client, "post", rate=0.001, burst=5)  # (no refill within the test)
    await _ended_run(client)
    await client.hset(keys.OUTBOX_LEASES, RUN_ID, "2000.001")  # another projector's claim
    assert await _take_output(client, pacer, "1000.001") is None
    assert await client.hget(keys.shown_key(RUN_ID), "result") is None
    assert await _tokens(client) == 5
    await client.hset(keys.OUTBOX_LEASES, RUN_ID, "1000.001")  # this pass's
    await client.hset(keys.shown_key(RUN_ID), "result", "1.000200 abc")  # already posted
    assert await _take_output(client, pacer, "1000.001") is None
    await client.hdel(keys.shown_key(RUN_ID), "result")
    await client.hdel(keys.run_key(RUN_ID), "message_ts")  # nothing to thread it under
    assert await _take_output(client, pacer, "1000.001") is None
    await _ended_run(client)
    await client.hdel(keys.outbox_key(RUN_ID), "result")  # not marked (delivered already)
    assert await _take_output(client, pacer, "1000.001") is None
    assert await _tokens(client) == 5 and not await client.exists(keys.shown_key(RUN_ID))
    await _ended_run(client)
    prepaid = await _take_output(client, pacer, "1000.001")
    assert prepaid is not None and prepaid.take.taken and prepaid.target == "result"
    assert 3.99 < await _tokens(client) < 4.01
    record = await client.hget(keys.shown_key(RUN_ID), "result")
    assert record is not None and Shown.decode(record.decode()) == prepaid.posting
    assert prepaid.posting.posting > 0 and not prepaid.posting.ts
    # A follow-up turn's output is its turn's message.
    await client.delete(keys.shown_key(RUN_ID))
    await _ended_run(client, turn=2)
    prepaid = await _take_output(client, pacer, "1000.001")
    assert prepaid is not None and prepaid.target == "result:2"
    # No token free: nothing taken, nothing recorded (the pass tries again when one is).
    await client.delete(keys.shown_key(RUN_ID))
    await pacer.hold("C1", HOLD)
    prepaid = await _take_output(client, pacer, "1000.001")
    assert prepaid is not None and not prepaid.take.taken and prepaid.take.wait > HOLD - 5
    assert not await client.exists(keys.shown_key(RUN_ID))


async def test_an_outputs_token_its_pass_did_not_use_goes_back_to_the_bucket(
    two_clients: tuple[aioredis.Redis, aioredis.Redis],
) -> None:
    """A token taken with the run's end whose pass did not post the output goes back, once:
    the bucket as if it had never been taken, the posting record dropped (no post was tried);
    with a record another pass wrote since, nothing is dropped nor given back; after a 429's
    hold since the take, nothing goes back (the hold emptied the bucket: a token given back
    then would be one too many)."""
    client, _ = two_clients
    pacer = SharedPacer(client, "post", rate=0.001, burst=5)
    await _ended_run(client)
    await client.hset(keys.OUTBOX_LEASES, RUN_ID, "1000.001")
    prepaid = await _take_output(client, pacer, "1000.001")
    assert prepaid is not None and prepaid.take.taken
    assert await pacer.give_back(prepaid, 3600)
    assert 4.99 < await _tokens(client) <= 5
    assert await client.hget(keys.shown_key(RUN_ID), "result") is None
    # Once: a second give-back of the same token gives nothing (its record is gone).
    prepaid = await _take_output(client, pacer, "1000.001")
    assert prepaid is not None and prepaid.take.taken
    assert await pacer.give_back(prepaid, 3600)
    assert not await pacer.give_back(prepaid, 3600)
    assert 4.99 < await _tokens(client) <= 5
    # Another pass's record (it went on to post it): not dropped, and the token not given back.
    prepaid = await _take_output(client, pacer, "1000.001")
    assert prepaid is not None and prepaid.take.taken
    theirs = Shown(posting=prepaid.posting.posting + 1).encode()
    await client.hset(keys.shown_key(RUN_ID), "result", theirs)
    assert not await pacer.give_back(prepaid, 3600)
    assert (await client.hget(keys.shown_key(RUN_ID), "result")).decode() == theirs
    assert 3.99 < await _tokens(client) < 4.01
    # A hold since the take: not given back.
    await client.delete(keys.shown_key(RUN_ID))
    prepaid = await _take_output(client, pacer, "1000.001")
    assert prepaid is not None and prepaid.take.taken
    await pacer.hold("C1", 0.05)
    held = await _tokens(client)

    async def over() -> bool:  # (then only the holds' count tells that it came)
        seconds, micros = await client.time()
        at = await client.hget(keys.pace_key("post", "C1"), "at")
        return seconds * 1000 + micros // 1000 > float(at or 0)

    await wait_until(over, what="the hold's end")
    assert not await pacer.give_back(prepaid, 3600)
    assert await _tokens(client) <= held + 0.01


async def test_an_outputs_token_is_not_given_back_once_the_bucket_would_have_refilled(
    two_clients: tuple[aioredis.Redis, aioredis.Redis],
) -> None:
    """A bucket that refilled to its burst since the take, then gave tokens to other calls,
    would hold as many without the take: the token is not given back then (one call more
    would go at once than the burst allows: #32's review), the posting record dropped all the
    same."""
    client, _ = two_clients
    pacer = SharedPacer(client, "post", rate=1000.0, burst=2)  # full again 1 ms after the take
    await _ended_run(client)
    await client.hset(keys.OUTBOX_LEASES, RUN_ID, "1000.001")
    prepaid = await _take_output(client, pacer, "1000.001")
    assert prepaid is not None and prepaid.take.taken
    taken_at = float(prepaid.bucket[2])

    async def refilled() -> bool:  # by Redis's own clock, the one the bucket keeps
        seconds, micros = await client.time()
        return seconds * 1000 + micros // 1000 > taken_at + 2

    await wait_until(refilled, what="the bucket's refill")
    for _ in range(2):  # other posts, from the refilled bucket
        await pacer.take("C1", Urgency.OUTPUT)
    before = await client.hmget(keys.pace_key("post", "C1"), "tokens", "at")
    assert not await pacer.give_back(prepaid, 3600)
    assert await client.hget(keys.shown_key(RUN_ID), "result") is None
    assert await client.hmget(keys.pace_key("post", "C1"), "tokens", "at") == before
