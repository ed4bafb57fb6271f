"""Many workspaces (OAuth distribution, #21, `make bench-more`): what serving them costs.

An embedded redis-server; the bot's own store, installation store and token lookup.

Figures:
- a Web API call's token: the lookup each call of the bot's own work makes
  (`WorkspaceTokens.bot_token`), from memory (the usual case: a copy is kept 30 s) and from
  Redis (one GET and a Fernet decryption);
- an uninstall: `forget_workspace` for one of two workspaces, each run paused on a call (its
  run, task, call, pause, snapshot and outbox keys), with the other workspace's runs
  around it: the time, the keys deleted, and that the other workspace's keys are all there.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import redis.asyncio as aioredis
from slack_sdk.oauth.installation_store.models.bot import Bot
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.api.serving import Team
from bot.slack.installs.tokens import WorkspaceTokens
from bot.store import keys
from bot.store.connection import EmbeddedRedis
from bot.store.installs.installations import RedisInstallationStore, TokenCipher
from bot.store.installs.workspaces import forget_workspace
from bot.store.records import CallRecord, RunRecord, RunStatus, Snapshot
from bot.store.runs import RunStore

LOOKUPS = 20_000
FROM_REDIS = 2_000
KEPT, GONE = 2_000, 500  # runs of the workspace that stays, of the one that leaves
TEAM_KEPT, TEAM_GONE = "T0KEPT", "T0GONE"


async def token_lookups(client: aioredis.Redis) -> tuple[float, float]:
    """Microseconds per lookup: from memory, from Redis."""
    store = RedisInstallationStore(client, TokenCipher([TokenCipher.new_key()]))
    await store.async_save_bot(
        Bot(bot_token="xoxb-1-secret", bot_id="B1", bot_user_id="UBOT", team_id=TEAM_KEPT,
            installed_at=time.time())
    )  # fmt: skip
    tokens = WorkspaceTokens(
        store, client_id="1.2", client_secret="s", client=AsyncWebClient(token=None)
    )
    team = Team(TEAM_KEPT)
    await tokens.bot_token(team)
    started = time.perf_counter()
    for _ in range(LOOKUPS):
        await tokens.bot_token(team)
    cached = (time.perf_counter() - started) / LOOKUPS * 1e6
    times = []
    for _ in range(FROM_REDIS):
        tokens.forget(TEAM_KEPT)
        began = time.perf_counter()
        await tokens.bot_token(team)
        times.append(time.perf_counter() - began)
    return cached, statistics.median(times) * 1e6


async def paused_runs(store: RunStore, team: str, count: int) -> None:
    stamp = time.time()
    for i in range(count):
        run = RunRecord(
            run_id=keys.new_run_id(), team_id=team, user_id=f"U{i % 40}", channel_id="C1",
            agent_name="ops", task=f"restart service {i}", status=RunStatus.RUNNING, owner=f"e{i}",
            message_ts="1.0", created_at=stamp, updated_at=stamp,
        )  # fmt: skip
        await store.create_run(run)
        await store.take(run.run_id, run.owner, f"1-{i}", run.owner + "/w")
        call = CallRecord(
            approval_id=keys.new_approval_id(run.run_id), run_id=run.run_id, index=0,
            call_id="c1", agent="ops", tool="restart_service", kind="function",
            sticky="ops::restart_service", arguments='{"service": "api"}',
        )  # fmt: skip
        snapshot = Snapshot(b"x" * 2000, "0", "f")
        await store.save_pause(run.run_id, run.owner + "/w", snapshot, [call], stamp)


async def keys_of(client: aioredis.Redis, team: str) -> int:
    """Keys under the hash tag of a run of `team`, and keys named by the team."""
    runs = set()
    async for key in client.scan_iter(match="ab:{*}:run", count=1000):
        if (await client.hget(key, "team_id")) == team.encode():
            runs.add(key.decode().split("{")[1].split("}")[0])
    found = 0
    async for key in client.scan_iter(match="ab:*", count=1000):
        name = key.decode()
        if f":{team}:" in name or any("{" + r + "}" in name for r in runs if r in name):
            found += 1
    return found


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        embedded = EmbeddedRedis(Path(tmp) / "redis")
        await embedded.start()
        client = aioredis.Redis.from_url(embedded.url)
        try:
            cached, from_redis = await token_lookups(client)
            print(f"token per Web API call: {cached:.1f} us from memory, "
                  f"{from_redis:.0f} us p50 from Redis (GET + decrypt; once per 30 s per "
                  f"workspace and process)")  # fmt: skip
            store = RunStore(client, retention_seconds=86400)
            await paused_runs(store, TEAM_KEPT, KEPT)
            await paused_runs(store, TEAM_GONE, GONE)
            total = await client.dbsize()
            kept_before = await keys_of(client, TEAM_KEPT)
            started = time.perf_counter()
            gone = await forget_workspace(client, TEAM_GONE)
            took = time.perf_counter() - started
            kept_after = await keys_of(client, TEAM_KEPT)
            print(
                f"uninstall: {GONE} paused runs of one workspace among {KEPT} of another "
                f"({total} keys): forgotten in {took * 1000:.0f} ms, {gone} keys and entries "
                f"deleted; the other's keys {kept_after} of {kept_before} kept, the "
                f"uninstalled one's {await keys_of(client, TEAM_GONE)} left"
            )
            if kept_after != kept_before:
                sys.exit("the other workspace lost keys")
        finally:
            await client.aclose()
            embedded.stop()


if __name__ == "__main__":
    asyncio.run(main())
