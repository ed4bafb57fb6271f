"""The audit trail: an append-only Redis stream of every start, decision, refusal, resume, result
and failure, with the actor, channel, call digest and time.

The bot only appends (XADD). With a retention setting, XADD trims entries older than that many
days as it appends (MINID); without one, nothing is ever removed. Entries live in Redis, so they
survive restarts with the same persistence as runs (AOF).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import redis.asyncio as redis

from bot.store.connection import EmbeddedRedis, RedisMode, open_redis
from bot.store.keys import PREFIX

AUDIT_STREAM = f"{PREFIX}:audit"

FIELDS = (
    "time", "kind", "team", "enterprise", "user", "requester", "channel", "run_id",
    "approval_id", "agent", "tool", "digest", "decision", "detail", "text",
)  # fmt: skip


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class AuditLog:
    """Append and read audit entries."""

    def __init__(self, client: redis.Redis, *, retention_days: int = 0) -> None:
        self.redis = client
        self.retention_days = retention_days

    async def append(self, kind: str, **fields: str) -> str:
        """Append one entry; returns its stream id (milliseconds-sequence)."""
        entry_id = await self.append_in(self.redis, kind, **fields)
        return _text(entry_id)

    def append_in(self, pipe: Any, kind: str, **fields: str) -> Any:
        """Append one entry through `pipe` (a pipeline carrying other writes, or the client)."""
        return self.entry_in(pipe, kind, fields)

    def entry_in(
        self, pipe: Any, kind: str, fields: Mapping[str, str], *, at: float | None = None
    ) -> Any:
        """`append_in`; `at`: the entry's time when it is not now (a history written for a
        test or a benchmark, oldest first: a stream's ids only grow)."""
        now = time.time()
        entry = {"time": f"{now if at is None else at:.3f}", "kind": kind}
        entry.update({k: v for k, v in fields.items() if v})
        minid = None
        if self.retention_days > 0:
            minid = str(int((now - self.retention_days * 86400) * 1000))
        entry_id = "*" if at is None else f"{int(at * 1000)}-*"
        return pipe.xadd(AUDIT_STREAM, entry, id=entry_id, minid=minid, approximate=True)

    async def read(
        self, *, since: float = 0.0, until: float | None = None, batch: int = 500
    ) -> AsyncIterator[dict[str, str]]:
        """Entries from `since` to `until` (Unix seconds), oldest first."""
        start = str(int(since * 1000))
        end = str(int(until * 1000)) if until is not None else "+"
        while True:
            rows = await self.redis.xrange(AUDIT_STREAM, min=start, max=end, count=batch)
            if not rows:
                return
            for entry_id, raw in rows:
                entry = {_text(k): _text(v) for k, v in (raw or {}).items()}
                entry["id"] = _text(entry_id)
                yield entry
            start = "(" + _text(rows[-1][0])


@contextlib.asynccontextmanager
async def offline_trail(
    redis_url: str | None, data_dir: Path, *, mode: RedisMode = "auto"
) -> AsyncIterator[AuditLog | None]:
    """The audit trail for a command that only reads it (`approval-bot audit`, `report`,
    `policy backtest`): at `redis_url`, else the embedded Redis of `data_dir` (the running
    bot's, or started for the read and stopped after). None: neither holds a trail."""
    embedded = None
    url = redis_url or await EmbeddedRedis.running_url(data_dir)
    if url is None:
        if not (data_dir / "appendonlydir").is_dir():
            yield None
            return
        embedded = EmbeddedRedis(data_dir)
        await embedded.start()
        url = embedded.url
    client, _ = await open_redis(url, max_connections=4, mode=mode)
    try:
        yield AuditLog(client)
    finally:
        await client.aclose()
        if embedded is not None:
            embedded.stop()
