"""Grants (#19, item 2): an "Always approve" that outlives its run, for one agent's tool in one
channel until a time the policy bounds (`grant_max`), optionally narrowed to the values some of
the call's arguments had (`narrow`: a later call is covered only when its arguments have them).

One hash per channel (`ab:grants:<team>:<channel>`): the grant's field (its sticky key, the
agent-scoped tool identity, and for a narrowed grant a digest of its narrowing) -> the grant as
JSON. Each grant also has an opaque id (the App Home's Revoke button carries only it) and a
small key from that id to its channel and field (`ab:grant:<id>`), expiring with the grant. A
grant is written in the same pipeline as the decision's audit entry; it is judged again against
the policy in force each time it would settle a call, and dropped (a compare-and-delete) when it
no longer holds. The hash expires after its latest grant.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
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


def grant_id_key(grant_id: str) -> str:
    return f"{PREFIX}:grant:{grant_id}"


def new_grant_id() -> str:
    """An opaque id, as hard to guess as an approval id (96 random bits)."""
    return secrets.token_urlsafe(12)


def canonical(value: Any) -> str:
    """The JSON text two argument values are compared by (key order and spacing ignored)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Grant:
    """Who let which agent's tool be approved in which channel, until when, for which values."""

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
    narrow: dict[str, Any] = field(default_factory=dict)
    """Top-level argument name -> the value a covered call must have (canonical JSON equal);
    empty: every call of the tool."""
    grant_id: str = ""
    """The opaque id the App Home's Revoke button carries (empty: a grant made before ids)."""
    tool: str = ""
    """The tool's name, for display (the sticky key is what is matched)."""

    @property
    def slot(self) -> str:
        """Its field in the channel's hash: one grant per tool and narrowing."""
        if not self.narrow:
            return self.sticky
        return f"{self.sticky}|{hashlib.sha256(canonical(self.narrow).encode()).hexdigest()[:16]}"

    def covers(self, subject: Mapping[str, Any]) -> bool:
        """Whether a call whose conditions' subject is `subject` (`conditions.subject_of`) has
        every narrowed argument with the granted value. Unreadable arguments: not covered."""
        if not self.narrow:
            return True
        args = subject.get("args")
        if not isinstance(args, dict):
            return False
        return all(
            name in args and canonical(args[name]) == canonical(value)
            for name, value in self.narrow.items()
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, raw: str) -> Grant:
        data = json.loads(raw)
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def grant_detail(grant: Grant) -> str:
    """A grant as its audit entries describe it: the arguments it is narrowed to by name, their
    values apart (`grant_values`: argument values are free text)."""
    until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(grant.until))
    where = "".join(f" where {name}" for name in sorted(grant.narrow))
    ident = f", id {grant.grant_id}" if grant.grant_id else ""
    return (
        f"{grant.sticky}{where} in {grant.channel} until {until} "
        f"(grant of {grant.approval_id}{ident})"
    )


def grant_values(grant: Grant) -> str:
    """The values a grant is narrowed to, as its audit entries keep them (`name=value`)."""
    return " ".join(f"{name}={canonical(v)}" for name, v in sorted(grant.narrow.items()))


def _s(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _grants(raw: Mapping[Any, Any]) -> list[Grant]:
    found = []
    for value in raw.values():
        try:
            found.append(Grant.from_json(_s(value)))
        except (ValueError, TypeError):
            continue  # a record this version cannot read grants nothing
    return found


class GrantStore:
    """Reads, writes and drops grants."""

    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        self._drop = client.register_script(_DROP)

    @staticmethod
    def put_in(pipe: Any, grant: Grant) -> None:
        """Record `grant` through `pipe` (replacing an earlier one for the same tool and
        narrowing)."""
        key = grants_key(grant.team, grant.channel)
        pipe.hset(key, grant.slot, grant.to_json())
        pipe.expireat(key, int(grant.until) + 1, nx=True)
        pipe.expireat(key, int(grant.until) + 1, gt=True)
        if grant.grant_id:
            where = json.dumps({"team": grant.team, "channel": grant.channel, "slot": grant.slot})
            pipe.set(grant_id_key(grant.grant_id), where, exat=int(grant.until) + 1)

    async def for_tool(self, team: str, channel: str, sticky: str) -> list[Grant]:
        """The channel's grants for one agent's tool (each narrowing is a grant of its own)."""
        return [g for g in await self.in_channel(team, channel) if g.sticky == sticky]

    async def in_channel(self, team: str, channel: str) -> list[Grant]:
        return _grants(await self.redis.hgetall(grants_key(team, channel)))

    async def in_channels(self, team: str, channels: Sequence[str]) -> list[Grant]:
        """The grants of several channels, in one round trip."""
        if not channels:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for channel in channels:
                pipe.hgetall(grants_key(team, channel))
            replies = await pipe.execute()
        return [g for raw in replies for g in _grants(raw or {})]

    async def by_id(self, grant_id: str) -> Grant | None:
        """The grant an opaque id names (None: unknown, expired or revoked)."""
        if not grant_id or len(grant_id) > 64:
            return None
        raw = await self.redis.get(grant_id_key(grant_id))
        if raw is None:
            return None
        try:
            where = json.loads(_s(raw))
            key = grants_key(where["team"], where["channel"])
            value = await self.redis.hget(key, where["slot"])
        except (ValueError, KeyError, TypeError):
            return None
        if value is None:
            return None
        grant = Grant.from_json(_s(value))
        return grant if grant.grant_id == grant_id else None

    async def any_in(self, team: str, channel: str) -> bool:
        return bool(await self.redis.exists(grants_key(team, channel)))

    async def drop(self, grant: Grant) -> bool:
        """Forget `grant` if it is still the one recorded; True if it was."""
        dropped = await self._drop(
            keys=[grants_key(grant.team, grant.channel)], args=[grant.slot, grant.to_json()]
        )
        if int(dropped) == 1 and grant.grant_id:
            await self.redis.delete(grant_id_key(grant.grant_id))
        return int(dropped) == 1
