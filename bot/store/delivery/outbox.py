"""The outbox: which Slack messages must be brought up to date with what Redis holds.

A transition that changes what people see marks the message ("target") in its run's outbox hash,
inside the same Lua script or MULTI (so a crash cannot separate the change from the mark). The
run is then put on a sorted-set index, due now. A projector (any replica) claims due runs with a
lease (a unique score), delivers their targets, and drops a mark only if no newer change came in
meanwhile. A reconciler re-indexes any run whose outbox is not empty, so a crash between a
transition and its index write delays a message, never loses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as redis

from bot.store import keys
from bot.store.connection import Replicated, is_cluster
from bot.store.delivery.dues import Dues
from bot.store.keys import RunKeys
from bot.store.scripts import Batch, Together, mark, text

# A claim is a lease on one run's messages: one holder at a time, whatever the index says. A
# change that arrives meanwhile makes the run due again (its score drops), to be claimed once
# the lease is released or lapses.
_CLAIM = """
local now = tonumber(ARGV[1])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 4 * tonumber(ARGV[3]))
local skip = {}
for i = 4, #ARGV do
  skip[ARGV[i]] = true
end
local out = {}
for i, member in ipairs(due) do
  local lease = redis.call('HGET', KEYS[2], member)
  if not skip[member] and (not lease or tonumber(lease) < now) then
    local score = string.format('%.3f', tonumber(ARGV[2]) + i / 1000)
    redis.call('ZADD', KEYS[1], 'XX', score, member)
    redis.call('HSET', KEYS[2], member, score)
    table.insert(out, member)
    table.insert(out, score)
    if #out >= 2 * tonumber(ARGV[3]) then
      break
    end
  end
end
return out
"""

# A claim of one run a pass is to start on at once (`Outbox.claim_one_in`: the write that made
# it due goes in the same round trip): taken unless another pass holds it, whether or not the
# index has it due; a run another pass holds is left due now (taken once that pass ends).
# KEYS as _CLAIM's; ARGV[1] now (ms), ARGV[2] the claim's score, ARGV[3] the run.
_CLAIM_ONE = """
local lease = redis.call('HGET', KEYS[2], ARGV[3])
if lease and tonumber(lease) >= tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], 'LT', ARGV[1], ARGV[3])
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[3], ARGV[2])
return 1
"""

# Renew (ARGV[2] = the new lease) or release (ARGV[2] = the next due score, or '' to drop
# the run from the index) a claim, only while this claim holds the lease. The index entry is
# moved only if it still carries the claim's score: a newer change left it due (now, or when
# its notice is); a release then keeps whichever is due first.
_HOLD = """
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[3] then
  return 0
end
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
local mine = score and tonumber(score) == tonumber(ARGV[3])
if ARGV[4] == 'renew' then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
  if mine then
    redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
  end
  return 1
end
redis.call('HDEL', KEYS[2], ARGV[1])
if mine then
  if ARGV[2] == '' then
    redis.call('ZREM', KEYS[1], ARGV[1])
  else
    redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
  end
elseif score and ARGV[2] ~= '' then
  redis.call('ZADD', KEYS[1], 'LT', ARGV[2], ARGV[1]) -- whichever is due first
end
return 1
"""

# A delivered message: what Slack holds (KEYS[1], the shown hash) and its mark dropped from the
# outbox (KEYS[2]) unless a newer change came in, in one round trip.
_DELIVERED = """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
if redis.call('HGET', KEYS[2], ARGV[1]) == ARGV[2] then
  redis.call('HDEL', KEYS[2], ARGV[1], ARGV[1] .. '@')
  return 1
end
return 0
"""

# A pass's messages delivered (or found up to date), in one round trip at its end: KEYS[1] the
# shown hash, KEYS[2] the outbox; ARGV[1] retention, then target, tick, what Slack holds ('':
# unchanged) for each. Each mark is dropped unless a newer change came in.
_DELIVERED_MANY = """
local shown = false
for i = 2, #ARGV, 3 do
  if ARGV[i + 2] ~= '' then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 2])
    shown = true
  end
  if redis.call('HGET', KEYS[2], ARGV[i]) == ARGV[i + 1] then
    redis.call('HDEL', KEYS[2], ARGV[i], ARGV[i] .. '@')
  end
end
if shown then
  redis.call('EXPIRE', KEYS[1], ARGV[1])
end
return 0
"""

_DONE = """
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HDEL', KEYS[1], ARGV[1], ARGV[1] .. '@')
  return 1
end
return 0
"""


EXPECTED = 10_000  # runs an `Outbox` remembers this process made due (`expect`)

# A pass started by the round trip of the write that makes its run due (`Outbox.passes`): given
# the batch, the run and its channel ('': not known), it queues the pass's claim and read (and
# its output's Slack token) and returns what starts the pass
# from the replies (`fresh`: False when the write ran after the read, which the pass then
# makes again), or None when no pass starts so (the run is indexed as usual).
PassStart = Callable[[list[Any], bool], None]
PassHook = Callable[[Batch, str, str], PassStart | None]


def now_ms() -> float:
    return time.time() * 1000


@dataclass(frozen=True)
class Mark:
    """A target that must show a newer state: its change counter, and since when (Unix s)."""

    tick: str
    since: float


@dataclass
class Shown:
    """What Slack holds of one message: its ts, the hash of the content last confirmed
    delivered, and when a post was last attempted without a confirmed answer."""

    ts: str = ""
    hash: str = ""
    posting: float = 0.0
    # What a card asked of its reader when it was posted: its text's characters, then `f` when
    # its call's arguments were folded (it offered Show all), e.g. `812f` (#33: whether
    # approvals are real, `bot.service.oversight.attention`); "" for other messages.
    reading: str = ""

    def encode(self) -> str:
        """As the shown hash stores it: `<ts> <hash>[ <posting>[ <reading>]]`, within a compact
        hash's 64-byte values (layout 2 stored JSON, still read)."""
        stored = f"{self.ts} {self.hash}"
        if self.reading:
            return f"{stored} {f'{self.posting:.3f}' if self.posting else '0'} {self.reading}"
        return f"{stored} {self.posting:.3f}" if self.posting else stored

    @classmethod
    def decode(cls, value: str) -> Shown:
        if value.startswith("{"):
            return cls(**json.loads(value))
        ts, _, rest = value.partition(" ")
        digest, _, rest = rest.partition(" ")
        posting, _, reading = rest.partition(" ")
        return cls(ts, digest, float(posting or 0), reading)

    @property
    def card_chars(self) -> int:
        """A card's characters when it was posted (0: not known)."""
        digits = self.reading.rstrip("f")
        return int(digits) if digits.isdigit() else 0

    @property
    def folded(self) -> bool:
        """A card showed its call's arguments folded (it offered Show all)."""
        return self.reading.endswith("f")


@dataclass(frozen=True)
class Claim:
    run_id: str
    score: str


class Outbox:
    """Reads and acknowledges the outbox; records what was shown."""

    def __init__(self, client: redis.Redis, *, retention_seconds: int) -> None:
        self.redis = client
        self.retention = retention_seconds
        self._claim = client.register_script(_CLAIM)
        self._claim_one = client.register_script(_CLAIM_ONE)
        self._hold = client.register_script(_HOLD)
        self._done = client.register_script(_DONE)
        self._delivered = client.register_script(_DELIVERED)
        self._delivered_many = client.register_script(_DELIVERED_MANY)
        # Set when this process makes a run due: its projector wakes at once instead of at its
        # next poll (which is how it learns of other processes' changes).
        self.woken = asyncio.Event()
        # Runs this process made due (run id -> when they are due, ms; None: the write is in
        # flight): its projector reads each with the claim that takes it once it is due
        # (`Projector._claim`), in the same round trip, and no claim of its takes one while
        # its write is in flight.
        self.expected: dict[str, float | None] = {}
        # When (ms, this process's clock, as the index's scores) the runs this process indexed
        # for later fall due, the earliest first: its projector looks at the index then
        # (`next_due`), not sooner, as its own changes due now wake it (#32).
        self.dues = Dues(self.woken)
        # This process's projector, when it may start a pass in the round trip of the write
        # that makes a run due (a run's end: `RunStore.finish`), rather than be woken to claim
        # it in a round trip of its own (#32: the output goes sooner).
        self.passes: PassHook | None = None
        # A burst's passes read, take tokens and end side by side: the batches they queue in
        # one loop iteration go in one round trip (on one server without replicas).
        self.together = Together(client, enabled=lambda: self.reads_ahead)

    @contextlib.contextmanager
    def making_due(self, run_id: str) -> Iterator[None]:
        """This process makes the run due now in the block (a write in flight): no claim of
        this process takes it meanwhile; then its projector is woken, and expects it (it
        reads the run with the claim that takes it). (Not on Redis Cluster, nor with replicas
        to confirm writes: no claim reads ahead there.)"""
        if not self.reads_ahead:
            yield
            self.woken.set()
            return
        if len(self.expected) >= EXPECTED:
            self.expected.pop(next(iter(self.expected)))
        self.expected[run_id] = None
        try:
            yield
        except BaseException:
            self.expected.pop(run_id, None)
            raise
        self.expected[run_id] = now_ms()
        self.woken.set()

    def expect_at(self, run_id: str, at: float) -> None:
        """This process made the run due at `at` (ms; its write answered: `schedule_in` with a
        delay): the claim that takes it then reads it too, as one it made due now (a decided
        card that waits for its resume, in a burst where the resume takes longer: one round
        trip fewer). Not while a write of it is in flight, nor later than it is already
        expected."""
        if not self.reads_ahead or self.expected.get(run_id, 0.0) is None:
            return
        if run_id in self.expected:
            at = min(at, self.expected[run_id] or at)
        elif len(self.expected) >= EXPECTED:
            self.expected.pop(next(iter(self.expected)))
        self.expected[run_id] = at

    @property
    def reads_ahead(self) -> bool:
        """Whether a claim may read ahead (`Projector._claim`): in order on one server, and
        not confirmed by replicas (`Replicated`)."""
        redis = self.redis
        return not is_cluster(redis) and not (isinstance(redis, Replicated) and redis.replicas)

    def in_flight(self) -> list[str]:
        """The runs this process is making due now (`making_due`): no claim of its takes them."""
        return [run_id for run_id, at in self.expected.items() if at is None]

    def made_due(self, delay: float) -> None:
        """A write this process sent outside `schedule_in` made a run due in `delay` seconds
        (`Runs.take_next`): its projector looks for it as for its own schedules."""
        self._indexed(now_ms() + delay * 1000)

    def _indexed(self, at: float) -> None:
        """This process indexed a run as due at `at` (ms): its projector looks then, if that
        is later than now (due now, the write's answer wakes it: `woken`, `written`)."""
        self.dues.add(at)

    def written(self, due: float) -> None:
        """A write that indexed a run as due at `due` (ms; `schedule_in`'s) was answered: due
        now, the projector is woken (else it looks then)."""
        if due <= now_ms():
            self.woken.set()

    async def schedule(self, run_id: str, delay: float = 0.0) -> None:
        """Index the run as due in `delay` seconds (never later than it already is)."""
        if delay > 0:
            at = now_ms() + delay * 1000
            self._indexed(at)
            await self.redis.zadd(keys.OUTBOX_INDEX, {run_id: at}, lt=True)
            return
        with self.making_due(run_id):
            await self.redis.zadd(keys.OUTBOX_INDEX, {run_id: now_ms()}, lt=True)

    def schedule_in(self, pipe: Any, run_id: str, delay: float = 0.0) -> float:
        """`schedule(run_id, delay)` as one command of a pipeline that carries other writes;
        when it is due (ms). It does not wake the projector: once the pipeline is answered,
        the caller calls `written` with that (the projector then looks at once, for a run
        due now, or when it is due)."""
        due = now_ms() + delay * 1000
        self._indexed(due)
        pipe.zadd(keys.OUTBOX_INDEX, {run_id: due}, lt=True)
        return due

    async def claim(
        self, limit: int, lease: float, now: float | None = None, skip: Sequence[str] = ()
    ) -> list[Claim]:
        """Take up to `limit` runs due at `now` (ms) for `lease` seconds, not those in `skip`;
        each claim has a unique score."""
        reply = await self._claim(
            keys=[keys.OUTBOX_INDEX, keys.OUTBOX_LEASES],
            args=self._claim_args(limit, lease, now, skip),
        )
        return self._claims(reply)

    def claim_in(
        self, batch: Batch, limit: int, lease: float, now: float, skip: Sequence[str] = ()
    ) -> Callable[[list[Any]], list[Claim]]:
        """`claim` as the first command of a batch (what follows it reads after the claim):
        what decodes its reply. (Not with replicas to confirm it: `Replicated`.)"""
        index = batch.script(
            self._claim,
            [keys.OUTBOX_INDEX, keys.OUTBOX_LEASES],
            self._claim_args(limit, lease, now, skip),
        )
        return lambda replies: self._claims(replies[index])

    def claim_one_in(
        self, batch: Batch, run_id: str, lease: float, now: float, score: str = ""
    ) -> Callable[[list[Any]], Claim | None]:
        """A claim of `run_id` alone for `lease` seconds, queued on `batch` (`_CLAIM_ONE`):
        taken unless another pass holds the run (then it is left due now, and None). What
        follows it in the batch reads after it. (In order on one server only: `reads_ahead`.)
        `score`: the claim's (`claim_score`), for what follows it to name; else one of its own."""
        args = self._claim_args(1, lease, now, ())
        if score:
            args[1] = score
        index = batch.script(self._claim_one, [keys.OUTBOX_INDEX, keys.OUTBOX_LEASES],
                             [args[0], args[1], run_id])  # fmt: skip

        def claimed(replies: list[Any]) -> Claim | None:
            reply = replies[index]
            if isinstance(reply, Exception):
                raise reply
            return Claim(run_id, args[1]) if int(reply) == 1 else None

        return claimed

    @staticmethod
    def claim_score(lease: float, now: float) -> str:
        """A unique score for a claim at `now` (ms) for `lease` seconds."""
        return str(Outbox._claim_args(1, lease, now, ())[1])

    @staticmethod
    def _claim_args(limit: int, lease: float, now: float | None, skip: Sequence[str]) -> list[Any]:
        at = now_ms() if now is None else now
        base = f"{at + lease * 1000 + random.random():.3f}"
        return [at, base, limit, *skip]

    @staticmethod
    def _claims(reply: list[Any]) -> list[Claim]:
        items = [text(r) for r in reply]
        return [Claim(items[i], items[i + 1]) for i in range(0, len(items), 2)]

    async def renew(self, claim: Claim, lease: float) -> Claim | None:
        score = f"{now_ms() + lease * 1000 + random.random():.6f}"
        held = await self._hold(
            keys=[keys.OUTBOX_INDEX, keys.OUTBOX_LEASES],
            args=[claim.run_id, score, claim.score, "renew"],
        )
        return Claim(claim.run_id, score) if int(held) == 1 else None

    async def release(self, claim: Claim, next_due: float | None) -> None:
        """Give the run back: dropped from the index, or due again in `next_due` seconds.
        A change that arrived meanwhile keeps it indexed (due now) either way."""
        args = self._release_args(claim, next_due)
        if next_due is not None:
            self._indexed(float(args[1]))
        await self._hold(keys=[keys.OUTBOX_INDEX, keys.OUTBOX_LEASES], args=args)

    @staticmethod
    def _release_args(claim: Claim, next_due: float | None) -> list[str]:
        score = "" if next_due is None else f"{now_ms() + next_due * 1000:.3f}"
        return [claim.run_id, score, claim.score, "release"]

    async def end_pass(
        self,
        run_id: str,
        written: list[tuple[str, Mark, Shown | None]],
        claim: Claim | None,
        next_due: float | None,
        listed: list[str] | tuple[str, ...] = (),
        *,
        first: list[tuple[Any, list[str], list[Any]]] | None = None,
        then: Callable[[Batch], Callable[[list[Any]], None]] | None = None,
        notify: dict[str, float] | None = None,
    ) -> float | None:
        """The end of a projector pass in one round trip: what it delivered (target, its mark
        as read, what Slack holds now or None: unchanged), each mark dropped unless a newer
        change came in; the run listed among `listed` people's runs with news to be told
        (`Outcomes.record_outcomes`, its keys in another slot, after the run's script); then
        the claim released (`release`); before all, the scripts `first` (the outcomes the
        pass recorded, which mark the run's notice), then what `then(batch)` queues (its
        replies given to what it returns: the requester's notice told). After the listing,
        `notify` (a person's notice entry, `@<person>`, -> when it is due, Unix s) is
        indexed, never later than it is (on Redis Cluster, whose nodes may run the commands
        of one pipeline in any order, the listing and these go once the rest is answered: a
        person's pass finds the run listed and its outcomes recorded). All are safe to
        repeat: a
        write lost with its round trip delivers the message again, or finds it delivered.
        (With replicas to confirm writes, `Replicated` confirms each script on its own.)
        Returns when (ms) the release made the run due again (None: not released so)."""
        for due in (notify or {}).values():
            self._indexed(due * 1000)
        after = is_cluster(self.redis) and bool(listed or notify)
        args: list[str | int] = [self.retention]
        for target, marked, shown in written:
            args.extend((target, marked.tick, shown.encode() if shown is not None else ""))
        many = (self._delivered_many, RunKeys(run_id).delivered(), args)
        hold = (
            (
                self._hold,
                [keys.OUTBOX_INDEX, keys.OUTBOX_LEASES],
                self._release_args(claim, next_due),
            )
            if claim is not None
            else None
        )
        if hold is not None and hold[2][1]:
            self._indexed(float(hold[2][1]))
        # With replicas to confirm them, each script is confirmed on its own (`Replicated`).
        alone = isinstance(self.redis, Replicated) and bool(self.redis.replicas)
        if alone:  # (each confirmed by the replicas on its own)
            for found, names, values in first or []:
                await found(keys=names, args=values)
        if then is not None and alone:
            async with self.redis.pipeline(transaction=False) as pipe:
                batch = Batch(pipe)
                alone_told = then(batch)
                alone_told(await batch.execute())
        if written and alone:
            await self._delivered_many(keys=many[1], args=many[2])
        told: Callable[[list[Any]], None] | None = None
        replies: list[Any] = []
        if alone:
            async with self.redis.pipeline(transaction=False) as pipe:
                if not after:
                    self._list_in(pipe, run_id, listed, notify or {})
                if len(pipe):
                    await pipe.execute()
        else:  # in one round trip, with the other passes' ends of this loop iteration

            def queue(batch: Batch) -> Callable[[list[Any]], None] | None:
                for found, names, values in first or []:
                    batch.script(found, names, values)  # (a script not loaded: run after)
                queued = then(batch) if then is not None else None
                if written:
                    batch.script(*many)
                if not after:
                    self._list_in(batch.pipe, run_id, listed, notify or {})
                if hold is not None:
                    batch.script(*hold)
                return queued

            told, replies = await self.together.run(queue)
        if after:
            async with self.redis.pipeline(transaction=False) as pipe:
                self._list_in(pipe, run_id, listed, notify or {})
                await pipe.execute()
        if told is not None:
            told(replies)
        if hold is not None and alone:
            await self._hold(keys=hold[1], args=hold[2])
        return float(hold[2][1]) if hold is not None and hold[2][1] else None

    def _list_in(
        self, pipe: Any, run_id: str, listed: Sequence[str], notify: dict[str, float]
    ) -> None:
        """The run listed among `listed` people's runs with news, then their notices indexed
        (`notify`: entry -> when due, Unix s; never later than indexed already)."""
        for person in listed:
            pipe.zadd(keys.notice_runs_key(person), {run_id: time.time()})
            pipe.expire(keys.notice_runs_key(person), self.retention)
        for entry, due in notify.items():
            pipe.zadd(keys.OUTBOX_INDEX, {entry: due * 1000}, lt=True)

    async def mark_now(self, run_id: str, targets: list[str]) -> None:
        """Have `targets` (new messages the projector found it must post: the further parts
        of a long answer) delivered, in a pass that follows this one."""
        async with self.redis.pipeline(transaction=True) as pipe:
            for target in targets:
                mark(pipe, run_id, target, self.retention)
            await pipe.execute()
        await self.schedule(run_id)

    async def marks(self, run_id: str) -> dict[str, Mark]:
        return self.parse_marks(await self.redis.hgetall(keys.outbox_key(run_id)))

    @staticmethod
    def parse_marks(hash_: dict[Any, Any]) -> dict[str, Mark]:
        """The marks of an outbox hash as HGETALL returns it."""
        raw = {text(k): text(v) for k, v in hash_.items()}
        return {
            target: Mark(tick, float(raw.get(target + "@", "0") or 0))
            for target, tick in raw.items()
            if not target.endswith("@")
        }

    async def done(self, run_id: str, target: str, mark: Mark) -> bool:
        """Drop the mark if no newer change arrived since it was read."""
        done = await self._done(keys=[RunKeys(run_id).outbox], args=[target, mark.tick])
        return int(done) == 1

    def done_in(self, batch: Batch, run_id: str, target: str, tick: str) -> None:
        """`done` queued on `batch` (its reply not needed)."""
        batch.script(self._done, [RunKeys(run_id).outbox], [target, tick])

    async def shown(self, run_id: str) -> dict[str, Shown]:
        return self.parse_shown(await self.redis.hgetall(keys.shown_key(run_id)))

    @staticmethod
    def parse_shown(raw: dict[Any, Any]) -> dict[str, Shown]:
        """What Slack holds, from a shown hash as HGETALL returns it."""
        return {text(k): Shown.decode(text(v)) for k, v in raw.items()}

    async def shown_one(self, run_id: str, target: str) -> Shown:
        """What Slack holds of one message (an empty `Shown`: nothing known)."""
        value = await self.redis.hget(keys.shown_key(run_id), target)
        return Shown.decode(text(value)) if value is not None else Shown()

    async def set_shown(self, run_id: str, target: str, shown: Shown) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            self.set_shown_in(pipe, run_id, target, shown)
            await pipe.execute()

    def set_shown_in(self, pipe: Any, run_id: str, target: str, shown: Shown) -> None:
        """`set_shown` as commands of a pipeline that carries others (one round trip)."""
        key = keys.shown_key(run_id)
        pipe.hset(key, target, shown.encode())
        pipe.expire(key, self.retention)

    async def delivered(self, run_id: str, target: str, shown: Shown, mark: Mark) -> bool:
        """`set_shown` and `done` in one round trip (a delivered message)."""
        done = await self._delivered(
            keys=RunKeys(run_id).delivered(),
            args=[target, mark.tick, shown.encode(), self.retention],
        )
        return int(done) == 1

    async def indexed(self, run_id: str) -> bool:
        return await self.redis.zscore(keys.OUTBOX_INDEX, run_id) is not None

    async def backlog(self) -> int:
        return int(await self.redis.zcard(keys.OUTBOX_INDEX))
