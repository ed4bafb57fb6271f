"""Runs, pending calls and snapshots in Redis, changed only through owner-checked transitions.

Each transition that must be atomic (`save_pause`, `decide`, `finish`) is one Lua script over
keys of a single run, all sharing that run's hash tag.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import redis.asyncio as redis

from bot.clock import SYSTEM_CLOCK, Clock
from bot.store import keys
from bot.store.outbox import Mark, Outbox, Shown
from bot.store.records import (
    SHOWN_TASK,
    AlreadyDecided,
    CallRecord,
    CancelResult,
    Decided,
    DecideResult,
    Gone,
    RunRecord,
    Snapshot,
    StickyDecision,
    Voted,
)
from bot.store.timers import Timers

MAX_COMMENTS = 20
TIMER_MARGIN = 86400  # a paused run's records outlive its calls' expiry by at least this
RECENT_RUNS = 20  # runs kept per person for their App Home
PROGRESS_DUE_IN = 1.0  # seconds: the projector coalesces a run message's changes as long

# Drop a run from the due set only if nothing made it due again since `since` was read.
_NOT_DUE = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) == tonumber(ARGV[2]) then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0
"""

_SET_IF_PENDING = """
if redis.call('HGET', KEYS[1], 'status') ~= 'pending' then
  return 0
end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
"""

_ADD_NOTE = """
local n = redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
mark(KEYS[2], 'note:' .. n, ARGV[2], ARGV[3])
return n
"""


# Record outcomes the run's starter must be told; mark their message when one is new.
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


def _script(name: str) -> str:
    return (resources.files("bot.store") / "lua" / f"{name}.lua").read_text(encoding="utf-8")


def _marking(name: str) -> str:
    """A transition script that marks messages in its run's outbox (see `_outbox.lua`)."""
    return _script("_outbox") + _script(name)


def _s(value: Any) -> str:
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else str(value)


# A snapshot string: SNAPSHOT_TAG, the SDK version, NUL, the agent fingerprint, NUL, the state.
SNAPSHOT_TAG = b"S2\x00"


def encode_snapshot(snapshot: Snapshot) -> bytes:
    return b"\x00".join(
        (
            SNAPSHOT_TAG[:-1],
            snapshot.sdk_version.encode(),
            snapshot.fingerprint.encode(),
            snapshot.state,
        )
    )


def decode_snapshot(blob: bytes) -> Snapshot:
    _, sdk_version, fingerprint, state = blob.split(b"\x00", 3)
    return Snapshot(state=state, sdk_version=_s(sdk_version), fingerprint=_s(fingerprint))


def now() -> str:
    """Timestamps are Unix seconds with millisecond precision, as strings (Redis-native)."""
    return f"{time.time():.3f}"


@dataclass(frozen=True)
class Taken:
    """What taking a job's execution found: `kind` fresh | retry | skip, the attempts so far,
    and for a taken one the run (owned by the new attempt) and, for a resume, its snapshot."""

    kind: str
    attempts: int
    run: RunRecord | None = None
    snapshot: bytes | None = None
    calls: list[CallRecord] | None = None  # a resume's pause (None: not read)


class StoreError(Exception):
    """A transition was refused because the run is not in the state the caller believed."""


class RunStore:
    """All reads and writes of run data. Knows Redis; knows nothing of Slack or the SDK."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        retention_seconds: int,
        progress_due_in: float = PROGRESS_DUE_IN,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.redis = client
        self.retention = retention_seconds
        self.progress_due_in = progress_due_in  # a setting (`progress_due_seconds`)
        self.outbox = Outbox(client, retention_seconds=retention_seconds)
        self.timers = Timers(client, retention_seconds=retention_seconds, clock=clock)
        self._save_pause = client.register_script(_marking("save_pause"))
        self._decide = client.register_script(_marking("decide"))
        self._finish = client.register_script(_marking("finish"))
        self._take = client.register_script(_script("take_job"))
        self._add_note = client.register_script(_script("_outbox") + _ADD_NOTE)
        self._not_due = client.register_script(_NOT_DUE)
        self._set_if_pending = client.register_script(_SET_IF_PENDING)
        self._to_review = client.register_script(_marking("to_review"))
        self._resolve_review = client.register_script(_marking("resolve_review"))
        self._cancel = client.register_script(_marking("cancel"))
        self._outcomes = client.register_script(_script("_outbox") + _OUTCOMES)

    async def ping(self) -> bool:
        try:
            return bool(await self.redis.ping())
        except (redis.RedisError, OSError):
            return False

    # Runs ---------------------------------------------------------------------------------

    def _mark(self, pipe: Any, run_id: str, target: str) -> None:
        """Inside a MULTI: `target` must show the state this transaction writes."""
        outbox = keys.outbox_key(run_id)
        pipe.hincrby(outbox, target, 1)
        pipe.hsetnx(outbox, target + "@", now())
        pipe.expire(outbox, self.retention)

    async def create_run(self, run: RunRecord) -> None:
        """Store a new run, owned by `run.owner` until it pauses or ends; its message is due."""
        key = keys.run_key(run.run_id)
        stored = run.to_hash()
        whole = run.task
        if len(whole) > SHOWN_TASK:  # the hash keeps what is shown; the job reads the rest
            stored.update(task=whole[:SHOWN_TASK], task_chars=str(len(whole)))
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping=stored)  # type: ignore[arg-type]
            pipe.expire(key, self.retention)
            if len(whole) > SHOWN_TASK:
                pipe.set(keys.task_key(run.run_id), whole, ex=self.retention)
            self._mark(pipe, run.run_id, "run")
            await pipe.execute()
        # Indexed only once it exists, so a sweeper never sees an id without its run; due
        # (waiting for a worker) since its last change; listed among its starter's runs.
        mine = keys.user_runs_key(run.team_id, run.user_id)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.sadd(keys.EXECUTING_RUNS, run.run_id)
            pipe.zadd(keys.DUE_RUNS, {run.run_id: float(run.updated_at or now())})
            pipe.zadd(mine, {run.run_id: float(run.created_at or now())})
            pipe.zremrangebyrank(mine, 0, -RECENT_RUNS - 1)
            pipe.expire(mine, self.retention)
            self.outbox.schedule_in(pipe, run.run_id)
            await pipe.execute()

    async def add_progress(
        self, run_id: str, line: str, keep: int = 8, due_in: float | None = None
    ) -> None:
        """Append a progress line (shown in the run message, coalesced with its status): the
        run is due for Slack in `due_in` seconds (sooner if something else makes it due), so
        the lines of a quick run's tools wake nothing before its end does."""
        key = keys.progress_key(run_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.rpush(key, line)
            pipe.ltrim(key, -keep, -1)
            pipe.expire(key, self.retention)
            self._mark(pipe, run_id, "run")
            self.outbox.schedule_in(
                pipe, run_id, self.progress_due_in if due_in is None else due_in
            )
            await pipe.execute()

    async def add_note(self, run_id: str, text: str) -> None:
        """A plain-text note for the run's thread (escaped once, where it is shown)."""
        await self._add_note(
            keys=[keys.notes_key(run_id), keys.outbox_key(run_id)],
            args=[text, now(), self.retention],
        )
        await self.outbox.schedule(run_id)

    async def note(self, run_id: str, number: int) -> str | None:
        value = await self.redis.lindex(keys.notes_key(run_id), number - 1)
        return _s(value) if value is not None else None

    async def progress(self, run_id: str) -> list[str]:
        return [_s(line) for line in await self.redis.lrange(keys.progress_key(run_id), 0, -1)]

    async def whole_task(self, run: RunRecord) -> str:
        """The task as the person typed it (a start job needs it; the run hash may hold a cut
        copy)."""
        if not run.task_chars:
            return run.task
        value = await self.redis.get(keys.task_key(run.run_id))
        return _s(value) if value is not None else run.task

    async def get_run(self, run_id: str) -> RunRecord | None:
        raw = await self.redis.hgetall(keys.run_key(run_id))
        return RunRecord.from_hash(raw, run_id) if raw else None

    async def projection(
        self, run_id: str
    ) -> tuple[dict[str, Mark], RunRecord | None, dict[str, Shown]]:
        """What a projector pass reads, in one round trip: the run's marks, the run, and what
        Slack holds of its messages."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.outbox_key(run_id))
            pipe.hgetall(keys.run_key(run_id))
            pipe.hgetall(keys.shown_key(run_id))
            marks, run, shown = await pipe.execute()
        return (
            Outbox.parse_marks(marks),
            RunRecord.from_hash(run, run_id) if run else None,
            Outbox.parse_shown(shown),
        )

    async def call_and_run(self, approval_id: str) -> tuple[CallRecord | None, RunRecord | None]:
        """A call and its run, in one round trip (what a click needs to be authorized)."""
        run_id = keys.run_of(approval_id)
        if run_id is None:
            return None, None
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.call_key(approval_id))
            pipe.hgetall(keys.run_key(run_id))
            call, run = await pipe.execute()
        return (
            CallRecord.from_hash(call, approval_id) if call else None,
            RunRecord.from_hash(run, run_id) if run else None,
        )

    async def run_status(self, run_id: str) -> str:
        value = await self.redis.hget(keys.run_key(run_id), "status")
        return _s(value) if value is not None else ""

    async def set_run_message(self, run_id: str, ts: str) -> None:
        await self.redis.hset(keys.run_key(run_id), "message_ts", ts)

    async def set_run_fields(self, run_id: str, **fields: str) -> None:
        await self.redis.hset(keys.run_key(run_id), mapping=fields)  # type: ignore[arg-type]

    async def review_vote(self, run_id: str, review_id: str, user: str) -> int:
        """Count `user` (once) towards running a reviewed call again; returns the votes so far."""
        key = keys.review_votes_key(run_id, review_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.sadd(key, user)
            pipe.expire(key, self.retention)
            self._mark(pipe, run_id, f"review:{review_id}")
            pipe.scard(key)
            result = await pipe.execute()
        await self.outbox.schedule(run_id)
        return int(result[-1])

    async def review_voters(self, run_id: str, review_id: str) -> list[str]:
        return sorted(
            _s(u) for u in await self.redis.smembers(keys.review_votes_key(run_id, review_id))
        )

    async def save_pause(
        self, run_id: str, owner: str, snapshot: Snapshot, calls: list[CallRecord], since: float
    ) -> int:
        """Store the snapshot and the pause's calls; the run becomes `paused`. Returns the pause.
        The run is due (for the sweeper) from `since` until its automatic decisions are applied."""
        call_keys = [keys.call_key(c.approval_id) for c in calls]
        tokens = " ".join(c.approval_id.partition(".")[2] for c in calls)
        # The records must outlive the longest wait: a call expires, it never just vanishes.
        hold = max([self.retention, *(c.expire_after + TIMER_MARGIN for c in calls)])
        reply = await self._save_pause(
            keys=[
                keys.run_key(run_id),
                keys.state_key(run_id),
                keys.snapshot_key(run_id),
                keys.task_key(run_id),
                keys.outbox_key(run_id),
                keys.pause_key(run_id),
                *call_keys,
            ],
            args=[
                owner,
                now(),
                hold,
                encode_snapshot(snapshot),
                run_id,
                tokens,
                *(json.dumps(c.to_hash()) for c in calls),
            ],
        )
        if _s(reply[0]) != "ok":
            raise StoreError(f"cannot save pause of run {run_id}: {[_s(r) for r in reply]}")
        async with self.redis.pipeline(transaction=False) as pipe:
            self.outbox.schedule_in(pipe, run_id)
            # due until its automatic decisions are applied (`not_due` with this time)
            pipe.zadd(keys.DUE_RUNS, {run_id: since})
            await pipe.execute()
        return int(reply[1])

    async def load_snapshot(self, run_id: str) -> Snapshot | None:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(keys.state_key(run_id))
            pipe.hgetall(keys.snapshot_key(run_id))  # layout 1
            blob, raw = await pipe.execute()
        return self._snapshot(blob, raw)

    @staticmethod
    def _snapshot(blob: bytes | None, raw: dict[bytes, bytes]) -> Snapshot | None:
        if blob is not None:
            return decode_snapshot(blob)
        if not raw or b"state" not in raw:
            return None
        return Snapshot(
            state=raw[b"state"],  # type: ignore[arg-type]
            sdk_version=_s(raw.get(b"sdk_version", b"")),
            fingerprint=_s(raw.get(b"fingerprint", b"")),
        )

    async def finish(
        self, run_id: str, owner: str, *, status: str, text: str, drop_snapshot: bool
    ) -> bool:
        """End a run. Returns False when it was already ended or is owned by someone else."""
        reply = await self._finish(
            keys=[
                keys.run_key(run_id),
                keys.state_key(run_id),
                keys.snapshot_key(run_id),
                keys.task_key(run_id),
                keys.outbox_key(run_id),
                keys.pause_key(run_id),
            ],
            args=[owner, status, text, now(), self.retention, "1" if drop_snapshot else "0"],
        )
        ended = _s(reply[0]) == "ok"
        if ended:  # indexed before it leaves the active set that the reconciler scans
            async with self.redis.pipeline(transaction=False) as pipe:
                self.outbox.schedule_in(pipe, run_id)  # (a pipeline runs in order)
                pipe.srem(keys.EXECUTING_RUNS, run_id)
                pipe.zrem(keys.DUE_RUNS, run_id)
                await pipe.execute()
            self.outbox.woken.set()
        return ended

    async def cancel(self, run_id: str, *, team: str, user: str) -> CancelResult:
        """Cancel a run and its pending calls, exactly once (see cancel.lua)."""
        ids = [c.approval_id for c in await self.pause_calls(run_id)]
        reply = await self._cancel(
            keys=[
                keys.run_key(run_id),
                keys.pause_key(run_id),
                keys.outbox_key(run_id),
                *(keys.call_key(i) for i in ids),
            ],
            args=[team, user, now(), self.retention, *ids],
        )
        kind = _s(reply[0])
        if kind == "ok":
            async with self.redis.pipeline(transaction=False) as pipe:
                self.outbox.schedule_in(pipe, run_id)
                pipe.srem(keys.EXECUTING_RUNS, run_id)
                pipe.zrem(keys.DUE_RUNS, run_id)
                await pipe.execute()
            return CancelResult("ok", status=_s(reply[1]), calls=tuple(_s(r) for r in reply[2:]))
        if kind == "already":
            return CancelResult("already", by=_s(reply[1]), at=_s(reply[2]))
        if kind == "ended":
            return CancelResult("ended", status=_s(reply[1]))
        return CancelResult("missing")

    async def record_outcomes(self, run_id: str, outcomes: dict[str, str]) -> Mark | None:
        """Note outcomes the starter must be told (approval id or `run` -> status); their
        message (`notice`) is marked when one is new: then its mark (what a reread of the
        outbox would give). Idempotent."""
        if not outcomes:
            return None
        args: list[str] = [now(), str(self.retention)]
        for item in sorted(outcomes.items()):
            args.extend(item)
        reply = await self._outcomes(
            keys=[keys.outcomes_key(run_id), keys.outbox_key(run_id)], args=args
        )
        if not int(reply[0]):
            return None
        await self.outbox.schedule(run_id)
        return Mark(_s(reply[1]), float(_s(reply[2]) or 0))

    async def untold_outcomes(self, run_id: str) -> dict[str, str]:
        """Outcomes recorded and not yet told to the starter (id -> status)."""
        raw = {
            _s(k): _s(v) for k, v in (await self.redis.hgetall(keys.outcomes_key(run_id))).items()
        }
        return {k: v for k, v in raw.items() if not k.endswith("!") and raw.get(k + "!") != v}

    async def has_outcomes(self, run_id: str) -> bool:
        return bool(await self.redis.exists(keys.outcomes_key(run_id)))

    async def told_outcomes(self, run_id: str, told: dict[str, str]) -> None:
        if told:
            await self.redis.hset(
                keys.outcomes_key(run_id), mapping={k + "!": v for k, v in told.items()}
            )

    async def get_runs(self, run_ids: Sequence[str]) -> list[RunRecord]:
        """The runs that still exist, in the order asked (one round trip)."""
        return [run for run in await self.runs(run_ids) if run is not None]

    async def recent_runs(self, team: str, user: str, limit: int = 10) -> list[RunRecord]:
        """The runs a person started, newest first."""
        ids = await self.redis.zrevrange(keys.user_runs_key(team, user), 0, limit - 1)
        return await self.get_runs([_s(i) for i in ids])

    # Pending calls ------------------------------------------------------------------------

    async def get_call(self, approval_id: str) -> CallRecord | None:
        if keys.run_of(approval_id) is None:
            return None
        raw = await self.redis.hgetall(keys.call_key(approval_id))
        return CallRecord.from_hash(raw, approval_id) if raw else None

    async def pause_ids(self, run_id: str) -> list[str]:
        """The approval ids of the run's latest pause (from the run hash; layout 1: a set)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(keys.run_key(run_id), "calls")
            pipe.smembers(keys.pause_key(run_id))
            tokens, members = await pipe.execute()
        if tokens:
            return [f"{run_id}.{token}" for token in _s(tokens).split()]
        return sorted(_s(i) for i in members)

    async def pause_calls(self, run_id: str) -> list[CallRecord]:
        """The calls of the run's latest pause, in the order the SDK listed them."""
        return await self.calls(await self.pause_ids(run_id))

    async def calls(self, ids: Sequence[str]) -> list[CallRecord]:
        """These calls (one round trip), in the order the SDK listed them."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for approval_id in ids:
                pipe.hgetall(keys.call_key(approval_id))
            raws = await pipe.execute()
        calls = [CallRecord.from_hash(raw, i) for i, raw in zip(ids, raws, strict=True) if raw]
        return sorted(calls, key=lambda c: c.index)

    async def resume_state(self, run_id: str) -> tuple[list[CallRecord], Snapshot | None]:
        """What a resume reads: the pause's calls and the snapshot (two round trips)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(keys.run_key(run_id), "calls")
            pipe.smembers(keys.pause_key(run_id))
            pipe.get(keys.state_key(run_id))
            pipe.hgetall(keys.snapshot_key(run_id))
            tokens, members, blob, raw = await pipe.execute()
        if tokens:
            ids = [f"{run_id}.{token}" for token in _s(tokens).split()]
        else:
            ids = sorted(_s(i) for i in members)
        return await self.calls(ids), self._snapshot(blob, raw)

    async def set_pending_call_fields(self, approval_id: str, fields: dict[str, str]) -> bool:
        """Write fields of a call only while it is pending (False when it is not, or gone)."""
        reply = await self._set_if_pending(
            keys=[keys.call_key(approval_id)],
            args=[x for pair in fields.items() for x in pair],
        )
        return bool(reply)

    async def set_call_message(self, approval_id: str, channel: str, ts: str) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(keys.call_key(approval_id), mapping={"channel_id": channel, "message_ts": ts})
            pipe.set(keys.message_key(channel, ts), approval_id, ex=self.retention)
            await pipe.execute()

    async def approval_for_message(self, channel: str, ts: str) -> str | None:
        value = await self.redis.get(keys.message_key(channel, ts))
        return _s(value) if value is not None else None

    async def add_comment(self, approval_id: str, user: str, text: str) -> None:
        """Keep an approver's thread comment (the last MAX_COMMENTS) for the Reject pre-fill.
        Only approvers' comments are kept, so nobody else's replies can push them out."""
        key = keys.comments_key(approval_id)
        entry = {"user": user, "text": text, "approver": True}
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.rpush(key, json.dumps(entry))
            pipe.ltrim(key, -MAX_COMMENTS, -1)
            pipe.expire(key, self.retention)
            await pipe.execute()

    async def hold_reply(self, reply_id: str, fields: dict[str, str], ttl: int) -> None:
        """Keep an ambiguous thread reply until its author confirms what it means."""
        await self.redis.set(keys.reply_key(reply_id), json.dumps(fields), ex=ttl)

    async def held_reply(self, reply_id: str) -> dict[str, str] | None:
        if keys.run_of(reply_id) is None:
            return None
        raw = await self.redis.get(keys.reply_key(reply_id))
        return dict(json.loads(raw)) if raw is not None else None

    async def take_reply(self, reply_id: str) -> bool:
        """Consume a held reply; True for the one caller that gets it."""
        if keys.run_of(reply_id) is None:
            return False
        return await self.redis.getdel(keys.reply_key(reply_id)) is not None

    async def comments(self, approval_id: str) -> list[dict[str, Any]]:
        """Thread comments on a call, oldest first: {"user", "text", "approver"}."""
        items = await self.redis.lrange(keys.comments_key(approval_id), 0, -1)
        return [json.loads(item) for item in items]

    async def decide(
        self,
        approval_id: str,
        *,
        approve: bool,
        always: bool,
        team: str,
        user: str,
        reason: str,
        owner: str,
        also: Sequence[str] = (),
        via: str = "",
        after: Callable[[Any, DecideResult], None] | None = None,
    ) -> DecideResult:
        """Record one decision atomically; see decide.lua for the rules.

        `also`: for an Always decision, the other pending calls of the pause that this person
        may decide alone under their own rules; the script settles those of them that are still
        pending in the same pause with the same sticky key, and nothing else. `via`: what
        decided the call when it was not this person's own click (an earlier Always decision).
        `after(pipe, result)`: writes to send with the index write that follows a recorded
        decision or vote (an audit entry), in the same round trip."""
        run_id = keys.run_of(approval_id)
        if run_id is None:
            return Gone()
        # Only an Always decision may settle other calls of the pause: a plain click reads nothing.
        others = (
            [keys.call_key(i) for i in await self.pause_ids(run_id) if i != approval_id]
            if always and also
            else []
        )
        reply = await self._decide(
            keys=[
                keys.run_key(run_id),
                keys.call_key(approval_id),
                keys.votes_key(approval_id),
                keys.state_key(run_id),
                keys.snapshot_key(run_id),
                keys.sticky_key(run_id),
                keys.outbox_key(run_id),
                *others,
            ],
            args=[
                "approved" if approve else "rejected",
                "1" if always else "0",
                team,
                user,
                now(),
                reason,
                owner,
                self.retention,
                via,
                *(also if always else ()),
            ],
        )
        kind = _s(reply[0])
        result: DecideResult
        if kind == "decided":
            result = Decided(
                settled=[_s(r) for r in reply[3:]],
                resume=int(reply[1]) == 1,
                undecided=int(reply[2]),
            )
        elif kind in ("vote", "voted"):
            result = Voted(int(reply[1]), int(reply[2]), repeated=kind == "voted")
        if kind in ("decided", "vote"):
            async with self.redis.pipeline(transaction=False) as pipe:
                self.outbox.schedule_in(pipe, run_id)
                if isinstance(result, Decided) and result.resume:  # waits for a worker
                    pipe.zadd(keys.DUE_RUNS, {run_id: float(now())})
                if after is not None:
                    after(pipe, result)
                await pipe.execute()
        if kind in ("decided", "vote", "voted"):
            return result
        if kind == "already":
            return AlreadyDecided(*(_s(r) for r in reply[1:5]))
        if kind == "stale":
            return Gone("This run is no longer waiting for this decision.")
        return Gone()

    async def sticky_decisions(self, run_id: str) -> dict[str, StickyDecision]:
        """The run's Always decisions, by sticky key."""
        raw = await self.redis.hgetall(keys.sticky_key(run_id))
        return {_s(k): StickyDecision.from_json(_s(k), _s(v)) for k, v in raw.items()}

    async def drop_sticky(self, run_id: str, key: str) -> bool:
        """Forget an Always decision (the policy no longer allows it); True if it was there."""
        return bool(await self.redis.hdel(keys.sticky_key(run_id), key))

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
        self, run_id: str, execution: str, message_id: str, attempt: str, *, resume: bool = False
    ) -> Taken:
        """`take`, with the run as taken and, for a `resume`, its snapshot and its pause's calls:
        two round trips (the script, then the calls with the run's removal from the due set:
        a worker has it, its job's lease watches it)."""
        reply = await self._take(
            keys=[keys.run_key(run_id), keys.state_key(run_id)],
            args=[execution, message_id, attempt, now(), self.retention, "1" if resume else ""],
        )
        kind = _s(reply[0])
        if kind == "skip":
            return Taken(kind, 0)
        flat = reply[4:]
        run = RunRecord.from_hash(dict(zip(flat[::2], flat[1::2], strict=True)), run_id)
        ids = run.call_ids() if resume else []
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zrem(keys.DUE_RUNS, run_id)
            for approval_id in ids:
                pipe.hgetall(keys.call_key(approval_id))
            _, *raws = await pipe.execute()
        calls = [CallRecord.from_hash(raw, i) for i, raw in zip(ids, raws, strict=True) if raw]
        calls.sort(key=lambda c: c.index)
        return Taken(kind, int(reply[2]), run, reply[3] or None, calls if ids else None)

    async def pause_of(self, taken: Taken) -> tuple[list[CallRecord], Snapshot | None]:
        """The calls of a taken run's pause and its snapshot (as `take_run` read them; a run
        paused under layout 1 takes two more round trips)."""
        if taken.calls is not None and taken.snapshot is not None:
            return taken.calls, decode_snapshot(taken.snapshot)
        assert taken.run is not None
        return await self.resume_state(taken.run.run_id)

    async def to_review(
        self, run_id: str, attempt: str, review_id: str, text: str, kind: str
    ) -> bool:
        reply = await self._to_review(
            keys=[keys.run_key(run_id), keys.outbox_key(run_id)],
            args=[attempt, review_id, text, now(), kind, self.retention],
        )
        if int(reply) == 1:
            await self.outbox.schedule(run_id)
        return int(reply) == 1

    async def resolve_review(
        self, run_id: str, review_id: str, *, action: str, execution: str, user: str, status: str
    ) -> list[str] | None:
        """Settle a review once; returns the call ids it changed, or None if it was not open."""
        reply = await self._resolve_review(
            keys=[keys.run_key(run_id), keys.journal_key(run_id), keys.outbox_key(run_id)],
            args=[review_id, action, execution, user, now(), status, self.retention],
        )
        if _s(reply[0]) != "ok":
            return None
        async with self.redis.pipeline(transaction=False) as pipe:
            self.outbox.schedule_in(pipe, run_id)
            pipe.zadd(keys.DUE_RUNS, {run_id: float(now())})  # its job waits for a worker
            await pipe.execute()
        return [_s(r) for r in reply[1:]]

    # Deliveries and liveness --------------------------------------------------------------

    async def first_delivery(self, kind: str, delivery_id: str, ttl: int = 3600) -> bool:
        """True the first time a (kind, id) is seen within `ttl` seconds: drops duplicates.

        The claim holds a unique token: when redis-py retries the SET after a lost reply and
        finds its own token, that is this caller's claim, not a duplicate."""
        token = secrets.token_hex(8)
        earlier = await self.redis.set(
            keys.delivery_key(kind, delivery_id), token, nx=True, ex=ttl, get=True
        )
        return earlier is None or _s(earlier) == token

    async def active_runs(self) -> list[str]:
        return sorted(_s(r) for r in await self.redis.smembers(keys.EXECUTING_RUNS))

    async def pending_calls(self) -> int:
        """Calls waiting for a decision, over the runs not yet finished (one round trip)."""
        run_ids = await self.active_runs()
        if not run_ids:
            return 0
        pipe = self.redis.pipeline(transaction=False)
        for run_id in run_ids:
            pipe.hmget(keys.run_key(run_id), ["status", "undecided"])
        total = 0
        for status, undecided in await pipe.execute():
            if status is not None and _s(status) == "paused":
                total += int(_s(undecided or b"0") or 0)
        return total

    # What the sweeper looks at --------------------------------------------------------------

    async def due(self, run_id: str, since: float) -> None:
        """The run waits on the bot since `since` (the sweeper looks at it once that is old)."""
        await self.redis.zadd(keys.DUE_RUNS, {run_id: since})

    async def not_due(self, run_id: str, since: float) -> bool:
        """Done with the run's due entry, unless something made it due again after `since`."""
        return int(await self._not_due(keys=[keys.DUE_RUNS], args=[run_id, since])) == 1

    async def due_runs(self, before: float, limit: int = 1000) -> list[tuple[str, float]]:
        """(run id, since) of runs waiting on the bot since before `before`, oldest first."""
        found: Any = await self.redis.zrangebyscore(
            keys.DUE_RUNS, "-inf", before, start=0, num=limit, withscores=True
        )
        return [(_s(member), float(score)) for member, score in found]

    async def runs(self, run_ids: Sequence[str]) -> list[RunRecord | None]:
        """These runs, in one round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.hgetall(keys.run_key(run_id))
            raws = await pipe.execute()
        return [
            RunRecord.from_hash(raw, run_id) if raw else None
            for run_id, raw in zip(run_ids, raws, strict=True)
        ]

    async def active_overview(
        self,
    ) -> list[tuple[str, str | None, str, bool, bool, bool]]:
        """For each active run, in one pipeline: (run id, status (None: gone), owner, on the
        outbox index, has outbox marks, on the due set)."""
        run_ids = await self.active_runs()
        async with self.redis.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.hmget(keys.run_key(run_id), ["status", "owner"])
                pipe.zscore(keys.OUTBOX_INDEX, run_id)
                pipe.hlen(keys.outbox_key(run_id))
                pipe.zscore(keys.DUE_RUNS, run_id)
            replies = await pipe.execute()
        found = []
        for i, run_id in enumerate(run_ids):
            (status, owner), indexed, marked, due = replies[4 * i : 4 * i + 4]
            text = _s(status) if status is not None else None
            found.append(
                (run_id, text, _s(owner or b""), indexed is not None, bool(marked), due is not None)
            )
        return found

    async def forget_active(self, run_id: str) -> None:
        await self.redis.srem(keys.EXECUTING_RUNS, run_id)

    async def eviction_policy(self) -> str | None:
        """Redis's maxmemory-policy, or None when CONFIG is not allowed (managed Redis)."""
        try:
            reply = await self.redis.config_get("maxmemory-policy")
        except redis.RedisError:
            return None
        values = {_s(k): _s(v) for k, v in dict(reply).items()}
        return values.get("maxmemory-policy")
