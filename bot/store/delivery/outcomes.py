"""Outcomes people must be told (a call decided or expired, the run ended), and which of them
they were told: their `notice` message is one more target of the run's outbox. Each outcome is
told to who asked for it: the run's starter, or a later turn's requester (its field is then
`<id> <user>`, `outcome_key`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as redis

from bot.store import keys
from bot.store.connection import UNREPLICATED
from bot.store.delivery.outbox import Mark, Outbox
from bot.store.delivery.pacing import Take
from bot.store.keys import RunKeys
from bot.store.parts.calls import Calls
from bot.store.parts.texts import run_from
from bot.store.records import CallRecord, RunRecord
from bot.store.scripts import Batch, now, script, text


def outcome_key(item: str, person: str, starter: str) -> str:
    """The field of an outcome (`item`: an approval id, or `run`) told to `person`: the item
    alone when that is the run's starter (as every outcome was before requesters were kept)."""
    return item if person == starter else f"{item} {person}"


def told_to(key: str, starter: str) -> tuple[str, str]:
    """An outcome field's item and whom it is told to (`outcome_key` read back)."""
    item, _, person = key.partition(" ")
    return item, person or starter


# Record outcomes people must be told; mark their message when one is new.
# KEYS[1] outcomes hash, KEYS[2] outbox; ARGV[1] now, ARGV[2] retention, ARGV[3..] id, outcome
_OUTCOMES = """
local new = 0
for i = 3, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) ~= ARGV[i + 1] then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
    new = new + 1
  end
end
if new > 0 then
  redis.call('EXPIRE', KEYS[1], ARGV[2])
  mark(KEYS[2], 'notice', ARGV[1], ARGV[2])
  return {new, redis.call('HGET', KEYS[2], 'notice'), redis.call('HGET', KEYS[2], 'notice@')}
end
return {new}
"""


def decode_outcomes(reply: list[Any]) -> Mark | None:
    """_OUTCOMES' reply: {new, notice tick, notice since} when an outcome was new, else {0}:
    the notice's mark, or None when nothing was new."""
    if not int(reply[0]):
        return None
    return Mark(text(reply[1]), float(text(reply[2]) or 0))


def untold_in(stored: dict[Any, Any]) -> dict[str, str]:
    """The outcomes not yet told, from an outcomes hash as HGETALL returns it."""
    raw = {text(k): text(v) for k, v in stored.items()}
    return {k: v for k, v in raw.items() if not k.endswith("!") and raw.get(k + "!") != v}


def recorded_for(stored: Iterable[Any], person: str, starter: str) -> bool:
    """Whether an outcomes hash (its fields, or as HGETALL returns it) ever held an outcome
    for `person`."""
    return any(told_to(text(k), starter)[1] == person for k in stored if not text(k).endswith("!"))


_NEWS = 4  # commands a run's news is read with (`Outcomes._read_news`)


@dataclass(frozen=True)
class News:
    """A run listed with news for a person, as their notice pass read it: the run (None: gone),
    its outcomes not yet told (to anyone), and the tick of its `notice` mark (None: unmarked),
    dropped once its news is told unless a newer outcome marked it since."""

    run: RunRecord | None
    untold: dict[str, str]
    tick: str | None


@dataclass(frozen=True)
class NoticeLease:
    """A pass that takes, or holds, a person's notice (`notice.lua`): whose, the token it holds
    the notice with, for how long (seconds: each step renews it), and the most runs a step
    gives it to tell."""

    person: str
    token: str
    seconds: float
    limit: int


@dataclass(frozen=True)
class NoticeTurn:
    """A step of a person's notice (`notice.lua`): whether this pass holds it, the runs it is
    to tell (run id -> when listed, as stored), or when the next notice may go."""

    held: bool
    listed: dict[str, str]
    paced_until: float = 0.0


def decode_turn(reply: list[Any]) -> NoticeTurn:
    """`notice.lua`'s reply: {0}, {-1, next}, or {1, run, listed at, ...}."""
    state = int(reply[0])
    if state == -1:
        return NoticeTurn(False, {}, float(text(reply[1])))
    items = [text(r) for r in reply[1:]]
    return NoticeTurn(state == 1, dict(zip(items[::2], items[1::2], strict=True)))


class Outcomes:
    """What people must be told of runs, and what they were told (idempotent)."""

    def __init__(self, client: redis.Redis, *, retention_seconds: int, outbox: Outbox) -> None:
        self.redis = client
        self.retention = retention_seconds
        self.outbox = outbox
        self._outcomes = client.register_script(script("_outbox") + _OUTCOMES)
        self._notice = client.register_script(script("notice"))
        # (a person's notice keys may be lost in a failover at no cost: each run's own notice
        # pass lists its run again; at worst a notice goes twice, or sooner)
        UNREPLICATED.add(self._notice.sha)

    async def record_outcomes(
        self,
        run_id: str,
        outcomes: dict[str, str],
        people: list[str] | tuple[str, ...] = (),
        window: float = 0.0,
        *,
        later: list[str] | None = None,
    ) -> Mark | None:
        """Note outcomes people must be told (`outcome_key` -> status); the run's `notice` is
        marked when one is new: then its mark (what a reread of the outbox would give), and
        the run is listed among each of `people`'s runs with news, and their notices
        (`keys.notice_entry`) indexed for when the run's notice is due (`window` seconds
        after its mark), unless due sooner; or, with `later`, `people` are added to it for
        the caller to list. Idempotent."""
        if not outcomes:
            return None
        _, names, args = self.recording(run_id, outcomes)
        notice = decode_outcomes(await self._outcomes(keys=names, args=args))
        if notice is not None and later is not None:
            # A projector pass lists the run at its end, with its release (which makes the
            # run due when the notice is): `Outbox.end_pass`.
            later.extend(people)
        elif notice is not None:
            # Their own keys (other slots): after the run's script, never inside it; then
            # their notices are due (in the same round trip, in that order).
            due = max(notice.since + window, time.time())
            notify = {keys.notice_entry(person): due for person in people}
            await self.outbox.end_pass(run_id, [], None, None, list(people), notify=notify)
            if due <= time.time():
                self.outbox.woken.set()
        return notice

    def recording(self, run_id: str, outcomes: dict[str, str]) -> tuple[Any, list[str], list[Any]]:
        """`record_outcomes` (without its listing, and the run made due: the caller's) as a
        script to send with other commands (`Outbox.end_pass`)."""
        args: list[str] = [now(), str(self.retention)]
        for item in sorted(outcomes.items()):
            args.extend(item)
        return self._outcomes, RunKeys(run_id).record_outcomes(), args

    @staticmethod
    def _told_in(pipe: Any, told: dict[str, dict[str, str]]) -> None:
        """Each run's outcomes `told` (`outcome_key` -> status) recorded as told."""
        for run_id, outcomes in told.items():
            if outcomes:
                pipe.hset(
                    keys.outcomes_key(run_id), mapping={k + "!": v for k, v in outcomes.items()}
                )

    def _step(self, batch: Batch, lease: NoticeLease, mode: str, args: list[Any]) -> int:
        """A step of `lease.person`'s notice (`notice.lua`: 'take' or 'told', then `args`)
        queued on `batch`: the index of its reply."""
        person = lease.person
        names = [keys.notice_runs_key(person), keys.notice_lock_key(person),
                 keys.notice_next_key(person)]  # fmt: skip
        head = [mode, lease.token, max(1, int(lease.seconds * 1000)), now(), lease.limit]
        return batch.script(self._notice, names, head + args)

    async def open_notice(
        self,
        lease: NoticeLease,
        run_id: str,
        pace: Callable[[Batch], Callable[[Any], Take]],
        call_ids: list[str],
    ) -> tuple[NoticeTurn, Take, list[tuple[RunRecord, dict[str, str]]], list[CallRecord]]:
        """List `run_id` among the person's runs with news (anew: a reader that saw the older
        listing does not forget it), then try to take their notice for one pass (`lease`), in
        one step: whoever holds the notice, or takes it next, finds the run listed
        (`Projector._tell_person`). Held: the first `lease.limit` runs to tell; not held, and
        `paced_until`: a notice went less than a window ago.

        In the same round trip, what the notice most often needs next: a Slack token
        (`pace`), `run_id`'s news with its record (unless it has none untold), and the calls
        `call_ids` (those its news names, as the pass read it)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            batch = Batch(pipe)
            opened = self.open_in(batch, lease, run_id, pace, call_ids)
            first = len(pipe)
            self._read_news(pipe, [run_id])
            replies = await batch.execute()
        news = self._news([run_id], replies[first : first + _NEWS])
        turn, taken, calls = opened(replies)
        return turn, taken, news, calls

    def open_person_in(
        self,
        batch: Batch,
        lease: NoticeLease,
        pace: Callable[[Batch], Callable[[Any], Take]],
        run_ids: list[str],
        call_ids: list[str],
    ) -> Callable[[list[Any]], tuple[NoticeTurn, Take, dict[str, News], list[CallRecord]]]:
        """The first step of a person's notice pass (`Projector._notify`, #32): take their
        notice (listing no run), with a Slack token (`pace`), the news of `run_ids` (those
        the caller expects listed: `news_of`) and the calls `call_ids` (those their news
        names), queued on `batch`: what decodes its part of the replies."""
        opened = self.open_in(batch, lease, "", pace, call_ids)
        first = len(batch.pipe)
        self._read_news(batch.pipe, run_ids)

        def decoded(
            replies: list[Any],
        ) -> tuple[NoticeTurn, Take, dict[str, News], list[CallRecord]]:
            turn, taken, calls = opened(replies)
            found = replies[first : first + _NEWS * len(run_ids)]
            return turn, taken, self._news_of(run_ids, found), calls

        return decoded

    async def news_of(self, run_ids: list[str]) -> dict[str, News]:
        """Each of `run_ids` as a notice pass reads it (`News`): one round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            self._read_news(pipe, run_ids)
            replies = await pipe.execute()
        return self._news_of(run_ids, replies)

    @staticmethod
    def _news_of(run_ids: list[str], replies: list[Any]) -> dict[str, News]:
        found = {}
        for i, run_id in enumerate(run_ids):
            stored, raw, task, tick = replies[_NEWS * i : _NEWS * i + _NEWS]
            record = run_from(raw, task, run_id)
            found[run_id] = News(record, untold_in(stored) if record else {},
                                 text(tick) if tick is not None else None)  # fmt: skip
        return found

    def open_in(
        self,
        batch: Batch,
        lease: NoticeLease,
        run_id: str,
        pace: Callable[[Batch], Callable[[Any], Take]],
        call_ids: list[str],
    ) -> Callable[[list[Any]], tuple[NoticeTurn, Take, list[CallRecord]]]:
        """`open_notice` without its read of the run's news, queued on `batch` (with the
        reads of a projector pass): what decodes its part of the replies."""
        turn = self._step(batch, lease, "take", [run_id, self.retention])
        taken = pace(batch)
        first = len(batch.pipe)
        Calls.read_calls(batch.pipe, call_ids)

        def opened(replies: list[Any]) -> tuple[NoticeTurn, Take, list[CallRecord]]:
            found = replies[first : first + 2 * len(call_ids)]
            return decode_turn(replies[turn]), taken(replies), Calls.calls_from(call_ids, found)

        return opened

    async def told_notice(
        self,
        lease: NoticeLease,
        told: dict[str, str],
        *,
        window: float,
        stop: bool = False,
        outcomes: dict[str, dict[str, str]] | None = None,
    ) -> NoticeTurn:
        """The person was told the runs `told` (as listed) and, with `window`, sent a notice
        now (the next waits that long): unlist them unless listed again since; then the next
        runs to tell, the notice kept, or (none left, or `stop`) the notice given back, in
        the same step; first (in the same round trip) the `outcomes` told are recorded as
        told."""
        async with self.redis.pipeline(transaction=False) as pipe:
            batch = Batch(pipe)
            turn = self.told_in(batch, lease, told, window=window, stop=stop, outcomes=outcomes)
            return turn(await batch.execute())

    def told_in(
        self,
        batch: Batch,
        lease: NoticeLease,
        told: dict[str, str],
        *,
        window: float,
        stop: bool = False,
        outcomes: dict[str, dict[str, str]] | None = None,
    ) -> Callable[[list[Any]], NoticeTurn]:
        """`told_notice` queued on `batch` (with a projector pass's end): what decodes its
        reply."""
        args: list[Any] = ["1" if window > 0 else "0", repr(window), "1" if stop else "0"]
        for run_id, score in told.items():
            args.extend((run_id, score))
        self._told_in(batch.pipe, outcomes or {})
        turn = self._step(batch, lease, "told", args)

        def decoded(replies: list[Any]) -> NoticeTurn:
            if isinstance(replies[turn], Exception):
                raise replies[turn]
            return decode_turn(replies[turn])

        return decoded

    @staticmethod
    def _read_news(pipe: Any, run_ids: list[str]) -> None:
        for run_id in run_ids:  # (_NEWS commands a run)
            pipe.hgetall(keys.outcomes_key(run_id))
            pipe.hgetall(keys.run_key(run_id))
            pipe.get(keys.task_key(run_id))
            pipe.hget(keys.outbox_key(run_id), keys.NOTICE)

    @staticmethod
    def _news(run_ids: list[str], replies: list[Any]) -> list[tuple[RunRecord, dict[str, str]]]:
        """The runs that still exist among `run_ids`, each with its outcomes not yet told
        (runs with none left out), in the order asked, from `_read_news`' replies."""
        found = []
        for i, run_id in enumerate(run_ids):
            stored, raw, task, _ = replies[_NEWS * i : _NEWS * i + _NEWS]
            untold = untold_in(stored)
            record = run_from(raw, task, run_id)
            if untold and record is not None:
                found.append((record, untold))
        return found

    async def untold_outcomes(self, run_id: str) -> dict[str, str]:
        """Outcomes recorded and not yet told (`outcome_key` -> status)."""
        return untold_in(await self.redis.hgetall(keys.outcomes_key(run_id)))

    async def has_outcomes(self, run_id: str, person: str, starter: str) -> bool:
        """Whether an outcome of the run was ever recorded for `person` to be told."""
        found = await self.redis.hkeys(keys.outcomes_key(run_id))  # type: ignore[misc]
        return recorded_for(found, person, starter)
