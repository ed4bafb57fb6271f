"""The call journal in Redis (the engine's `Journal`): one hash per run, field = call id."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import redis.asyncio as redis
from redis.exceptions import NoScriptError

from bot.engine.journal import Begin, Rider
from bot.store import keys
from bot.store.connection import is_cluster
from bot.store.keys import RunKeys
from bot.store.scripts import now, script, text

log = logging.getLogger(__name__)


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
        a round trip of its own, after the riders'."""
        call_keys = RunKeys(run_id).begin_call()
        args: list[str | int] = [call_id, attempt, tool, now(), self.retention]
        if riders:
            alone = bool(getattr(self.redis, "replicas", 0)) or is_cluster(self.redis)
            async with self.redis.pipeline(transaction=False) as pipe:
                if not alone:  # (the riders are stored before the tool runs either way)
                    pipe.evalsha(self._begin.sha, len(call_keys), *call_keys, *args)
                for ride in riders:
                    try:
                        ride(pipe)
                    except Exception:  # (its own fault: never the call's)
                        log.exception("a write of run %s could not be sent", run_id)
                replies = await pipe.execute(raise_on_error=False)
            reply = None if alone else replies.pop(0)
            for failed in (r for r in replies if isinstance(r, Exception)):
                log.error("could not write what run %s stores before a tool: %r", run_id, failed)
            if reply is not None and not isinstance(reply, NoScriptError):
                if isinstance(reply, Exception):
                    raise reply
                return decode_begin(reply)
        reply = await self._begin(keys=call_keys, args=args)  # (loads the script if it must)
        return decode_begin(reply)

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
