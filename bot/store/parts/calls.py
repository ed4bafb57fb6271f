"""A run's pending calls and what hangs on them: decisions (decide.lua), thread comments, held
thread replies, the messages that show them, and the run's Always (sticky) decisions."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import redis.asyncio as redis

from bot.store import keys
from bot.store.delivery.outbox import Outbox
from bot.store.keys import RunKeys
from bot.store.parts.texts import call_from, run_from
from bot.store.queue import JobQueue
from bot.store.records import (
    AlreadyDecided,
    CallContext,
    CallRecord,
    CallStatus,
    Decided,
    DecideResult,
    Gone,
    Rerouted,
    RunRecord,
    StickyDecision,
    Voted,
)
from bot.store.scripts import (
    Batch,
    gated_in,
    gated_replies,
    mark,
    marking,
    now,
    script,
    text,
)

MAX_COMMENTS = 20
# A call's context (`CallContext` JSON) of at most this many bytes is the call hash's field
# CONTEXT_FIELD; a longer one is a string of its own (`keys.context_key`).
INLINE_CONTEXT = 64
CONTEXT_FIELD = "context"
# What a person who decided on a card drawn before an edit of its call is told (decide.lua's
# {'edited'}): their click is not counted for arguments they were not shown.
EDITED_SINCE = (
    "This call was edited since this card was drawn: look at the updated card. Nothing was decided."
)

_SET_IF_PENDING = """
if redis.call('HGET', KEYS[1], 'status') ~= 'pending' then
  return 0
end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
"""
# The same, for fields that route the call anew: its routing generation moves with them.
_ROUTE_IF_PENDING = """
if redis.call('HGET', KEYS[1], 'status') ~= 'pending' then
  return 0
end
redis.call('HSET', KEYS[1], unpack(ARGV))
redis.call('HINCRBY', KEYS[1], 'routed', 1)
return 1
"""


def decode_decide(reply: list[Any]) -> DecideResult:
    """decide.lua's reply: {'decided', resume, undecided, settled ids...} | {'vote' | 'voted',
    votes, required} | {'already', status, by, at, via} | {'stale'} | {'edited'} (the card's
    version token is not the call's: it was drawn before an edit) | {'routed'} (the call was
    routed anew since the judgement read it: `Rerouted`) | {'missing'}."""
    kind = text(reply[0])
    if kind == "decided":
        return Decided(
            settled=[text(r) for r in reply[3:]],
            resume=int(reply[1]) == 1,
            undecided=int(reply[2]),
        )
    if kind in ("vote", "voted"):
        return Voted(int(reply[1]), int(reply[2]), repeated=kind == "voted")
    if kind == "already":
        status, by, at, via = (text(r) for r in reply[1:5])
        return AlreadyDecided(CallStatus(status), by, float(at or 0), via)
    if kind == "stale":
        return Gone("This run is no longer waiting for this decision.")
    if kind == "edited":
        return Gone(EDITED_SINCE)
    if kind == "routed":
        return Rerouted()
    return Gone()


def read_context(raw: bytes | str | None) -> CallContext | None:
    """A stored `CallContext`; None when missing or unreadable (the card shows without it)."""
    if not raw:
        return None
    try:
        return CallContext.from_json(text(raw))
    except (ValueError, TypeError, KeyError):
        return None


# What to do with the replies of the commands a decision's `after` added (`Calls.decide`).
Then = Callable[[Sequence[Any]], None]


class JobHandOff(Protocol):
    """A decision's resume job handed to this process's own worker in the decision's round
    trip (`bot.store.runs.HandOff`)."""

    def queue(self, batch: Batch, run_id: str, owner: str, pause: str) -> int:
        """Queue the job's enqueue, read and take for the run; the index of its reply."""

    async def took(self, reply: Any) -> None:
        """The queued script's reply."""


class Calls:
    """Reads and writes of a run's calls; a decision is one owner-checked script."""

    def __init__(
        self,
        client: redis.Redis,
        *,
        retention_seconds: int,
        outbox: Outbox,
        resume_gather: float = 0.0,
    ) -> None:
        """`resume_gather`: seconds a decision that resumes its run waits before its card is
        shown (the projector's gather): the run's end, when it comes sooner, makes the run due
        at once, and one pass shows the card, the output and the run message."""
        self.redis = client
        self.retention = retention_seconds
        self.outbox = outbox
        self.resume_gather = resume_gather
        self._decide = client.register_script(marking("decide"))
        self._set_if_pending = client.register_script(_SET_IF_PENDING)
        self._route_if_pending = client.register_script(_ROUTE_IF_PENDING)
        self._advise = client.register_script(marking("advise"))
        self._then = client.register_script(script("then"))

    async def get_call(self, approval_id: str) -> CallRecord | None:
        if keys.run_of(approval_id) is None:
            return None
        found = await self.calls([approval_id])
        return found[0] if found else None

    async def call_with_context(
        self, approval_id: str
    ) -> tuple[CallRecord | None, CallContext | None]:
        """A call and what its card shows beside it (one round trip)."""
        if keys.run_of(approval_id) is None:
            return None, None
        async with self.redis.pipeline(transaction=False) as pipe:
            self.read_calls(pipe, [approval_id])  # its hash and its long arguments' key
            pipe.get(keys.context_key(approval_id))
            raw, arguments, context = await pipe.execute()
        call = call_from(raw, arguments, approval_id)
        inline = raw.get(CONTEXT_FIELD.encode()) if raw else None
        return call, read_context(context or inline)

    async def call_and_run(self, approval_id: str) -> tuple[CallRecord | None, RunRecord | None]:
        """A call and its run (with their long texts' keys), in one round trip (what a click
        needs to be authorized)."""
        run_id = keys.run_of(approval_id)
        if run_id is None:
            return None, None
        async with self.redis.pipeline(transaction=False) as pipe:
            self.read_calls(pipe, [approval_id])
            pipe.hgetall(keys.run_key(run_id))
            pipe.get(keys.task_key(run_id))
            call, arguments, run, task = await pipe.execute()
        return call_from(call, arguments, approval_id), run_from(run, task, run_id)

    async def pause_ids(self, run_id: str) -> list[str]:
        """The approval ids of the run's latest pause (from the run hash; layout 1: a set)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(keys.run_key(run_id), "calls")
            pipe.smembers(keys.pause_key(run_id))
            tokens, members = await pipe.execute()
        return self.ids_of_pause(run_id, tokens, members)

    @staticmethod
    def ids_of_pause(run_id: str, tokens: bytes | None, members: set[bytes]) -> list[str]:
        """The pause's approval ids from the run hash's `calls` field, or (layout 1) from the
        members of its pause set."""
        if tokens:
            return [f"{run_id}.{token}" for token in text(tokens).split()]
        return sorted(text(i) for i in members)

    async def pause_calls(self, run_id: str) -> list[CallRecord]:
        """The calls of the run's latest pause, in the order the SDK listed them."""
        return await self.calls(await self.pause_ids(run_id))

    async def calls_of_pauses(self, runs: Sequence[RunRecord]) -> dict[str, list[CallRecord]]:
        """The calls of these runs' current pauses, by run id, in two round trips at most
        (the ids come from the run records; layout 1's pause sets are read in one pipeline)."""
        ids = {run.run_id: run.call_ids() for run in runs}
        old = [run_id for run_id, found in ids.items() if not found]
        if old:
            async with self.redis.pipeline(transaction=False) as pipe:
                for run_id in old:
                    pipe.smembers(keys.pause_key(run_id))
                for run_id, members in zip(old, await pipe.execute(), strict=True):
                    ids[run_id] = self.ids_of_pause(run_id, None, members)
        every = [i for found in ids.values() for i in found]
        by_run: dict[str, list[CallRecord]] = {run_id: [] for run_id in ids}
        for call in await self.calls(every):
            by_run[call.run_id].append(call)
        return by_run

    async def run_calls(self, run_id: str) -> list[CallRecord]:
        """The run's calls so far: those whose card was posted (the run's `shown` targets)
        and those of its latest pause, in the order they paused."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hkeys(keys.shown_key(run_id))
            pipe.hget(keys.run_key(run_id), "calls")
            pipe.smembers(keys.pause_key(run_id))
            targets, tokens, members = await pipe.execute()
        ids = [t[len("card:") :] for t in map(text, targets) if t.startswith("card:")]
        ids += self.ids_of_pause(run_id, tokens, members)
        found = await self.calls(list(dict.fromkeys(ids)))
        return sorted(found, key=lambda c: (c.pause, c.index))

    async def calls(self, ids: Sequence[str]) -> list[CallRecord]:
        """These calls (one round trip), in the order the SDK listed them."""
        async with self.redis.pipeline(transaction=False) as pipe:
            self.read_calls(pipe, ids)
            replies = await pipe.execute()
        return self.calls_from(ids, replies)

    @staticmethod
    def read_calls(pipe: Any, ids: Sequence[str]) -> None:
        """Queue the reads of these calls on `pipe`: each call's hash and its arguments key."""
        for approval_id in ids:
            pipe.hgetall(keys.call_key(approval_id))
            pipe.get(keys.arguments_key(approval_id))

    @staticmethod
    def calls_from(ids: Sequence[str], replies: Sequence[Any]) -> list[CallRecord]:
        """The calls that exist, from the replies of `read_calls`, in the SDK's order."""
        found = (
            call_from(raw, arguments, i)
            for i, raw, arguments in zip(ids, replies[::2], replies[1::2], strict=True)
        )
        return sorted((c for c in found if c is not None), key=lambda c: c.index)

    async def set_pending_call_fields(self, approval_id: str, fields: dict[str, str]) -> bool:
        """Write fields of a call only while it is pending (False when it is not, or gone)."""
        reply = await self._set_if_pending(
            keys=[keys.call_key(approval_id)],
            args=[x for pair in fields.items() for x in pair],
        )
        return bool(reply)

    async def route_pending_call(self, approval_id: str, fields: dict[str, str]) -> bool:
        """Write fields that route a call anew (its rule, approvers, automatic decision...),
        only while it is pending, and move its routing generation (`CallRecord.routed`): a
        decision judged on a read from before decides nothing (False: not pending, or gone)."""
        reply = await self._route_if_pending(
            keys=[keys.call_key(approval_id)],
            args=[x for pair in fields.items() for x in pair],
        )
        return bool(reply)

    async def advise(self, approval_id: str, fields: dict[str, str]) -> bool:
        """Write an advisor's advice and the fields the policy in force gives the call with it,
        only while the call is pending, its card marked to show them (False: decided, or
        gone). The projector is woken."""
        run_id = approval_id.partition(".")[0]
        args = [now(), str(self.retention), *(x for pair in fields.items() for x in pair)]
        reply = await self._advise(
            keys=[keys.call_key(approval_id), keys.outbox_key(run_id)], args=args
        )
        if reply:
            await self.outbox.schedule(run_id)
        return bool(reply)

    async def set_call_message(self, approval_id: str, channel: str, ts: str) -> None:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(keys.call_key(approval_id), mapping={"channel_id": channel, "message_ts": ts})
            pipe.set(keys.message_key(channel, ts), approval_id, ex=self.retention)
            await pipe.execute()

    async def approval_for_message(self, channel: str, ts: str) -> str | None:
        value = await self.redis.get(keys.message_key(channel, ts))
        found = text(value) if value is not None else ""
        return found if "." in found else None  # a run id (a run message) has no dot

    # Thread comments and replies ----------------------------------------------------------

    async def add_comment(self, approval_id: str, user: str, text: str, *, ts: str = "") -> None:
        """Keep an approver's thread comment (the last MAX_COMMENTS) for the Reject pre-fill.
        Only approvers' comments are kept, so nobody else's replies can push them out. `ts` is
        the message's Slack timestamp: two replies' events can arrive in either order."""
        key = keys.comments_key(approval_id)
        entry = {"user": user, "text": text, "approver": True, "ts": ts}
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.rpush(key, json.dumps(entry))
            pipe.ltrim(key, -MAX_COMMENTS, -1)
            pipe.expire(key, self.retention)
            await pipe.execute()

    async def comments(self, approval_id: str) -> list[dict[str, Any]]:
        """Thread comments on a call in the thread's order: {"user", "text", "approver", "ts"}."""
        items = await self.redis.lrange(keys.comments_key(approval_id), 0, -1)
        return sorted((json.loads(item) for item in items), key=_thread_order)

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

    # Decisions ----------------------------------------------------------------------------

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
        also: Sequence[tuple[str, str]] = (),
        via: str = "",
        version: str = "",
        routed: str = "",
        after: Callable[[Any, DecideResult], Then | None] | None = None,
        enqueue: bool = False,
        pause: str = "",
        expected: Decided | None = None,
        handoff: JobHandOff | None = None,
    ) -> DecideResult:
        """Record one decision atomically; see decide.lua for the rules.

        `also`: for an Always decision, the other pending calls of the pause that this person
        may decide alone under their own rules (approval id, and the generation of its routing
        that judgement read: `CallRecord.routed`); the script settles those of them that are
        still pending in the same pause with the same sticky key and routing, nothing else.
        `via`: what decided the call when it was not this person's own click (an earlier
        Always decision).
        `version`: the version token of the card the person clicked (`CallRecord.version`;
        "": not checked): when the call was edited since, nothing is decided (`EDITED_SINCE`)
        and its card is redrawn. `routed`: the generation of the call's routing its judgement
        read (`CallRecord.routed`; "": not checked): when the call was routed anew since,
        nothing is decided (`Rerouted`: the caller judges again on a fresh read), and nothing
        that rides on the decision is written.
        `after(pipe, result)`: writes to send with the index write that follows a recorded
        decision or vote (an audit entry), in the same round trip, first; it may return what
        to do with the replies (all of them, its own first). `enqueue`: when this was the
        pause's last decision, its resume job (owned by `owner`) goes in that round trip too,
        after the due entry (a caller that settles several calls enqueues once itself), naming
        `pause` (the run's `calls` as the caller read them: the worker's take then reads the
        pause's calls with the run).
        `expected`: what a recorded decision will be, when the caller knows it (a call that
        needs one approval, alone in its pause, not Always: `Decided`, resuming): on one server
        without replicas to confirm writes, those writes then ride behind decide.lua in its
        round trip, run only if it recorded the decision (then.lua), not in a second one.
        `handoff`: with `expected` so ridden, the resume job goes to this process's own idle
        worker in that round trip (enqueued, read for it and taken: `RunStore.hand_off`), not
        through the worker's blocked read; `handoff.taken` then holds what it took."""
        run_id = keys.run_of(approval_id)
        if run_id is None:
            return Gone()
        # Only an Always decision may settle other calls of the pause: a plain click reads nothing.
        others = (
            [i for i in await self.pause_ids(run_id) if i != approval_id] if always and also else []
        )
        names = RunKeys(run_id).decide(approval_id, others)
        values = [
            "approved" if approve else "rejected",
            "1" if always else "0",
            team,
            user,
            now(),
            reason,
            owner,
            self.retention,
            via,
            version,
            routed,
            *(x for pair in (also if always else ()) for x in pair),
        ]
        ridden: list[list[Any] | None] = [None, None]
        then: Then | None = None
        due = 0.0
        if expected is not None and not others and self.outbox.reads_ahead:
            # The writes of the expected outcome, each group gated on what only this decision
            # writes: the call's `decided_owner` (it was recorded), the run's `owner` while it
            # is resuming (it was the pause's last: the resume is this caller's).
            recorded = self.redis.pipeline(transaction=False)
            resumes = self.redis.pipeline(transaction=False)
            if after is not None:
                then = after(recorded, expected)
            due = self.outbox.schedule_in(resumes, run_id, self.resume_gather)
            resumes.zadd(keys.DUE_RUNS, {run_id: float(now())})
            handoff = handoff if enqueue else None
            if enqueue and handoff is None:
                JobQueue.enqueue_in(resumes, "resume", run_id, owner, pause)
            handed: int | None = None
            async with self.redis.pipeline(transaction=False) as pipe:
                batch = Batch(pipe)
                first = batch.script(self._decide, names, values)
                gated = gated_in(batch, self._then, [
                    (keys.call_key(approval_id), [("decided_owner", owner)], recorded),
                    (keys.run_key(run_id), [("owner", owner), ("status", "resuming")], resumes),
                ])  # fmt: skip
                if gated is not None and handoff is not None:  # (gated as `resumes` is)
                    handed = handoff.queue(batch, run_id, owner, pause)
                replies = await batch.execute()
            reply = replies[first]
            if gated is not None:
                ridden = gated_replies(replies[gated])
            if handed is not None and handoff is not None:
                await handoff.took(replies[handed])
        else:
            reply = await self._decide(keys=names, args=values)
        result = decode_decide(reply)
        recorded_now = isinstance(result, Decided) or (
            isinstance(result, Voted) and not result.repeated
        )
        if text(reply[0]) == "edited":  # decide.lua marked the card: it is redrawn
            await self.outbox.schedule(run_id)
        if not recorded_now:
            return result
        resumes_now = isinstance(result, Decided) and result.resume
        then = then if ridden[0] is not None else None
        async with self.redis.pipeline(transaction=False) as pipe:
            if ridden[0] is None and after is not None:  # first: what it marks is delivered
                then = after(pipe, result)  # by the schedule
            # A resumed run's card waits for the resume (a pass now would only find that
            # out, read for nothing and hand the run back, while the resume runs).
            gather = self.resume_gather if resumes_now else 0.0
            if ridden[1] is None and (ridden[0] is None or resumes_now):
                due = self.outbox.schedule_in(pipe, run_id, gather)
                if resumes_now:  # waits for a worker
                    pipe.zadd(keys.DUE_RUNS, {run_id: float(now())})
                    if enqueue:  # last: a worker that takes it finds the due entry to clear
                        JobQueue.enqueue_in(pipe, "resume", run_id, owner, pause)
            elif ridden[1] is None:  # ridden, yet the pause had calls left: its card shows now
                due = self.outbox.schedule_in(pipe, run_id)
            replies = await pipe.execute() if len(pipe) else []
        self.outbox.written(due)  # due now: its projector woken (else it looks when it is due)
        if gather > 0:  # its pass then starts read, with the claim that takes it
            self.outbox.expect_at(run_id, due)
        if then is not None:
            then(replies if ridden[0] is None else ridden[0])
        return result

    async def redraw_card(self, approval_id: str) -> None:
        """Have a call's card drawn again from its records (someone clicked a copy drawn before
        an edit): its outbox mark, then the run made due for the projector."""
        run_id = keys.run_of(approval_id)
        if run_id is None:
            return
        async with self.redis.pipeline(transaction=False) as pipe:  # the index: another slot
            mark(pipe, run_id, str(keys.Target("card", approval_id)), self.retention)
            await pipe.execute()
        await self.outbox.schedule(run_id)

    async def sticky_decisions(self, run_id: str) -> dict[str, StickyDecision]:
        """The run's Always decisions, by sticky key."""
        raw = await self.redis.hgetall(keys.sticky_key(run_id))
        return {text(k): StickyDecision.from_json(text(k), text(v)) for k, v in raw.items()}

    async def drop_sticky(self, run_id: str, key: str) -> bool:
        """Forget an Always decision (the policy no longer allows it); True if it was there."""
        return bool(await self.redis.hdel(keys.sticky_key(run_id), key))


def _thread_order(comment: dict[str, Any]) -> float:
    """A comment's place in its thread: Slack's `ts` ("seconds.micros"); arrival order without."""
    try:
        return float(comment.get("ts") or 0.0)
    except (TypeError, ValueError):
        return 0.0
