"""Runs in Redis, changed only through owner-checked transitions, and `RunStore`: the one
object the service holds, over the parts of the store split by what they keep.

Each transition that must be atomic (`save_pause`, `finish`, `cancel`, taking a job) is one Lua
script over keys of a single run, all sharing that run's hash tag; its reply is decoded in one
function beside its wrapper, into a typed result. A write refused because the caller's
execution no longer owns the run raises `NotOwner`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import redis.asyncio as redis
from redis.exceptions import NoScriptError

from bot.clock import SYSTEM_CLOCK, Clock
from bot.store import keys
from bot.store.connection import UNREPLICATED, is_cluster
from bot.store.delivery.outbox import Mark, Outbox, Shown, now_ms
from bot.store.delivery.outcomes import Outcomes
from bot.store.errors import NotOwner as NotOwner
from bot.store.errors import StoreError as StoreError
from bot.store.keys import RunKeys
from bot.store.parts.calls import CONTEXT_FIELD, INLINE_CONTEXT, Calls, read_context
from bot.store.parts.calls import MAX_COMMENTS as MAX_COMMENTS
from bot.store.parts.edits import Edits
from bot.store.parts.indexes import Indexes
from bot.store.parts.reviews import Reviews
from bot.store.parts.snapshots import SNAPSHOT_TAG as SNAPSHOT_TAG
from bot.store.parts.snapshots import decode_snapshot as decode_snapshot
from bot.store.parts.snapshots import encode_snapshot as encode_snapshot
from bot.store.parts.snapshots import stored_snapshot
from bot.store.parts.texts import call_from, run_from, split_call, split_run, unpack_text
from bot.store.parts.timers import Timers
from bot.store.parts.turns import Turns
from bot.store.queue import GROUP, STREAM, Job, JobQueue
from bot.store.records import (
    CallContext,
    CallRecord,
    CancelResult,
    RunRecord,
    Snapshot,
)
from bot.store.scripts import Batch, gated_in, gated_replies, mark, marking, script, text
from bot.store.scripts import now as now

log = logging.getLogger(__name__)

TIMER_MARGIN = 86400  # a paused run's records outlive its calls' expiry by at least this
CANCEL_TRIES = 5  # a run that pauses again at every try of a cancel (never, in practice)
RECENT_RUNS = 20  # runs kept per person for their App Home
PROGRESS_DUE_IN = 1.0  # seconds: the projector coalesces a run message's changes as long

# An attempt its worker gave up because Redis was away (or no replica confirmed a write) is
# not one that "stopped before it finished": it does not count toward giving the run up.
_FORGIVE = """
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1]
   and tonumber(redis.call('HGET', KEYS[1], 'attempts') or '0') > 1 then
  return redis.call('HINCRBY', KEYS[1], 'attempts', -1)
end
return 0
"""

_ADD_NOTE = """
local n = redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
mark(KEYS[2], 'note:' .. n, ARGV[2], ARGV[3])
return n
"""


# Taking a job (take_job.lua) ----------------------------------------------------------------


@dataclass(frozen=True)
class Taken:
    """What taking a job's execution found, and for a taken one what it runs on."""

    kind: Literal["fresh", "retry", "skip"]
    """fresh: first taken; retry: an earlier attempt stopped; skip: nothing to do (the run
    moved on, or another delivery has it)."""
    attempts: int
    """The attempts the execution has had, this one included (0 for a skip)."""
    run: RunRecord | None = None
    """The run as taken, owned by the new attempt (None for a skip)."""
    snapshot: bytes | None = None
    """A resume's snapshot string as stored (None: not read, or layout 1)."""
    calls: list[CallRecord] | None = None
    """A resume's pause (None: not read)."""


def decode_take(reply: list[Any], run_id: str, pause: Sequence[str] = ()) -> Taken:
    """take_job.lua's reply: {'skip', why} | {kind, previous owner, attempts, snapshot string
    or '', task key's value or '', the calls of `pause` (the pause the job named; none when
    it is not the run's), run hash fields and values...}."""
    kind = text(reply[0])
    if kind == "skip":
        return Taken("skip", 0)
    assert kind in ("fresh", "retry"), kind
    flat = reply[6:]
    run = run_from(dict(zip(flat[::2], flat[1::2], strict=True)), reply[4] or None, run_id)
    calls = None
    if reply[5]:
        found = (
            call_from(dict(zip(raw[::2], raw[1::2], strict=True)), arguments or None, i)
            for i, (raw, arguments) in zip(pause, reply[5], strict=True)
        )
        calls = sorted((c for c in found if c is not None), key=lambda c: c.index)
    return Taken(kind, int(reply[2]), run, reply[3] or None, calls)  # type: ignore[arg-type]


# Pausing, ending, cancelling ----------------------------------------------------------------


def decode_save_pause(reply: list[Any], run_id: str) -> int:
    """save_pause.lua's reply: {'ok', pause} (saved now, or the same save repeated) |
    {'not_owner'} | {'bad_status', status}: the pause's number."""
    kind = text(reply[0])
    if kind == "ok":
        return int(reply[1])
    if kind == "not_owner":
        raise NotOwner(run_id, "save_pause")
    raise StoreError(f"cannot save pause of run {run_id}: {[text(r) for r in reply]}")


@dataclass(frozen=True)
class Ended:
    """This request ended the run (now, or before: the same request repeated after a lost
    reply)."""

    status: str
    """The status the script found: the one it ended (running, resuming, paused), or for a
    repeated request the final one."""
    message_ts: str = ""
    """The run message's ts (indexed once the run ended: a reply in its thread follows up)."""
    followups: int = 0
    """Follow-ups waiting for a turn as it ended (then the next turn is started at once)."""


@dataclass(frozen=True)
class AlreadyEnded:
    """The run had ended before (finished or failed); nothing changed."""

    status: str
    """How it ended."""


@dataclass(frozen=True)
class RunMissing:
    """No such run (expired, or never created); nothing changed."""


FinishResult = Ended | AlreadyEnded | RunMissing


PASS_STEPS = 2  # loop steps a run's end lets the pass it started go first (`Runs.finish`)


def decode_finish(reply: list[Any], run_id: str) -> FinishResult:
    """finish.lua's reply: {'ok', status, message ts, follow-ups waiting} | {'already', status}
    | {'missing'} | {'not_owner'} (raised as `NotOwner`)."""
    kind = text(reply[0])
    if kind == "ok":
        ts = text(reply[2]) if len(reply) > 2 else ""
        return Ended(text(reply[1]), ts, int(reply[3]) if len(reply) > 3 else 0)
    if kind == "already":
        return AlreadyEnded(text(reply[1]))
    if kind == "not_owner":
        raise NotOwner(run_id, "finish")
    return RunMissing()


def decode_cancel(reply: list[Any]) -> CancelResult:
    """cancel.lua's reply: {'ok', status, message ts, cancelled call ids...} |
    {'already', by, at} | {'ended', status} | {'missing'}."""
    kind = text(reply[0])
    if kind == "ok":
        return CancelResult(
            "ok",
            status=text(reply[1]),
            message_ts=text(reply[2]),
            calls=tuple(text(r) for r in reply[3:]),
        )
    if kind == "already":
        return CancelResult("already", by=text(reply[1]), at=float(text(reply[2]) or 0))
    if kind == "ended":
        return CancelResult("ended", status=text(reply[1]))
    return CancelResult("missing")


@dataclass(frozen=True)
class Projection:
    """What a projector pass reads of a run (`Runs.projection`)."""

    marks: dict[str, Mark]
    run: RunRecord | None
    shown: dict[str, Shown]
    outcomes: dict[Any, Any]  # as HGETALL returns it
    progress: list[str]
    cards: dict[str, tuple[CallRecord | None, CallContext | None]]  # approval id -> its call
    notes: dict[int, str | None]  # each note marked, by number (None: gone)
    also: list[Any]  # the replies of the round trip (what the caller queued with it)


def _pairs(flat: Any) -> dict[Any, Any]:
    """A hash as a script returns HGETALL (a flat list), as redis-py's HGETALL gives it."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


class HandOff:
    """A decision's resume job handed to this process's own idle worker in the decision's
    round trip (handoff.lua, queued behind decide.lua by `Calls.decide`): enqueued, read for
    `consumer` and its execution taken at once, so that the worker's blocked read and its take
    (two steps and a round trip between the decision and its resume) are skipped. The job is
    in the stream, pending for `consumer`, as one the worker read: if this process dies before
    it runs it, another worker takes it over. `taken`: what the script read and took (empty
    when the decision did not resume the run, or none was queued)."""

    def __init__(self, runs: Runs, consumer: str, token: str) -> None:
        self.runs = runs
        self.consumer = consumer
        self.token = token
        self.taken: list[tuple[Job | None, Taken]] = []

    def queue(self, batch: Batch, run_id: str, owner: str, pause: str) -> int:
        """Queue the job's enqueue, read and take for the run `owner` (the decision's token)
        resumes; the index of its reply (`took`)."""
        message = JobQueue.message("resume", run_id, owner, pause)
        values = [owner, len(message), *message, *self.runs._next_args(self.consumer, [self.token])]
        names = [keys.run_key(run_id), STREAM, keys.OUTBOX_INDEX]
        return batch.script(self.runs._handoff, names, values)

    async def took(self, reply: Any) -> None:
        """Its reply: the jobs read and taken (`taken`)."""
        self.taken = await self.runs._taken_jobs(reply)


class Runs:
    """A run's record, progress, notes and snapshot, and its transitions."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        retention_seconds: int,
        outbox: Outbox,
        calls: Calls,
        progress_due_in: float = PROGRESS_DUE_IN,
        take_due_in: float = 0.0,
    ) -> None:
        """`take_due_in`: the projector's coalescing window, from which a run's changes gather
        once a worker took its job (0: a take indexes nothing; see `take_run`)."""
        self.redis = client
        self.retention = retention_seconds
        self.outbox = outbox
        self.calls = calls
        self.progress_due_in = progress_due_in  # a setting (`progress_due_seconds`)
        self.take_due_in = take_due_in
        self._save_pause = client.register_script(marking("save_pause"))
        self._finish = client.register_script(marking("finish"))
        self._take = client.register_script(script("take_job"))
        take = f"local function take(KEYS, ARGV)\n{script('take_job')}\nend\n"
        self._take_next = client.register_script(take + script("take_next"))
        self._handoff = client.register_script(
            f"{take}local function next_jobs(KEYS, ARGV)\n{script('take_next')}\nend\n"
            + script("handoff")
        )
        self._forgive = client.register_script(_FORGIVE)
        UNREPLICATED.add(self._forgive.sha)  # a count: lost in a failover at no cost
        self._release = client.register_script(script("release_job"))
        self._then = client.register_script(script("then"))
        self._add_note = client.register_script(script("_outbox") + _ADD_NOTE)
        self._cancel = client.register_script(marking("cancel"))
        self._projection = client.register_script(script("projection"))
        UNREPLICATED.add(self._projection.sha)  # reads only: nothing for replicas to confirm

    async def create_run(self, run: RunRecord, after: Callable[[Any], None] | None = None) -> None:
        """Store a new run, owned by `run.owner` until it pauses or ends; its message is due.
        `after(pipe)`: writes to send with the index writes that follow (its audit entry).
        One round trip, a transaction of the run and its indexes, on a single server; two on a
        cluster (a transaction stays within one slot: the run's, then the indexes)."""
        key = keys.run_key(run.run_id)
        stored, task = split_run(run)  # a long task: in its own key, once (bot.store.parts.texts)
        single = not is_cluster(self.redis)
        with self.outbox.making_due(run.run_id):  # this process's projector posts its message
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.hset(key, mapping=stored)  # type: ignore[arg-type]
                pipe.expire(key, self.retention)
                if task is not None:
                    pipe.set(keys.task_key(run.run_id), task, ex=self.retention)
                mark(pipe, run.run_id, "run", self.retention)
                if single:
                    self._index_new(pipe, run, after)
                await pipe.execute()
            if not single:
                async with self.redis.pipeline(transaction=False) as pipe:
                    self._index_new(pipe, run, after)
                    await pipe.execute()

    def _index_new(self, pipe: Any, run: RunRecord, after: Callable[[Any], None] | None) -> None:
        """A new run's index writes, after the run's own (`create_run`)."""
        # Indexed only once it exists, so a sweeper never sees an id without its run; on its
        # channel's index before the active set (a run active is never missing from its
        # channel's); due (waiting for a worker) since its last change; listed among its
        # starter's runs.
        mine = keys.user_runs_key(run.team_id, run.user_id)
        pipe.zadd(
            keys.channel_runs_key(run.channel_id), {run.run_id: float(run.created_at or now())}
        )
        pipe.sadd(keys.EXECUTING_RUNS, run.run_id)
        pipe.zadd(keys.DUE_RUNS, {run.run_id: float(run.updated_at or now())})
        pipe.zadd(mine, {run.run_id: float(run.created_at or now())})
        pipe.zremrangebyrank(mine, 0, -RECENT_RUNS - 1)
        pipe.expire(mine, self.retention)
        self.outbox.schedule_in(pipe, run.run_id)
        if after is not None:
            after(pipe)

    async def add_progress(
        self, run_id: str, line: str, keep: int = 8, due_in: float | None = None
    ) -> None:
        """Append a progress line (shown in the run message, coalesced with its status): the
        run is due for Slack in `due_in` seconds (sooner if something else makes it due), so
        the lines of a quick run's tools wake nothing before its end does."""
        # Not a transaction: the line and its mark are in the run's slot, the due index in
        # another (a cluster refuses a transaction across slots). Display data only: a crash
        # between them shows the line with the run's next change; a mark left unindexed is
        # found by the sweeper's reconciler.
        async with self.redis.pipeline(transaction=False) as pipe:
            self.add_progress_in(pipe, run_id, line, keep, due_in)
            await pipe.execute()
        if due_in is not None and due_in <= 0:
            self.outbox.woken.set()

    def add_progress_in(
        self, pipe: Any, run_id: str, line: str, keep: int = 8, due_in: float | None = None
    ) -> None:
        """`add_progress`, as commands of a pipeline that carries other writes (not a
        transaction: see there)."""
        key = keys.progress_key(run_id)
        pipe.rpush(key, line)
        pipe.ltrim(key, -keep, -1)
        pipe.expire(key, self.retention)
        mark(pipe, run_id, "run", self.retention)
        self.outbox.schedule_in(pipe, run_id, self.progress_due_in if due_in is None else due_in)

    async def add_note(self, run_id: str, text: str) -> None:
        """A note for the run's thread: plain text, or the service's `Text` kept as a string
        (`bot.service.replies.stored`); rendered and escaped once, where it is shown."""
        await self._add_note(keys=RunKeys(run_id).add_note(), args=[text, now(), self.retention])
        await self.outbox.schedule(run_id)

    @property
    def notes_ride(self) -> bool:
        """Whether a note may ride in a pipeline of other writes (`add_note_in`): not on Redis
        Cluster, nor with replicas to confirm writes (a script alone there, as `add_note`)."""
        return self.outbox.reads_ahead

    def add_note_in(self, pipe: Any, run_id: str, text: str) -> None:
        """`add_note` as commands of a pipeline that carries other writes of the run (what
        `Execution.riders` sends before the run's next model call or tool): the script as EVAL
        (its text, so a server that does not hold it yet runs it all the same), and the run due
        for Slack within the coalescing window (`progress_due_in`), as a progress line is: its
        end, sooner, shows the note in the same pass as the output, notes first (#32)."""
        names = RunKeys(run_id).add_note()
        pipe.eval(self._add_note.script, len(names), *names, text, now(), self.retention)
        self.outbox.schedule_in(pipe, run_id, self.progress_due_in)

    async def note(self, run_id: str, number: int) -> str | None:
        value = await self.redis.lindex(keys.notes_key(run_id), number - 1)
        return text(value) if value is not None else None

    async def progress(self, run_id: str) -> list[str]:
        return [text(line) for line in await self.redis.lrange(keys.progress_key(run_id), 0, -1)]

    async def whole_task(self, run: RunRecord) -> str:
        """The task as the person typed it (a start job needs it; the run hash of a run started
        under layout 2 holds a cut copy)."""
        if len(run.task) >= run.task_chars:
            return run.task
        value = await self.redis.get(keys.task_key(run.run_id))
        return unpack_text(value) if isinstance(value, bytes) else run.task

    async def get_run(self, run_id: str) -> RunRecord | None:
        [run] = await self.runs([run_id])
        return run

    async def runs(self, run_ids: Sequence[str]) -> list[RunRecord | None]:
        """These runs (each with its task key), in one round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.hgetall(keys.run_key(run_id))
                pipe.get(keys.task_key(run_id))
            replies = await pipe.execute()
        return [
            run_from(raw, task, run_id)
            for run_id, raw, task in zip(run_ids, replies[::2], replies[1::2], strict=True)
        ]

    async def get_runs(self, run_ids: Sequence[str]) -> list[RunRecord]:
        """The runs that still exist, in the order asked (one round trip)."""
        return [run for run in await self.runs(run_ids) if run is not None]

    async def recent_run_ids(self, people: Sequence[tuple[str, str]], limit: int) -> list[str]:
        """The ids of the runs each of `people` (team, user) started, newest `limit` each, in
        one round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for team, user in people:
                pipe.zrevrange(keys.user_runs_key(team, user), 0, limit - 1)
            found = await pipe.execute()
        return [text(i) for ids in found for i in ids]

    async def recent_runs(self, team: str, user: str, limit: int = 10) -> list[RunRecord]:
        """The runs a person started, newest first."""
        ids = await self.redis.zrevrange(keys.user_runs_key(team, user), 0, limit - 1)
        return await self.get_runs([text(i) for i in ids])

    async def projection(
        self, run_id: str, also: Callable[[Batch], None] | None = None
    ) -> Projection:
        """What a projector pass reads, in one round trip (`projection_in`); with what
        `also(batch)` queued (other slots: read and taken in the same round trip; `Batch`)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            batch = Batch(pipe)
            read = self.projection_in(batch, run_id)
            if also is not None:
                also(batch)
            return read(await batch.execute())

    def projection_in(self, batch: Batch, run_id: str) -> Callable[[list[Any]], Projection]:
        """What a projector pass reads (`projection.lua`), queued on `batch`: the run's marks,
        the run, what Slack holds of its messages, its outcomes hash
        (`bot.store.delivery.outcomes`: who is to be told what) as HGETALL returns it, its
        progress lines (for its run message), each note marked and the call of each card
        marked; what decodes
        it (`Projection.also`: all the batch's replies)."""
        names = [
            keys.outbox_key(run_id),
            keys.run_key(run_id),
            keys.task_key(run_id),
            keys.shown_key(run_id),
            keys.outcomes_key(run_id),
            keys.progress_key(run_id),
            keys.notes_key(run_id),
        ]
        first = batch.script(self._projection, names, [run_id, keys.call_key(f"{run_id}.")])

        def decoded(replies: list[Any]) -> Projection:
            marks, run, task, shown, outcomes, progress, notes, *cards = replies[first]
            found: dict[str, tuple[CallRecord | None, CallContext | None]] = {}
            for i in range(0, len(cards), 4):
                approval_id, raw = text(cards[i]), _pairs(cards[i + 1])
                inline = raw.get(CONTEXT_FIELD.encode())
                found[approval_id] = (
                    call_from(raw, cards[i + 2], approval_id),
                    read_context(cards[i + 3] or inline),
                )
            return Projection(
                Outbox.parse_marks(_pairs(marks)),
                run_from(_pairs(run), task, run_id),
                Outbox.parse_shown(_pairs(shown)),
                _pairs(outcomes),
                [text(line) for line in progress],
                found,
                {
                    int(notes[i]): None if notes[i + 1] is None else text(notes[i + 1])
                    for i in range(0, len(notes), 2)
                },
                replies,
            )

        return decoded

    async def set_run_message(
        self, run_id: str, ts: str, after: Callable[[Any], None] | None = None
    ) -> None:
        """Record the run message's ts; `after(pipe)`: writes to send with it (a run's start
        job, which waits for its message)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            self.set_run_message_in(pipe, run_id, ts, after)
            await pipe.execute()

    @staticmethod
    def set_run_message_in(
        pipe: Any, run_id: str, ts: str, after: Callable[[Any], None] | None = None
    ) -> None:
        """`set_run_message` as commands of a pipeline that carries other writes."""
        pipe.hset(keys.run_key(run_id), "message_ts", ts)
        if after is not None:
            after(pipe)

    async def run_for_message(self, channel: str, ts: str) -> str | None:
        """The run whose run message is (channel, ts), if that is one: an ended run by the
        message index (`finish` writes it), a run going on among its channel's (started at
        most a few minutes before its message was posted). A paused run costs no index key."""
        value = await self.redis.get(keys.message_key(channel, ts))
        found = text(value) if value is not None else ""
        if found and "." not in found:  # approval ids have a dot
            return found
        try:
            posted = float(ts)
        except ValueError:
            return None
        nearby = await self.redis.zrangebyscore(
            keys.channel_runs_key(channel), posted - RUN_MESSAGE_WITHIN, posted + 1
        )
        if not nearby:
            return None
        async with self.redis.pipeline(transaction=False) as pipe:
            for run_id in nearby:
                pipe.hget(keys.run_key(text(run_id)), "message_ts")
            shown = await pipe.execute()
        for run_id, message_ts in zip(nearby, shown, strict=True):
            if message_ts is not None and text(message_ts) == ts:
                return text(run_id)
        return None

    async def reopened(self, run: RunRecord) -> None:
        """A finished run took its next turn: executing again (the sweeper's indexes), on its
        channel's list, due for its run message."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zadd(keys.channel_runs_key(run.channel_id), {run.run_id: float(run.created_at)})
            pipe.sadd(keys.EXECUTING_RUNS, run.run_id)
            pipe.zadd(keys.DUE_RUNS, {run.run_id: float(now())})
            self.outbox.schedule_in(pipe, run.run_id)
            await pipe.execute()
        self.outbox.woken.set()

    async def set_run_fields(self, run_id: str, **fields: str) -> None:
        await self.redis.hset(keys.run_key(run_id), mapping=fields)  # type: ignore[arg-type]

    # Pauses and snapshots -----------------------------------------------------------------

    async def save_pause(
        self,
        run_id: str,
        owner: str,
        snapshot: Snapshot,
        calls: list[CallRecord],
        since: float,
        contexts: Mapping[str, CallContext] | None = None,
    ) -> int:
        """Store the snapshot and the pause's calls; the run becomes `paused`. Returns the pause.
        The run is due (for the sweeper) from `since` until its automatic decisions are applied.
        Raises `NotOwner` when `owner` no longer owns the run, `StoreError` when it is not
        running."""
        tokens = " ".join(c.approval_id.partition(".")[2] for c in calls)
        # The records must outlive the longest wait: a call expires, it never just vanishes.
        hold = max([self.retention, *(c.expire_after + TIMER_MARGIN for c in calls)])
        # What each card shows beside its call: a short context is a field of the call hash
        # (within the 64 bytes that keep a hash compact), a longer one its own string, written
        # first: a card is never shown before what it shows beside it.
        inline: dict[str, str] = {}
        apart: dict[str, str] = {}
        for approval_id, context in (contexts or {}).items():
            encoded = context.to_json()  # "{}" too: the card then says the agent gave no reason
            short = len(encoded.encode()) <= INLINE_CONTEXT
            (inline if short else apart)[approval_id] = encoded
        if apart:
            async with self.redis.pipeline(transaction=False) as pipe:
                for approval_id, encoded in apart.items():
                    pipe.set(keys.context_key(approval_id), encoded, ex=hold)
                await pipe.execute()
        stored = [split_call(c) for c in calls]  # long arguments: in a key of their own
        reply = await self._save_pause(
            keys=RunKeys(run_id).save_pause([c.approval_id for c in calls]),
            args=[
                owner,
                now(),
                hold,
                encode_snapshot(snapshot),
                run_id,
                tokens,
                *(
                    json.dumps(with_context(fields, inline.get(c.approval_id)))
                    for c, (fields, _) in zip(calls, stored, strict=True)
                ),
                *(arguments or b"" for _, arguments in stored),
            ],
        )
        pause = decode_save_pause(reply, run_id)
        async with self.redis.pipeline(transaction=False) as pipe:
            self.outbox.schedule_in(pipe, run_id)
            # due until its automatic decisions are applied (`not_due` with this time)
            pipe.zadd(keys.DUE_RUNS, {run_id: since})
            await pipe.execute()
        self.outbox.woken.set()  # its cards are due now
        return pause

    async def load_snapshot(self, run_id: str) -> Snapshot | None:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(keys.state_key(run_id))
            pipe.hgetall(keys.snapshot_key(run_id))  # layout 1
            blob, raw = await pipe.execute()
        return stored_snapshot(blob, raw)

    async def resume_state(self, run_id: str) -> tuple[list[CallRecord], Snapshot | None]:
        """What a resume reads: the pause's calls and the snapshot (two round trips)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(keys.run_key(run_id), "calls")
            pipe.smembers(keys.pause_key(run_id))
            pipe.get(keys.state_key(run_id))
            pipe.hgetall(keys.snapshot_key(run_id))
            tokens, members, blob, raw = await pipe.execute()
        ids = Calls.ids_of_pause(run_id, tokens, members)
        return await self.calls.calls(ids), stored_snapshot(blob, raw)

    # Ending -------------------------------------------------------------------------------

    async def finish(
        self,
        run_id: str,
        owner: str,
        *,
        status: str,
        text: str,
        drop_snapshot: bool,
        channel: str = "",
        after: Callable[[Any], Callable[[], None] | None] | None = None,
        history: bytes = b"",
        message_ts: str | None = None,
    ) -> FinishResult:
        """End a run: `Ended` (now, or this same request before), `AlreadyEnded`, `RunMissing`;
        raises `NotOwner` when `owner` does not own it (a paused run: owner `paused`).
        `channel`: the run's, to take it off that channel's index (else readers drop it).
        `after(pipe)`: writes to send, when it ended the run, with the index writes that follow
        (the audit entry: one round trip, not two); it may return what to do once they are
        written. `history`: the conversation after the turn (`Finished.history`), kept by the
        same script as the end. `message_ts`: the run message's ts as the caller read it
        (None: not known): with it, on one server without replicas to confirm writes, the
        writes that follow ride behind the end in its round trip, run only if it ended the run
        (then.lua): one round trip, not two."""
        names = RunKeys(run_id).finish()
        values: list[str | int | bytes] = [
            owner, status, text, now(), self.retention, "1" if drop_snapshot else "0", history,
        ]  # fmt: skip
        passes = self.outbox.passes if self.outbox.reads_ahead else None
        started = False
        gated: int | None = None
        written: Callable[[], None] | None = None
        # (Not in a pipeline with replicas to confirm writes: `Replicated` waits for them after
        # a script sent alone.)
        ride = message_ts is not None and self.outbox.reads_ahead
        if passes is None and not ride:
            reply = await self._finish(keys=names, args=values)
        else:
            # This process's projector claims and reads the run in the same round trip, right
            # after the end (which marks what the end shows), and its pass starts at once: the
            # output goes to Slack without the index write's round trip, a wake-up and a
            # claim of its own (#32). The claim indexes the run (a crash delivers it later).
            # Behind them, the writes that follow an end, run only if this one ended the run
            # (then.lua): off the active set only once indexed (the claim, or here first).
            making: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
            async with self.redis.pipeline(transaction=False) as pipe:
                batch = Batch(pipe)
                index = batch.script(self._finish, names, values)
                start = passes(batch, run_id, channel) if passes is not None else None
                if ride and message_ts is not None:
                    recorded = self.redis.pipeline(transaction=False)
                    written = self._ended_in(
                        recorded, run_id, channel, message_ts, after, schedule=start is None
                    )
                    ended_by = [("ended_by", owner), ("status", status)]
                    gated = gated_in(
                        batch, self._then, [(keys.run_key(run_id), ended_by, recorded)]
                    )
                if gated is not None and start is None:
                    making = self.outbox.making_due(
                        run_id
                    )  # (its projector reads it with its claim)
                with making or contextlib.nullcontext():
                    raw = await pipe.execute(raise_on_error=False)
                    replies = await batch.settle(raw)
            if start is not None:  # (a script the server had to load ran after the read)
                start(replies, not isinstance(raw[index], NoScriptError))
                started = True
                # The pass first (its task's step, then its messages'): the output is drawn
                # and its token asked for before what follows here, which no one waits on.
                for _ in range(PASS_STEPS):
                    await asyncio.sleep(0)
            reply = replies[index]
            if isinstance(reply, Exception):
                raise reply
        result = decode_finish(reply, run_id)
        if not isinstance(result, Ended):
            return result
        ridden = None
        if gated is not None and not isinstance(replies[gated], Exception):
            [ridden] = gated_replies(replies[gated])
        if ridden is None:  # indexed before it leaves the active set (reconciler)
            due = contextlib.nullcontext() if started else self.outbox.making_due(run_id)
            with due:  # this process's projector reads it with its claim
                async with self.redis.pipeline(transaction=False) as pipe:
                    written = self._ended_in(
                        pipe, run_id, channel, result.message_ts, after, schedule=not started
                    )  # (claimed above: indexed by its claim)
                    await pipe.execute()
        elif channel and result.message_ts and result.message_ts != message_ts:
            await self.redis.set(  # (its message was posted after the caller's read)
                keys.message_key(channel, result.message_ts), run_id, ex=self.retention
            )
        if written is not None:
            written()
        return result

    def _ended_in(
        self, pipe: Any, run_id: str, channel: str, message_ts: str,
        after: Callable[[Any], Callable[[], None] | None] | None, *, schedule: bool = True,
    ) -> Callable[[], None] | None:  # fmt: skip
        """The writes that follow a run's end (`finish`): due for Slack (unless a claim of its
        indexes it), off the indexes of runs going on, found by its message's ts, and
        `after`'s."""
        if schedule:
            self.outbox.schedule_in(pipe, run_id)  # (a pipeline runs in order)
        if channel:
            pipe.zrem(keys.channel_runs_key(channel), run_id)
        pipe.srem(keys.EXECUTING_RUNS, run_id)
        pipe.zrem(keys.DUE_RUNS, run_id)
        if channel and message_ts:  # off the channel's index: found by its ts
            pipe.set(keys.message_key(channel, message_ts), run_id, ex=self.retention)
        return after(pipe) if after is not None else None

    async def cancel(
        self,
        run_id: str,
        *,
        team: str,
        user: str,
        pause: Sequence[str] | None = None,
        channel: str = "",
    ) -> CancelResult:
        """Cancel a run and its pending calls, exactly once (see cancel.lua). `pause`: the
        approval ids of the run's pause as the caller read them (`RunRecord.call_ids()`; None:
        read here). The script checks them against the pause it finds, and names the pause's
        ids when a newer pause was saved meanwhile: it then runs again on those. `channel`:
        the run's, to take it off that channel's index (a reply in its thread finds it by its
        message's ts, as an ended run's)."""
        ids = list(pause) if pause is not None else await self.calls.pause_ids(run_id)
        for _ in range(CANCEL_TRIES):
            reply = await self._cancel(
                keys=RunKeys(run_id).cancel(ids), args=[team, user, now(), self.retention, *ids]
            )
            if text(reply[0]) != "stale":
                break
            ids = [text(r) for r in reply[1:]]
        else:
            raise StoreError(f"run {run_id} paused again at every one of {CANCEL_TRIES} cancels")
        result = decode_cancel(reply)
        if result.outcome == "ok":
            async with self.redis.pipeline(transaction=False) as pipe:
                self.outbox.schedule_in(pipe, run_id)
                if channel and result.message_ts:  # off the channel's index: found by its ts
                    pipe.set(keys.message_key(channel, result.message_ts), run_id,
                             ex=self.retention)  # fmt: skip
                if channel:
                    pipe.zrem(keys.channel_runs_key(channel), run_id)
                pipe.srem(keys.EXECUTING_RUNS, run_id)
                pipe.zrem(keys.DUE_RUNS, run_id)
                await pipe.execute()
            self.outbox.woken.set()
        return result

    # Executions ---------------------------------------------------------------------------

    async def take(
        self, run_id: str, execution: str, message_id: str, attempt: str
    ) -> tuple[str, int]:
        """Take the execution a job names: 'fresh', 'retry' (an earlier attempt stopped), or
        'skip' (nothing to do: the run moved on, or another delivery has it); and how many
        attempts the execution has had."""
        taken = await self.take_run(run_id, execution, message_id, attempt)
        return taken.kind, taken.attempts

    async def take_run(
        self,
        run_id: str,
        execution: str,
        message_id: str,
        attempt: str,
        *,
        resume: bool = False,
        pause: str = "",
    ) -> Taken:
        """`take`, with the run as taken and, for a `resume`, its snapshot and its pause's calls:
        one round trip when the job named the pause it resumes (`pause`: its tokens, as the
        run's `calls` held them) and that is still the run's, else two. The run stays on the
        due set until it pauses or ends (its job's lease watches it; the sweeper only checks
        that a delivery of the job is still pending, see `release_lost_job`)."""
        named = [f"{run_id}.{token}" for token in pause.split()] if resume else []
        names = RunKeys(run_id).take_job(named)
        values: list[str | int | float] = [
            execution, message_id, attempt, now(), self.retention, "1" if resume else "",
            pause if resume else "",
        ]  # fmt: skip
        if self._waited(message_id):
            # Its run's pass found the job queued and left the run alone until it is taken (a
            # burst's resumes queue up): it is due once its changes gathered from the take,
            # indexed in the take's round trip.
            async with self.redis.pipeline(transaction=False) as pipe:
                batch = Batch(pipe)
                index = batch.script(self._take, names, values)
                due = self.outbox.schedule_in(pipe, run_id, self.take_due_in)
                reply = (await batch.execute())[index]
                self.outbox.written(due)
        else:
            reply = await self._take(keys=names, args=values)
        return await self._with_pause(decode_take(reply, run_id, named), resume)

    @property
    def takes_next(self) -> bool:
        """Whether a worker may read and take its next jobs in one round trip (`take_next`):
        on one server without replicas to confirm writes (the script names each job's keys)."""
        return self.outbox.reads_ahead

    async def take_next(
        self, consumer: str, tokens: Sequence[str]
    ) -> list[tuple[Job | None, Taken]]:
        """Read up to `len(tokens)` jobs waiting for a worker, for `consumer`, and take each
        one's execution (`take_run`, its attempt `<execution>/<token>`), in one round trip
        (take_next.lua; `takes_next` must hold). Never blocks: [] when none waits. A job
        whose message is malformed comes as (None, skip), acknowledged."""
        values = self._next_args(consumer, tokens)
        reply = await self._take_next(keys=[STREAM, keys.OUTBOX_INDEX], args=values)
        return await self._taken_jobs(reply)

    def _next_args(self, consumer: str, tokens: Sequence[str]) -> list[str | int | float]:
        """take_next.lua's ARGV."""
        at = now_ms()
        return [
            GROUP, consumer, now(), self.retention, keys.PREFIX,
            int(at - self.calls.resume_gather * 1000), f"{at + self.take_due_in * 1000:.3f}"
            if self.takes_index else "", *tokens,
        ]  # fmt: skip

    def hand_off(self, consumer: str, token: str) -> HandOff:
        """A decision's resume job, to be handed to `consumer` (this process's idle worker) in
        the decision's round trip, its attempt `<execution>/<token>` (`Calls.decide`'s
        `handoff`; `takes_next` must hold)."""
        return HandOff(self, consumer, token)

    async def _taken_jobs(self, reply: Any) -> list[tuple[Job | None, Taken]]:
        """take_next.lua's reply: each job read and its take."""
        found: list[tuple[Job | None, Taken]] = []
        for message_id, fields, took in reply:
            try:
                job = Job.parse(message_id, dict(zip(fields[::2], fields[1::2], strict=True)))
            except (KeyError, TypeError, AttributeError, ValueError):
                log.error("dropping malformed job message %s: %r", text(message_id), fields)
                await self.redis.xack(STREAM, GROUP, message_id)
                found.append((None, Taken("skip", 0)))
                continue
            if text(took[0]) == "skip":
                found.append((job, Taken("skip", 0)))
                continue
            if self.takes_index and self._waited(job.message_id):
                self.outbox.made_due(self.take_due_in)  # (made due in the script)
            named = [f"{job.run_id}.{t}" for t in job.pause.split()] if job.kind == "resume" else []
            taken = decode_take(took, job.run_id, named)
            found.append((job, await self._with_pause(taken, job.kind == "resume")))
        return found

    async def _with_pause(self, taken: Taken, resume: bool) -> Taken:
        """A taken resume with its pause's calls: read now when the take could not (the job
        named another pause, or none)."""
        if taken.run is None or not resume or taken.calls is not None:
            return taken
        ids = taken.run.call_ids()
        async with self.redis.pipeline(transaction=False) as pipe:
            self.calls.read_calls(pipe, ids)
            replies = await pipe.execute()
        return dataclasses.replace(taken, calls=Calls.calls_from(ids, replies) if ids else None)

    @property
    def takes_index(self) -> bool:
        """Whether a take of a job that waited for a worker makes its run due (`take_run`):
        the projector then leaves a run whose job is queued alone until it is taken. Not on
        Redis Cluster, nor with replicas to confirm writes (the take goes alone there)."""
        return self.take_due_in > 0 and self.outbox.reads_ahead

    def _waited(self, message_id: str) -> bool:
        """Whether the job (its stream message id: when it was enqueued, ms) waited for a worker
        past a decided card's gather, when its run's pass may have found it queued."""
        if not self.takes_index:
            return False
        enqueued, _, _ = message_id.partition("-")
        try:
            return now_ms() - int(enqueued) >= self.calls.resume_gather * 1000
        except ValueError:
            return False

    async def forgive_attempt(self, run_id: str, attempt: str) -> None:
        """Best effort (Redis is likely away): `attempt`, still the run's owner, is not counted
        toward giving the run up (see `_FORGIVE`)."""
        with contextlib.suppress(redis.RedisError, OSError):
            await self._forgive(keys=[keys.run_key(run_id)], args=[attempt])

    async def release_lost_job(self, run_id: str, owner: str, job: str, after: float) -> str:
        """The sweeper found no delivery of `job` pending and none waiting, while `owner` (an
        attempt) holds the run on it: nothing would ever take the run over. The first call
        marks the attempt; one at least `after` seconds later (the same attempt still holding
        the run on the same job) releases the run to the next delivery of its execution.
        'marked', 'waiting' (marked less than `after` ago), 'released', or 'moved' (the run
        is no longer that attempt's on that job: nothing written)."""
        reply = await self._release(
            keys=[keys.run_key(run_id)], args=[owner, job, now(), f"{after:.3f}"]
        )
        return text(reply)

    async def pause_of(self, taken: Taken) -> tuple[list[CallRecord], Snapshot | None]:
        """The calls of a taken run's pause and its snapshot (as `take_run` read them; a run
        paused under layout 1 takes two more round trips)."""
        if taken.calls is not None and taken.snapshot is not None:
            return taken.calls, decode_snapshot(taken.snapshot)
        assert taken.run is not None
        return await self.resume_state(taken.run.run_id)


def with_context(fields: dict[str, str], context: str | None) -> dict[str, str]:
    """A call hash's fields, with its short context (`CallContext` JSON) when it has one."""
    return {**fields, CONTEXT_FIELD: context} if context else fields


RUN_MESSAGE_WITHIN = 600.0  # seconds: a run message is posted at most this long after its start


class RunStore:
    """All reads and writes of run data, over the parts that keep them. Knows Redis; knows
    nothing of Slack or the SDK. Its methods are its parts' (same names, same signatures)."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        retention_seconds: int,
        progress_due_in: float = PROGRESS_DUE_IN,
        clock: Clock = SYSTEM_CLOCK,
        resume_gather: float = 0.0,
        take_due_in: float = 0.0,
    ) -> None:
        """`resume_gather`: see `Calls` (the projector's gather, in the running bot);
        `take_due_in`: see `Runs` (the projector's coalescing window)."""
        self.redis = client
        self.retention = retention_seconds
        self.outbox = Outbox(client, retention_seconds=retention_seconds)
        self.timers = Timers(client, retention_seconds=retention_seconds, clock=clock)
        keep, outbox = retention_seconds, self.outbox
        calls = self.call_records = Calls(
            client, retention_seconds=keep, outbox=outbox, resume_gather=resume_gather
        )
        runs = self.run_records = Runs(
            client,
            retention_seconds=keep,
            outbox=outbox,
            calls=calls,
            progress_due_in=progress_due_in,
            take_due_in=take_due_in,
        )
        reviews = self.reviews = Reviews(client, retention_seconds=keep, outbox=outbox)
        outcomes = self.outcomes = Outcomes(client, retention_seconds=keep, outbox=outbox)
        indexes = self.indexes = Indexes(client)
        edits = self.edit_records = Edits(client, retention_seconds=keep, outbox=outbox)
        self.turns = Turns(client, retention_seconds=keep, outbox=outbox)
        # Runs: records, progress and notes, pauses, snapshots, transitions.
        self.create_run = runs.create_run
        self.add_progress = runs.add_progress
        self.add_progress_in = runs.add_progress_in
        self.add_note = runs.add_note
        self.add_note_in = runs.add_note_in
        self.notes_ride = runs.notes_ride
        self.note = runs.note
        self.progress = runs.progress
        self.whole_task = runs.whole_task
        self.get_run = runs.get_run
        self.runs = runs.runs
        self.get_runs = runs.get_runs
        self.recent_runs = runs.recent_runs
        self.recent_run_ids = runs.recent_run_ids
        self.projection = runs.projection
        self.projection_in = runs.projection_in
        self.set_run_message = runs.set_run_message
        self.set_run_message_in = runs.set_run_message_in
        self.run_for_message = runs.run_for_message
        self.reopened = runs.reopened
        self.set_run_fields = runs.set_run_fields
        self.save_pause = runs.save_pause
        self.load_snapshot = runs.load_snapshot
        self.resume_state = runs.resume_state
        self.finish = runs.finish
        self.cancel = runs.cancel
        self.take = runs.take
        self.take_run = runs.take_run
        self.take_next = runs.take_next
        self.hand_off = runs.hand_off
        self.takes_next = runs.takes_next
        self.forgive_attempt = runs.forgive_attempt
        self.release_lost_job = runs.release_lost_job
        self.pause_of = runs.pause_of
        # Calls: decisions, comments, held replies, Always decisions.
        self.get_call = calls.get_call
        self.call_and_run = calls.call_and_run
        self.call_with_context = calls.call_with_context
        self.run_calls = calls.run_calls
        self.pause_ids = calls.pause_ids
        self.pause_calls = calls.pause_calls
        self.calls_of_pauses = calls.calls_of_pauses
        self.calls = calls.calls
        self.set_pending_call_fields = calls.set_pending_call_fields
        self.route_pending_call = calls.route_pending_call
        self.advise = calls.advise
        self.set_call_message = calls.set_call_message
        self.approval_for_message = calls.approval_for_message
        self.add_comment = calls.add_comment
        self.comments = calls.comments
        self.hold_reply = calls.hold_reply
        self.held_reply = calls.held_reply
        self.take_reply = calls.take_reply
        self.decide = calls.decide
        self.redraw_card = calls.redraw_card
        self.sticky_decisions = calls.sticky_decisions
        self.drop_sticky = calls.drop_sticky
        # Edited calls and the one-shot approval each gives the re-proposed call.
        self.edit = edits.edit
        self.use_edit = edits.use_edit
        self.use_edit_in_run = edits.use_edit_in_run
        self.edits = edits.edits
        # Reviews.
        self.review_vote = reviews.review_vote
        self.review_voters = reviews.review_voters
        self.to_review = reviews.to_review
        self.resolve_review = reviews.resolve_review
        # What the starter must be told.
        self.record_outcomes = outcomes.record_outcomes
        self.untold_outcomes = outcomes.untold_outcomes
        self.has_outcomes = outcomes.has_outcomes
        # Indexes over runs.
        self.first_delivery = indexes.first_delivery
        self.active_runs = indexes.active_runs
        self.pending_calls = indexes.pending_calls
        self.forget_active = indexes.forget_active
        self.due = indexes.due
        self.not_due = indexes.not_due
        self.due_runs = indexes.due_runs
        self.active_overview = indexes.active_overview
        self.index_channels = indexes.index_channels
        self.channel_sizes = indexes.channel_sizes
        self.channel_runs = indexes.channel_runs
        self.drop_from_channels = indexes.drop_from_channels

    async def ping(self) -> bool:
        """Redis answers; a cluster also says its state is `ok` (every slot served)."""
        try:
            if not await self.redis.ping():
                return False
            if is_cluster(self.redis):
                info = await cast(Any, self.redis).cluster_info()
                return text(info.get("cluster_state", "")) == "ok"
            return True
        except (redis.RedisError, OSError):
            return False

    async def eviction_policy(self) -> str | None:
        """Redis's maxmemory-policy, or None when CONFIG is not allowed (managed Redis)."""
        try:
            reply = await self.redis.config_get("maxmemory-policy")
        except redis.RedisError:
            return None
        values = {text(k): text(v) for k, v in dict(reply).items()}
        return values.get("maxmemory-policy")
