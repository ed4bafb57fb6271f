"""Admission of new runs: per-user and per-channel token buckets and caps on unfinished runs,
checked and taken in one Lua script (`admit.lua`), so a burst of commands cannot slip past."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal

import redis.asyncio as redis

from bot.store import keys
from bot.store.records import ENDED

Verdict = Literal["ok", "user_rate", "channel_rate", "user_open", "channel_open", "replay"]
SEEN_SECONDS = 3600  # a command's delivery id is remembered this long (a replay starts nothing)
MISSING_GRACE_SECONDS = 60.0


@dataclass(frozen=True)
class Quota:
    """Limits on starting runs; 0 anywhere means no limit."""

    user_per_minute: float
    user_burst: int
    channel_per_minute: float
    channel_burst: int
    user_open: int
    channel_open: int


@dataclass(frozen=True)
class Admission:
    """`ok`, or the limit that refused the run and a figure for the sentence: the seconds to
    wait (rates) or the unfinished runs counted (caps)."""

    verdict: Verdict
    figure: int = 0


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class AdmissionStore:
    """Checks and takes a run's place under the quota (see `admit.lua`). A run leaves the
    open-run sets with its end (`forget_in`, in the writes that follow it); one that ended
    otherwise (cancelled, refused by Slack, its records expired) is dropped when a cap would
    refuse a new run (`_forget_ended`), so a start reads no other run in the common case."""

    def __init__(self, client: redis.Redis, *, retention_seconds: int) -> None:
        self.redis = client
        self.retention = retention_seconds
        script = (resources.files("bot.store") / "lua" / "admit.lua").read_text(encoding="utf-8")
        self._admit = client.register_script(script)

    async def _forget_ended(self, key: str, now: float) -> None:
        """Drop runs that ended from an open-run set, and runs whose record is missing (expired,
        or never created: a failed start) once past a grace period: a run admitted a moment ago
        has no record yet and must keep its place."""
        scored: list[Any] = await self.redis.zrange(key, 0, -1, withscores=True)
        members = [(_s(m), float(score)) for m, score in scored]
        if not members:
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            for run_id, _ in members:
                pipe.hget(keys.run_key(run_id), "status")
            statuses = await pipe.execute()
        ended = [
            run_id
            for (run_id, admitted), status in zip(members, statuses, strict=True)
            if (status is None and admitted < now - MISSING_GRACE_SECONDS)
            or (status is not None and _s(status) in ENDED)
        ]
        if ended:
            await self.redis.zrem(key, *ended)

    async def admit(
        self,
        quota: Quota,
        *,
        team: str,
        user: str,
        channel: str,
        run_id: str,
        delivery_id: str = "",
    ) -> Admission:
        """Admit `run_id`, or say which limit refuses it; `replay` when `delivery_id` (a
        command's trigger id) was admitted or refused before: nothing is taken again."""
        user_open, channel_open = keys.user_open_key(team, user), keys.channel_open_key(channel)
        token = secrets.token_hex(8)
        for attempt in range(2):
            now = time.time()
            reply = await self._admit(
                keys=[keys.user_bucket_key(team, user), keys.channel_bucket_key(channel),
                      user_open, channel_open, keys.command_seen_key(delivery_id)],
                args=[f"{now:.3f}", quota.user_per_minute / 60, quota.user_burst,
                      quota.channel_per_minute / 60, quota.channel_burst, quota.user_open,
                      quota.channel_open, run_id, self.retention,
                      token if delivery_id else "", SEEN_SECONDS],
            )  # fmt: skip
            verdict = _s(reply[0])
            figure = int(reply[1]) if len(reply) > 1 else 0
            full = {"user_open": user_open, "channel_open": channel_open}.get(verdict)
            if full is None or attempt:
                break
            await self._forget_ended(full, now)  # then asked once more
        return Admission(verdict, figure)  # type: ignore[arg-type]

    @staticmethod
    def forget_in(pipe: Any, *, team: str, user: str, channel: str, run_id: str) -> None:
        """A run (its turn asked for by `user`) ended: off the open-run sets, in a pipeline
        that carries the end's other writes."""
        pipe.zrem(keys.user_open_key(team, user), run_id)
        pipe.zrem(keys.channel_open_key(channel), run_id)

    async def ask(self, team: str, user: str, per_minute: int) -> int:
        """Count one list asked for by this person: 0 when within `per_minute` (a fixed
        minute), else the seconds until they may ask again (`0` per minute: no limit)."""
        if per_minute <= 0:
            return 0
        key = keys.lists_key(team, user)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.incr(key)
            pipe.expire(key, 60, nx=True)
            pipe.ttl(key)
            count, _, ttl = await pipe.execute()
        return 0 if int(count) <= per_minute else max(1, int(ttl))
