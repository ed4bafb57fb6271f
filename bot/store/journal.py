"""The call journal in Redis (the engine's `Journal`): one hash per run, field = call id."""

from __future__ import annotations

import json
from typing import Any

import redis.asyncio as redis

from bot.engine.journal import Begin
from bot.store import keys
from bot.store.keys import RunKeys
from bot.store.scripts import now, script, text


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

    async def begin(self, run_id: str, call_id: str, attempt: str, tool: str) -> Begin:
        reply = await self._begin(
            keys=RunKeys(run_id).begin_call(),
            args=[call_id, attempt, tool, now(), self.retention],
        )
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
