"""Reviews: a run stopped because whether a call had its effect is unknown, until a person
settles it (to_review.lua, resolve_review.lua), and the votes to run a reviewed call again."""

from __future__ import annotations

from typing import Any

import redis.asyncio as redis

from bot.store import keys
from bot.store.delivery.outbox import Outbox
from bot.store.keys import RunKeys
from bot.store.scripts import mark, marking, now, text


def decode_to_review(reply: Any) -> bool:
    """to_review.lua's reply: 1 (the run waits for the review, now or already), 0 (this
    attempt no longer owns the run: nothing changed)."""
    return int(reply) == 1


def decode_resolve_review(reply: list[Any]) -> list[str] | None:
    """resolve_review.lua's reply: {'ok', call ids it changed...} | {'gone', status}: the
    changed ids, or None when the review was not open."""
    if text(reply[0]) != "ok":
        return None
    return [text(r) for r in reply[1:]]


class Reviews:
    """Opening, voting on and settling a run's review, each exactly once."""

    def __init__(self, client: redis.Redis, *, retention_seconds: int, outbox: Outbox) -> None:
        self.redis = client
        self.retention = retention_seconds
        self.outbox = outbox
        self._to_review = client.register_script(marking("to_review"))
        self._resolve_review = client.register_script(marking("resolve_review"))

    async def review_vote(self, run_id: str, review_id: str, user: str) -> int:
        """Count `user` (once) towards running a reviewed call again; returns the votes so far."""
        key = keys.review_votes_key(run_id, review_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.sadd(key, user)
            pipe.expire(key, self.retention)
            mark(pipe, run_id, str(keys.Target("review", review_id)), self.retention)
            pipe.scard(key)
            result = await pipe.execute()
        await self.outbox.schedule(run_id)
        return int(result[-1])

    async def review_voters(self, run_id: str, review_id: str) -> list[str]:
        return sorted(
            text(u) for u in await self.redis.smembers(keys.review_votes_key(run_id, review_id))
        )

    async def to_review(
        self, run_id: str, attempt: str, review_id: str, text: str, kind: str
    ) -> bool:
        """The attempt `attempt` stops the run for a review; False when it no longer owns it."""
        reply = await self._to_review(
            keys=RunKeys(run_id).to_review(),
            args=[attempt, review_id, text, now(), kind, self.retention],
        )
        waits = decode_to_review(reply)
        if waits:
            await self.outbox.schedule(run_id)
        return waits

    async def resolve_review(
        self, run_id: str, review_id: str, *, action: str, execution: str, user: str, status: str
    ) -> list[str] | None:
        """Settle a review once; returns the call ids it changed, or None if it was not open."""
        reply = await self._resolve_review(
            keys=RunKeys(run_id).resolve_review(),
            args=[review_id, action, execution, user, now(), status, self.retention],
        )
        changed = decode_resolve_review(reply)
        if changed is None:
            return None
        async with self.redis.pipeline(transaction=False) as pipe:
            self.outbox.schedule_in(pipe, run_id)
            pipe.zadd(keys.DUE_RUNS, {run_id: float(now())})  # its job waits for a worker
            await pipe.execute()
        self.outbox.woken.set()
        return changed
