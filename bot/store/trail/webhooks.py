"""The webhook outbox: the audit stream itself, read from a cursor that moves only after delivery.

Every audit entry is already written in the same pipeline or script as the change it records
(`bot.store.trail.audit.AuditLog.append_in`), so using the stream as the outbox costs the decision
path nothing: no extra command, no extra key, and an entry cannot exist without its event. Delivery
keeps one cursor (the id of the last entry the receiver accepted) and one lease (the process
that delivers; replicas wait). The cursor moves only while its mover holds the lease (a fenced
script), so a process stalled past its lease cannot move it; at worst the entry it was sending
is sent twice, which the idempotency key (the entry's id) lets the receiver see.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis.asyncio as redis

from bot.store import keys
from bot.store.trail.audit import AUDIT_STREAM

# Take the lease (ARGV[1] = token, ARGV[2] = lease in ms) when free or already ours.
_HOLD = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""

# Move the cursor (KEYS[2]) to ARGV[2] only while ARGV[1] holds the lease (KEYS[1]).
_ADVANCE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[2], ARGV[2])
return 1
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"""


def _s(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def entry_time(entry_id: str) -> float:
    """When an audit entry was appended (Unix seconds), from its stream id (`<ms>-<seq>`)."""
    return int(entry_id.split("-", 1)[0]) / 1000


@dataclass(frozen=True)
class Event:
    """One audit entry to deliver."""

    id: str
    """Its stream id: stable, unique, ordered: the idempotency key."""
    fields: dict[str, str]
    """The entry as stored (`kind`, `time`, `run_id`, ...)."""


class WebhookOutbox:
    """The cursor and the lease of webhook delivery over the audit stream."""

    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        self._hold = client.register_script(_HOLD)
        self._advance = client.register_script(_ADVANCE)
        self._release = client.register_script(_RELEASE)

    async def begin(self) -> str:
        """The cursor; set to the newest audit entry the first time webhooks are on (what
        was audited before a webhook was configured is not sent: `approval-bot audit` has it)."""
        cursor = await self.redis.get(keys.WEBHOOK_CURSOR)
        if cursor is not None:
            return _s(cursor)
        newest = await self.redis.xrevrange(AUDIT_STREAM, count=1)
        start = _s(newest[0][0]) if newest else "0-0"
        await self.redis.set(keys.WEBHOOK_CURSOR, start, nx=True)
        return _s(await self.redis.get(keys.WEBHOOK_CURSOR) or start)

    async def cursor(self) -> str | None:
        value = await self.redis.get(keys.WEBHOOK_CURSOR)
        return None if value is None else _s(value)

    async def hold(self, token: str, lease: float) -> bool:
        """Take or renew the lease for `lease` seconds; False while another process holds it."""
        held = await self._hold(keys=[keys.WEBHOOK_LEASE], args=[token, int(lease * 1000)])
        return int(held) == 1

    async def release(self, token: str) -> None:
        await self._release(keys=[keys.WEBHOOK_LEASE], args=[token])

    async def pending(self, after: str, limit: int, *, wait: float = 0.0) -> list[Event]:
        """Up to `limit` entries after the entry `after`, oldest first; when none, wait up to
        `wait` seconds for one (a blocking read: an entry appended by any process ends it)."""
        rows: Any
        if wait > 0:
            reply: Any = await self.redis.xread(
                {AUDIT_STREAM: after}, count=limit, block=max(1, int(wait * 1000))
            )
            rows = reply[0][1] if reply else []
        else:
            rows = await self.redis.xrange(AUDIT_STREAM, min="(" + after, max="+", count=limit)
        return [Event(_s(i), {_s(k): _s(v) for k, v in (raw or {}).items()}) for i, raw in rows]

    async def stale_range(self, first: str, before: float, page: int = 1000) -> tuple[str, int]:
        """The last id and the number of the entries from `first` that were appended before
        `before` (Unix seconds), read a page at a time."""
        end = str(max(0, int(before * 1000) - 1))  # every entry of the millisecond before
        last, count, start = first, 0, first
        while True:
            rows = await self.redis.xrange(AUDIT_STREAM, min=start, max=end, count=page)
            if not rows:
                return last, count
            count += len(rows)
            last = _s(rows[-1][0])
            if len(rows) < page:
                return last, count
            start = "(" + last

    async def advance(self, token: str, entry_id: str) -> bool:
        """Record `entry_id` as delivered; False (nothing written) when the lease is lost."""
        moved = await self._advance(
            keys=[keys.WEBHOOK_LEASE, keys.WEBHOOK_CURSOR], args=[token, entry_id]
        )
        return int(moved) == 1

    async def first_since(self, since: float) -> str | None:
        """The id of the first audit entry appended at or after `since` (Unix seconds)."""
        rows = await self.redis.xrange(AUDIT_STREAM, min=str(int(since * 1000)), count=1)
        return _s(rows[0][0]) if rows else None

    async def oldest_age(self, now: float | None = None) -> float:
        """Seconds since the oldest entry not yet delivered was appended; 0 when none waits
        (or webhooks were never on)."""
        cursor = await self.cursor()
        if cursor is None:
            return 0.0
        waiting = await self.pending(cursor, 1)
        if not waiting:
            return 0.0
        return max(0.0, (time.time() if now is None else now) - entry_time(waiting[0].id))
