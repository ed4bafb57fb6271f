"""Who has opened the bot's App Home, and whose Home must be published again, when.

A person is a viewer once they open the tab (`app_home_opened`), for `VIEWER_DAYS`. A change to
a run makes its viewers due (`touch`); a person is due at most once per `interval` seconds after
their last publish, so a burst of changes costs one `views.publish` per person. A publisher takes
due people with `claim` (one claimer per person: the claim removes them from the index).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis.asyncio as redis

from bot.store import keys
from bot.store.delivery.dues import Dues

VIEWER_DAYS = 7

# KEYS[1] due index, KEYS[2] shown hash; ARGV[1] now (ms), ARGV[2] interval (ms),
# ARGV[3..] people ("<team>:<user>"). Due at the later of now and their last publish + interval;
# never later than they already are. Returns {how many are due now, the earliest moment (ms)
# one of the others is due ('' if none)}: the caller's publisher looks then.
_TOUCH = """
local now, interval = tonumber(ARGV[1]), tonumber(ARGV[2])
local ready, later = 0, nil
for i = 3, #ARGV do
  local due = now
  local last = redis.call('HGET', KEYS[2], ARGV[i])
  if last then
    local at = tonumber(string.match(last, '^([%d.]+)')) or 0
    if at + interval > due then
      due = at + interval
    end
  end
  redis.call('ZADD', KEYS[1], 'LT', due, ARGV[i])  -- LT adds a new member too
  local at = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[i]))
  if at <= now then
    ready = ready + 1
  elseif later == nil or at < later then
    later = at
  end
end
return {ready, later and string.format('%.3f', later) or ''}
"""

# KEYS[1] due index; ARGV[1] now (ms), ARGV[2] limit. Takes the due people off the index.
_CLAIM = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, member in ipairs(due) do
  redis.call('ZREM', KEYS[1], member)
end
return due
"""


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def person(team: str, user: str) -> str:
    return f"{team}:{user}"


class HomeIndex:
    """The App Home viewers and their due publishes."""

    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        self._touch = client.register_script(_TOUCH)
        self._claim = client.register_script(_CLAIM)
        # Set when this process makes a Home due now: its publisher wakes at once (#32: not at
        # its next look, which is for other processes' changes); and when those it made due
        # later fall due (its publisher looks then).
        self.woken = asyncio.Event()
        self.dues = Dues(self.woken)
        # The viewers as last read (member -> when they opened it, ms), with the version of
        # the index they were read at (`HOME_VIEWERS_VERSION`; None: the key was absent).
        self._known: tuple[str | None, dict[str, float]] | None = None

    @staticmethod
    def read_version(pipe: Any) -> None:
        """Queue the read of the viewers' version on `pipe` (for `viewers(team, version)`)."""
        pipe.get(keys.HOME_VIEWERS_VERSION)

    async def opened(self, team: str, user: str, enterprise: str = "") -> None:
        """`user` opened their App Home: a viewer from now on, due now."""
        now_ms = time.time() * 1000
        member = person(team, user)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(keys.HOME_ORGS, member, enterprise)
            pipe.zadd(keys.HOME_VIEWERS, {member: now_ms})
            pipe.zadd(keys.HOME_DUE, {member: now_ms}, lt=True)
            pipe.incr(keys.HOME_VIEWERS_VERSION)
            await pipe.execute()
        self.woken.set()
        await self.trim()

    async def forget(self, team: str, user: str) -> None:
        """Keep nothing of this person (a workspace the bot does not serve)."""
        member = person(team, user)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.zrem(keys.HOME_VIEWERS, member)
            pipe.zrem(keys.HOME_DUE, member)
            pipe.hdel(keys.HOME_SHOWN, member)
            pipe.hdel(keys.HOME_ORGS, member)
            pipe.incr(keys.HOME_VIEWERS_VERSION)
            await pipe.execute()

    async def trim(self) -> int:
        """Forget the viewers who have not opened their Home for `VIEWER_DAYS` (what was
        shown to them and their organization too); how many."""
        cutoff = time.time() * 1000 - VIEWER_DAYS * 86400_000
        gone = [_s(m) for m in await self.redis.zrangebyscore(keys.HOME_VIEWERS, "-inf", cutoff)]
        if gone:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.zrem(keys.HOME_VIEWERS, *gone)
                pipe.hdel(keys.HOME_SHOWN, *gone)
                pipe.hdel(keys.HOME_ORGS, *gone)
                pipe.incr(keys.HOME_VIEWERS_VERSION)
                await pipe.execute()
        return len(gone)

    async def viewers(self, team: str, version: Any = ...) -> list[str]:
        """The users of `team` who opened their App Home in the last `VIEWER_DAYS` days.
        `version`: the index's version as just read (`read_version`, with other reads): the
        viewers this process read at that version serve without a round trip."""
        since = time.time() * 1000 - VIEWER_DAYS * 86400_000
        seen = None if version is None or version is ... else _s(version)
        if version is ... or self._known is None or self._known[0] != seen:
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.get(keys.HOME_VIEWERS_VERSION)  # first: the members are at least as new
                pipe.zrangebyscore(keys.HOME_VIEWERS, since, "+inf", withscores=True)
                found, members = await pipe.execute()
            self._known = (
                None if found is None else _s(found),
                {_s(m): float(score) for m, score in members},
            )
        prefix = team + ":"
        return [
            m[len(prefix) :]
            for m, at in self._known[1].items()
            if at >= since and m.startswith(prefix)
        ]

    async def everyone(self) -> dict[str, list[str]]:
        """Every viewer of the last `VIEWER_DAYS` days, by team."""
        since = time.time() * 1000 - VIEWER_DAYS * 86400_000
        teams: dict[str, list[str]] = {}
        for member in await self.redis.zrangebyscore(keys.HOME_VIEWERS, since, "+inf"):
            team, _, user = _s(member).partition(":")
            teams.setdefault(team, []).append(user)
        return teams

    async def touch(self, team: str, users: list[str], interval: float) -> None:
        """These viewers' Homes must show a change: due now, or `interval` after their last
        publish (whichever is later)."""
        if not users:
            return
        ready, later = await self._touch(
            keys=[keys.HOME_DUE, keys.HOME_SHOWN],
            args=[time.time() * 1000, interval * 1000, *(person(team, u) for u in users)],
        )
        if _s(later):
            self.dues.add(float(_s(later)))
        if int(ready):
            self.woken.set()

    async def claim(self, limit: int) -> list[tuple[str, str]]:
        """Take up to `limit` people whose Home is due: (team, user)."""
        now = time.time() * 1000
        due = await self._claim(keys=[keys.HOME_DUE], args=[now, limit])
        if len(due) < limit:  # (all that was due then is taken)
            self.dues.looked(now)
        return [tuple(_s(m).split(":", 1)) for m in due]  # type: ignore[misc]

    async def again(self, team: str, user: str, delay: float) -> None:
        """Publishing failed: due again in `delay` seconds (unless due sooner)."""
        at = time.time() * 1000 + delay * 1000
        self.dues.add(at)
        await self.redis.zadd(keys.HOME_DUE, {person(team, user): at}, nx=True)

    async def shown(self, team: str, user: str) -> str:
        """The hash of the view last published for this person ('' if none)."""
        value = await self.redis.hget(keys.HOME_SHOWN, person(team, user))
        return _s(value).partition(" ")[2] if value is not None else ""

    async def published(self, team: str, user: str, digest: str) -> None:
        await self.redis.hset(
            keys.HOME_SHOWN, person(team, user), f"{time.time() * 1000:.0f} {digest}"
        )

    async def enterprise(self, team: str, user: str) -> str:
        value = await self.redis.hget(keys.HOME_ORGS, person(team, user))
        return _s(value) if value is not None else ""

    async def pending(self) -> int:
        return int(await self.redis.zcard(keys.HOME_DUE))
