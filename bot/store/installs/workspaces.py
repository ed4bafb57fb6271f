"""Forgetting a workspace: when Slack says the app was uninstalled (or its bot token revoked),
everything the bot keeps about that team goes, and nothing of any other team.

A workspace's data is (1) its runs, every key under a run's hash tag `{<run id>}` (run, task,
calls, snapshots, journal, outbox, turns...), the runs found by their `team_id`; (2) the keys
named by the team (`...:<team>:...`: quotas, lists, a person's runs, grants); (3) the entries
of its runs and people in the shared indexes (App Home, due runs, timers, message index) and
in the audit stream. It is found by scanning the keyspace twice (SCAN, in pages; every node of
a cluster): an uninstall is rare, and scanning costs the hot path nothing, where an index per
team would be one more write on every run's start.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from typing import Any

import redis.asyncio as redis

from bot.store import keys
from bot.store.keys import PREFIX
from bot.store.trail.audit import AUDIT_STREAM

log = logging.getLogger(__name__)

PAGE = 500
RUN_TAG = re.compile(r"\{([0-9a-f]{16})\}")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def _keys(client: redis.Redis, match: str) -> AsyncIterator[list[str]]:
    """The keys matching `match`, in pages of at most PAGE."""
    page: list[str] = []
    async for key in client.scan_iter(match=match, count=PAGE):
        page.append(_text(key))
        if len(page) >= PAGE:
            yield page
            page = []
    if page:
        yield page


async def _team_runs(client: redis.Redis, team_id: str) -> set[str]:
    found: set[str] = set()
    async for page in _keys(client, f"{PREFIX}:{{*}}:run"):
        async with client.pipeline(transaction=False) as pipe:
            for key in page:
                pipe.hget(key, "team_id")
            teams = await pipe.execute()
        for key, team in zip(page, teams, strict=True):
            match = RUN_TAG.search(key)
            if match and team is not None and _text(team) == team_id:
                found.add(match.group(1))
    return found


async def forget_workspace(client: redis.Redis, team_id: str) -> int:
    """Delete what the bot keeps about `team_id` (see the module docstring); how many keys
    and index entries went. Safe to repeat (a retried event finds less each time)."""
    runs = await _team_runs(client, team_id)
    named = f":{team_id}:"
    gone = 0
    async for page in _keys(client, f"{PREFIX}:*"):
        doomed = [
            key
            for key in page
            if named in key or ((m := RUN_TAG.search(key)) is not None and m.group(1) in runs)
        ]
        messages = [key for key in page if key.startswith(f"{PREFIX}:msg:")]
        if messages:  # the message index: channel/ts -> a run or approval id
            targets = await _values(client, messages)
            doomed += [
                key
                for key, target in zip(messages, targets, strict=True)
                if target is not None and _text(target).partition(".")[0] in runs
            ]
        if doomed:
            async with client.pipeline(transaction=False) as pipe:
                for key in doomed:
                    pipe.unlink(key)
                gone += sum(int(n) for n in await pipe.execute())
    gone += await _indexes(client, team_id, runs)
    gone += await _audit(client, team_id)
    log.info("forgot workspace %s: %d runs, %d keys and entries", team_id, len(runs), gone)
    return gone


async def _values(client: redis.Redis, names: list[str]) -> list[Any]:
    async with client.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.get(name)
        return list(await pipe.execute())


async def _indexes(client: redis.Redis, team_id: str, runs: set[str]) -> int:
    """The team's runs and people in the indexes every team shares."""
    people: list[str] = [
        _text(field)
        for field in await client.hkeys(keys.HOME_VIEWERS)  # type: ignore[misc]
        if _text(field).startswith(f"{team_id}:")
    ]
    async with client.pipeline(transaction=False) as pipe:
        if people:
            pipe.hdel(keys.HOME_VIEWERS, *people)
            pipe.zrem(keys.HOME_DUE, *people)
            pipe.hdel(keys.HOME_SHOWN, *people)
            pipe.hdel(keys.HOME_ORGS, *people)
        if runs:
            members = sorted(runs)
            pipe.srem(keys.EXECUTING_RUNS, *members)
            pipe.zrem(keys.DUE_RUNS, *members)
            pipe.zrem(keys.OUTBOX_INDEX, *members)
            pipe.hdel(keys.OUTBOX_LEASES, *members)
        counts = await pipe.execute() if people or runs else []
    timers = [
        _text(member)
        for member in await client.zrange(keys.TIMERS, 0, -1)
        if _text(member).partition(".")[0] in runs
    ]
    if timers:
        counts.append(await client.zrem(keys.TIMERS, *timers))
    return sum(int(n) for n in counts)


async def _audit(client: redis.Redis, team_id: str) -> int:
    """The team's entries of the audit stream (already delivered to a webhook, if one is set)."""
    gone, start = 0, "-"
    while True:
        entries: Any = await client.xrange(AUDIT_STREAM, min=start, count=PAGE)
        if not entries:
            return gone
        ids = [
            entry_id
            for entry_id, fields in entries
            if _text(fields.get(b"team", fields.get("team", b""))) == team_id
        ]
        if ids:
            gone += int(await client.xdel(AUDIT_STREAM, *ids))
        start = "(" + _text(entries[-1][0])
