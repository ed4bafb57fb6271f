"""The call journal in Redis (the engine's `Journal`): one hash per run, field = call id."""

from __future__ import annotations

import json
from typing import Any

import redis.asyncio as redis

from bot.engine.journal import Begin
from bot.store import keys
from bot.store.runs import _s, _script, now


class RedisJournal:
    """begin/end of each tool call, checked against the run's current attempt."""

    def __init__(self, client: redis.Redis, *, retention_seconds: int) -> None:
        self.redis = client
        self.retention = retention_seconds
        self._begin = client.register_script(_script("begin_call"))
        self._end = client.register_script(_script("end_call"))

    async def begin(self, run_id: str, call_id: str, attempt: str, tool: str) -> Begin:
        reply = await self._begin(
            keys=[keys.run_key(run_id), keys.journal_key(run_id)],
            args=[call_id, attempt, tool, now(), self.retention],
        )
        action = _s(reply[0])
        if action == "skip":
            return Begin("skip", _s(reply[1]))
        if action == "run":
            return Begin("run")
        # 'review', or 'not_owner' (this attempt was superseded): never run the tool.
        return Begin("review")

    async def end(self, run_id: str, call_id: str, attempt: str, output: str) -> None:
        await self._end(keys=[keys.journal_key(run_id)], args=[call_id, attempt, output, now()])

    async def entries(self, run_id: str) -> dict[str, dict[str, Any]]:
        raw = await self.redis.hgetall(keys.journal_key(run_id))
        return {_s(k): json.loads(_s(v)) for k, v in raw.items()}
