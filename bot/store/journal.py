"""The call journal in Redis (the engine's `Journal`): one hash per run, field = call id."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import redis.asyncio as redis
from redis.exceptions import NoScriptError

from bot.engine.journal import Begin, DecisionEntry, JournalUnavailable, Rider
from bot.store import keys
from bot.store.connection import is_cluster
from bot.store.keys import RunKeys
from bot.store.scripts import now, script, text

log = logging.getLogger(__name__)

# A begin whose decision's audit entry could not be written (#32): the tool did not run, so
# this attempt is no longer executing the call (a retry decides it again, and runs it).
# KEYS[1] journal hash; ARGV[1] call id, ARGV[2] attempt token
_UNBEGIN = """
local entry = redis.call('HGET', KEYS[1], ARGV[1])
if not entry then
  return 0
end
local data = cjson.decode(entry)
if data['status'] == 'executing' and data['owner'] == ARGV[2] then
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0
"""

# Each decision rider queued in a pipeline, with its commands' span there ((-1, -1): it could
# not be queued).
Queued = list[tuple[DecisionEntry, int, int]]


def queue_riders(pipe: Any, riders: Sequence[Rider], run_id: str) -> Queued:
    """Queue `riders` in `pipe`; a rider that fails to queue is logged (its own fault, never
    the pipeline's). Returns where each decision's entries are in the pipeline's replies."""
    queued: Queued = []
    for ride in riders:
        start = len(pipe)
        try:
            ride(pipe)
        except Exception:
            log.exception("a write of run %s could not be sent", run_id)
            if isinstance(ride, DecisionEntry):
                queued.append((ride, -1, -1))
            continue
        if isinstance(ride, DecisionEntry):
            queued.append((ride, start, len(pipe)))
    return queued


def unwritten(queued: Queued, replies: Sequence[Any]) -> list[DecisionEntry]:
    """The decisions whose entries `replies` (the whole pipeline's) do not confirm; the
    others are told they are written (`DecisionEntry.written`)."""
    missing = []
    for ride, start, end in queued:
        stored = start >= 0 and end <= len(replies)
        if not stored or any(isinstance(r, Exception) for r in replies[start:end]):
            missing.append(ride)
        else:
            ride.written()
    return missing


def decode_begin(reply: list[Any]) -> Begin:
    """begin_call.lua's reply: {'run'} | {'skip', recorded output} | {'review', owner} |
    {'not_owner'}. A superseded attempt (not_owner) is told `review` like an unknown outcome:
    the engine must never run the tool, and its later writes are owner-checked anyway."""
    action = text(reply[0])
    if action == "skip":
        return Begin("skip", text(reply[1]))
    if action == "run":
        return Begin("run")
    return Begin("review")


class RedisJournal:
    """begin/end of each tool call, checked against the run's current attempt."""

    def __init__(self, client: redis.Redis, *, retention_seconds: int) -> None:
        self.redis = client
        self.retention = retention_seconds
        self._begin = client.register_script(script("begin_call"))
        self._end = client.register_script(script("end_call"))

    async def begin(
        self, run_id: str, call_id: str, attempt: str, tool: str, riders: Sequence[Rider] = ()
    ) -> Begin:
        """begin_call.lua; `riders` (writes of the attempt: `Execution.riders`) are sent with
        it, in the same round trip on a single server; a failed rider is logged, as a failed
        audit entry is. A transition that waits for replicas (`Replicated`), or a cluster's, is
        a round trip of its own, after the riders'.

        A rider that carries a decision (`DecisionEntry`: the audit entry of a call decided in the
        run) is not best effort: if it is not stored, the tool does not run. Alone, begin_call
        is not sent; with it, its entry is taken back (`_UNBEGIN`), and JournalUnavailable
        raised either way: the attempt stops as when a journal write fails, and the retry
        decides the call again."""
        call_keys = RunKeys(run_id).begin_call()
        args: list[str | int] = [call_id, attempt, tool, now(), self.retention]
        if riders:
            alone = bool(getattr(self.redis, "replicas", 0)) or is_cluster(self.redis)
            async with self.redis.pipeline(transaction=False) as pipe:
                if not alone:  # (the riders are stored before the tool runs either way)
                    pipe.evalsha(self._begin.sha, len(call_keys), *call_keys, *args)
                queued = queue_riders(pipe, riders, run_id)
                replies = await pipe.execute(raise_on_error=False)
            reply = None if alone else replies[0]
            for failed in (r for r in replies[0 if alone else 1 :] if isinstance(r, Exception)):
                log.error("could not write what run %s stores before a tool: %r", run_id, failed)
            missing = unwritten(queued, replies)
            if missing:
                await self._not_begun(run_id, call_id, attempt, reply, missing)
            if reply is not None and not isinstance(reply, NoScriptError):
                if isinstance(reply, Exception):
                    raise reply
                return decode_begin(reply)
        reply = await self._begin(keys=call_keys, args=args)  # (loads the script if it must)
        return decode_begin(reply)

    async def _not_begun(
        self, run_id: str, call_id: str, attempt: str, reply: Any, missing: list[DecisionEntry]
    ) -> None:
        """A decision's entry sent with call `call_id`'s begin was not stored: its begin (if
        it was sent and it began the call) is taken back, and JournalUnavailable raised. A
        call already executed (skip) or left for review is not run here anyway: its begin
        stands."""
        what = "; ".join(m.what for m in missing)
        log.error("could not write the audit entry of %s in run %s: the tool does not run",
                  what, run_id)  # fmt: skip
        began = reply is not None and not isinstance(reply, Exception)
        if began and decode_begin(reply).action != "run":
            return
        if began:
            try:
                await self.redis.eval(_UNBEGIN, 1, keys.journal_key(run_id), call_id, attempt)
            except Exception:  # the retry finds the call left executing: a person decides
                log.exception("could not take back the begin of call %s in run %s", call_id,
                              run_id)  # fmt: skip
        raise JournalUnavailable(f"could not write the audit entry of {what}")

    async def end(self, run_id: str, call_id: str, attempt: str, output: str) -> bool:
        """Record the call's output; True when `attempt` still owns the run (the check before
        the next model call then asks nothing more: see `Execution.confirmed`)."""
        reply = await self._end(
            keys=RunKeys(run_id).end_call(), args=[call_id, attempt, output, now()]
        )
        return int(reply) == 1

    async def entries(self, run_id: str) -> dict[str, dict[str, Any]]:
        raw = await self.redis.hgetall(keys.journal_key(run_id))
        return {text(k): json.loads(text(v)) for k, v in raw.items()}
