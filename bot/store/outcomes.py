"""Outcomes people must be told (a call decided or expired, the run ended), and which of them
they were told: their `notice` message is one more target of the run's outbox. Each outcome is
told to who asked for it: the run's starter, or a later turn's requester (its field is then
`<id> <user>`, `outcome_key`)."""

from __future__ import annotations

import time
from typing import Any

import redis.asyncio as redis

from bot.store import keys
from bot.store.keys import RunKeys
from bot.store.outbox import Mark, Outbox
from bot.store.scripts import now, script, text


def outcome_key(item: str, person: str, starter: str) -> str:
    """The field of an outcome (`item`: an approval id, or `run`) told to `person`: the item
    alone when that is the run's starter (as every outcome was before requesters were kept)."""
    return item if person == starter else f"{item} {person}"


def told_to(key: str, starter: str) -> tuple[str, str]:
    """An outcome field's item and whom it is told to (`outcome_key` read back)."""
    item, _, person = key.partition(" ")
    return item, person or starter


# Record outcomes people must be told; mark their message when one is new.
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


def decode_outcomes(reply: list[Any]) -> Mark | None:
    """_OUTCOMES' reply: {new, notice tick, notice since} when an outcome was new, else {0}:
    the notice's mark, or None when nothing was new."""
    if not int(reply[0]):
        return None
    return Mark(text(reply[1]), float(text(reply[2]) or 0))


# Forget listed runs whose listing did not change since they were read (a run listed again
# meanwhile, with news the reader did not see, stays listed). KEYS[1] the list; ARGV run, score...
_FORGET = """
for i = 1, #ARGV, 2 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) == tonumber(ARGV[i + 1]) then
    redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return 0
"""

# Let go of a person's notice lock only if this pass still holds it.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class Outcomes:
    """What people must be told of runs, and what they were told (idempotent)."""

    def __init__(self, client: redis.Redis, *, retention_seconds: int, outbox: Outbox) -> None:
        self.redis = client
        self.retention = retention_seconds
        self.outbox = outbox
        self._outcomes = client.register_script(script("_outbox") + _OUTCOMES)
        self._release = client.register_script(_RELEASE)
        self._forget = client.register_script(_FORGET)

    async def record_outcomes(
        self,
        run_id: str,
        outcomes: dict[str, str],
        people: list[str] | tuple[str, ...] = (),
        window: float = 0.0,
    ) -> Mark | None:
        """Note outcomes people must be told (`outcome_key` -> status); the run's `notice` is
        marked when one is new: then its mark (what a reread of the outbox would give), and
        the run is listed among each of `people`'s runs with news (so the first of their
        notices due tells it too), and due when its notice is (`window` seconds after its
        mark: not at once, which would be a pass that finds nothing to do yet). Idempotent."""
        if not outcomes:
            return None
        args: list[str] = [now(), str(self.retention)]
        for item in sorted(outcomes.items()):
            args.extend(item)
        reply = await self._outcomes(keys=RunKeys(run_id).record_outcomes(), args=args)
        notice = decode_outcomes(reply)
        if notice is not None:
            # Its own key (another slot): after the run's script, never inside it; then the
            # run is due (in the same round trip, in that order).
            async with self.redis.pipeline(transaction=False) as pipe:
                for person in people:
                    pipe.zadd(keys.notice_runs_key(person), {run_id: time.time()})
                    pipe.expire(keys.notice_runs_key(person), self.retention)
                due = max(0.0, notice.since + window - time.time())
                self.outbox.schedule_in(pipe, run_id, due)
                await pipe.execute()
            if due <= 0:
                self.outbox.woken.set()
        return notice

    async def told_many(self, told: dict[str, dict[str, str]]) -> None:
        """`told_outcomes` of several runs, in one round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for run_id, outcomes in told.items():
                if outcomes:
                    pipe.hset(
                        keys.outcomes_key(run_id), mapping={k + "!": v for k, v in outcomes.items()}
                    )
            await pipe.execute()

    async def list_and_hold(self, person: str, run_id: str, token: str, seconds: float) -> bool:
        """List `run_id` among `person`'s runs with news, then try to take their notice for
        one pass (a lease). In that order: whoever holds the notice, or takes it next, finds
        the run listed (`NoticeHolder` protocol in `bot.slack.projector`)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            # Listed anew (a later time) even when listed already: a reader that saw the older
            # listing does not forget it (`forget_runs`).
            pipe.zadd(keys.notice_runs_key(person), {run_id: time.time()})
            pipe.expire(keys.notice_runs_key(person), self.retention)
            pipe.set(keys.notice_lock_key(person), token, nx=True, px=max(1, int(seconds * 1000)))
            *_, held = await pipe.execute()
        return bool(held)

    async def next_notice(self, person: str) -> float:
        """When `person`'s next notice may go (0: now)."""
        value = await self.redis.get(keys.notice_next_key(person))
        return float(text(value)) if value else 0.0

    async def notice_sent(self, person: str, window: float) -> None:
        """A notice went to `person`: the next one waits `window` seconds (news gathers)."""
        if window > 0:
            await self.redis.set(
                keys.notice_next_key(person),
                f"{time.time() + window:.3f}",
                px=int(window * 1000) + 1,
            )

    async def listed(self, person: str) -> int:
        """How many of `person`'s runs are listed with news not told yet."""
        return int(await self.redis.zcard(keys.notice_runs_key(person)))

    async def pending_runs(self, person: str, limit: int) -> dict[str, float]:
        """Up to `limit` of `person`'s listed runs (run id -> when listed), oldest first."""
        found: Any = await self.redis.zrange(
            keys.notice_runs_key(person), 0, limit - 1, withscores=True
        )
        return {text(run_id): float(score) for run_id, score in found}

    async def forget_runs(self, person: str, listed: dict[str, float]) -> None:
        """`person` was told these runs' news as read: unlist them, unless listed again since."""
        if listed:
            args: list[str | float] = []
            for run_id, score in listed.items():
                args.extend((run_id, repr(score)))
            await self._forget(keys=[keys.notice_runs_key(person)], args=args)

    async def hold_notice(self, person: str, token: str, seconds: float) -> bool:
        """Take `person`'s notice for one pass (a lease: another pass of another run, in this
        process or another, does not tell the same outcomes at the same time)."""
        return bool(
            await self.redis.set(
                keys.notice_lock_key(person), token, nx=True, px=max(1, int(seconds * 1000))
            )
        )

    async def release_notice(self, person: str, token: str) -> None:
        await self._release(keys=[keys.notice_lock_key(person)], args=[token])

    async def untold_of(self, run_ids: list[str]) -> dict[str, dict[str, str]]:
        """`untold_outcomes` of several runs in one round trip (runs with none left out)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.hgetall(keys.outcomes_key(run_id))
            replies = await pipe.execute()
        found: dict[str, dict[str, str]] = {}
        for run_id, stored in zip(run_ids, replies, strict=True):
            raw = {text(k): text(v) for k, v in stored.items()}
            untold = {k: v for k, v in raw.items() if not k.endswith("!") and raw.get(k + "!") != v}
            if untold:
                found[run_id] = untold
        return found

    async def untold_outcomes(self, run_id: str) -> dict[str, str]:
        """Outcomes recorded and not yet told (`outcome_key` -> status)."""
        stored = await self.redis.hgetall(keys.outcomes_key(run_id))
        raw = {text(k): text(v) for k, v in stored.items()}
        return {k: v for k, v in raw.items() if not k.endswith("!") and raw.get(k + "!") != v}

    async def has_outcomes(self, run_id: str, person: str, starter: str) -> bool:
        """Whether an outcome of the run was ever recorded for `person` to be told."""
        found = await self.redis.hkeys(keys.outcomes_key(run_id))  # type: ignore[misc]
        return any(
            told_to(text(k), starter)[1] == person for k in found if not text(k).endswith("!")
        )

    async def told_outcomes(self, run_id: str, told: dict[str, str]) -> None:
        if told:
            await self.redis.hset(
                keys.outcomes_key(run_id), mapping={k + "!": v for k, v in told.items()}
            )
