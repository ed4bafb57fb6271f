"""Grants (#19, item 2): an "Always approve" that outlives its run, for one agent's tool in one
channel until a time the policy bounds (`grant_max`).

One hash per channel (`ab:grants:<team>:<channel>`): sticky key (agent-scoped tool identity) ->
the grant as JSON. A grant is written in the same pipeline as the decision's audit entry; it is
judged again against the policy in force each time it would settle a call, and dropped (a
compare-and-delete) when it no longer holds. The hash expires after its latest grant.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

import redis.asyncio as redis

from bot.store.keys import PREFIX

# Delete the grant only if it is still the one that was judged (a newer grant stays).
_DROP = """
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0
"""


def grants_key(team: str, channel: str) -> str:
    return f"{PREFIX}:grants:{team}:{channel}"


@dataclass(frozen=True)
class Grant:
    """Who let which agent's tool be approved in which channel, until when."""

    sticky: str
    """The agent-scoped tool identity (`CallRecord.sticky`)."""
    team: str
    user: str
    """The grantor: judged against the policy in force at each use."""
    channel: str
    made: float
    """When it was made (Unix seconds, the service's clock)."""
    until: float
    """When it ends (Unix seconds)."""
    approval_id: str
    """The call whose "Always approve" made it."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, raw: str) -> Grant:
        return cls(**json.loads(raw))


def grant_detail(grant: Grant) -> str:
    """A grant as its audit entries describe it."""
    until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(grant.until))
    return f"{grant.sticky} in {grant.channel} until {until} (grant of {grant.approval_id})"


def _s(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class GrantStore:
    """Reads, writes and drops grants."""

    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        self._drop = client.register_script(_DROP)

    @staticmethod
    def put_in(pipe: Any, grant: Grant) -> None:
        """Record `grant` through `pipe` (replacing an earlier one for the same tool)."""
        key = grants_key(grant.team, grant.channel)
        pipe.hset(key, grant.sticky, grant.to_json())
        pipe.expireat(key, int(grant.until) + 1, nx=True)
        pipe.expireat(key, int(grant.until) + 1, gt=True)

    async def get(self, team: str, channel: str, sticky: str) -> Grant | None:
        raw = await self.redis.hget(grants_key(team, channel), sticky)
        return None if raw is None else Grant.from_json(_s(raw))

    async def in_channel(self, team: str, channel: str) -> list[Grant]:
        raw = await self.redis.hgetall(grants_key(team, channel))
        return [Grant.from_json(_s(v)) for v in raw.values()]

    async def any_in(self, team: str, channel: str) -> bool:
        return bool(await self.redis.exists(grants_key(team, channel)))

    async def drop(self, grant: Grant) -> bool:
        """Forget `grant` if it is still the one recorded; True if it was."""
        dropped = await self._drop(
            keys=[grants_key(grant.team, grant.channel)], args=[grant.sticky, grant.to_json()]
        )
        return int(dropped) == 1
