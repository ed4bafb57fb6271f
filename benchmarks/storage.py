"""Redis memory per paused run (issues #9, #17), as figures: `python benchmarks/storage.py`.

Two runs pause through the real bot (signed requests, the Slack stand-in) on one pending call:
a minimal one (a short task, short arguments) and a realistic one (a 150-character task,
100 characters of arguments). For each: MEMORY USAGE of every key of the run (its `{run id}`
keys and the message map entry of its card) and how many keys that is.

Then the budget of issue #17 (a paused run costs at most its task's length + 2 KB): `RUNS`
runs pause with a short task and `RUNS` with a 3,900-character one, each on a Redis with
default settings (`DefaultRedis`) and on one with the embedded server's listpack settings.
Two figures per paused run:
- the run's keys: MEMORY USAGE of its `{run id}` keys and its card's message map entry (the
  issue's accounting; the budget applies to it) / runs;
- every key: MEMORY USAGE of every key in the database (the audit stream, the shared indexes,
  the delivery ids kept an hour, the job stream, ... included) / runs; and what each kind of
  key costs of it.

`paused_run_bytes(redis_url)` and `paused_runs_figures(redis_url, task)` return the figures for
another benchmark (or a test) to print; they flush nothing, so give them a Redis of their own.
Without an argument, embedded redis-servers are started (`bot.store.connection.EmbeddedRedis`).
"""

from __future__ import annotations

import asyncio
import random
import re
import string
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from agents import set_tracing_disabled

from bot.slack.blocks import APPROVE
from bot.store import keys
from bot.store.connection import LISTPACK_SETTINGS, EmbeddedRedis
from bot.testing.harness import BotHarness
from bot.testing.slack_api import Message

TASK_150 = (
    "Free disk space on web-3: the app logs under /var/log/app have grown past 40 GB since the "
    "last rotation failed; keep today's files and the audit logs."
)[:150]
PATH_100 = (
    "/var/log/app/archive/2026-11-*/web-3.internal.example.com/requests-*.log.gz --older-than "
    "7d --keep-audit"
)[:100]
POLICY = """
channels:
  C1:
    approvers: [U2]
"""
CASES = {"minimal": ("clean", "/tmp"), "realistic": (TASK_150, PATH_100)}
RUNS = 20  # runs paused for bytes per paused run
BUDGET = 2048  # bytes per paused run beyond its task's length (issue #17)


def prose(chars: int, seed: int = 7) -> str:
    """Text that compresses like prose does (not like a repeated phrase)."""
    rnd = random.Random(seed)
    words = (
        "".join(rnd.choice(string.ascii_lowercase) for _ in range(rnd.randint(2, 9)))
        for _ in range(chars // 3)
    )
    return " ".join(words)[:chars]


TASK_3900 = prose(3900)


class DefaultRedis(EmbeddedRedis):
    """The embedded server without the bot's listpack settings: Redis's defaults (a hash with a
    value over 64 bytes is a hashtable), as a managed Redis may run."""

    def command(self) -> list[str]:
        parts = super().command()
        at = parts.index(LISTPACK_SETTINGS[0])
        return parts[:at] + parts[at + len(LISTPACK_SETTINGS) :]


UNLIMITED = {
    "user_start_burst": 0, "channel_start_burst": 0, "user_open_runs": 0,
    "channel_open_runs": 0, "slack_posts_per_second": 1000.0,
}  # fmt: skip


def paused_runs_bot(redis_url: str, runs: int) -> BotHarness:
    """The bot with `runs` agents `a0`..., each calling `delete_logs` (100 characters of
    arguments, needs approval) once, then answering: one paused run each, no start limits."""
    from tests.agents_for_tests import Ledger, assistant_message, function_call, ops_agent

    set_tracing_disabled(True)
    steps = [
        [
            [function_call("delete_logs", {"path": PATH_100}, call_id="c1")],
            [assistant_message("ok")],
        ]
        for _ in range(runs)
    ]
    agents = {f"a{i}": ops_agent(s, Ledger(), name=f"a{i}")[0] for i, s in enumerate(steps)}
    return BotHarness(redis_url, agents, POLICY, settings=UNLIMITED)


def key_kind(name: str) -> str:
    """A key's name with its run id, approval token, message ts and delivery id generalized."""
    name = re.sub(r"\{[0-9a-f]{16}\}", "{run}", name)
    name = re.sub(r":call:[A-Za-z0-9_-]{16}", ":call:<token>", name)
    name = re.sub(r"^ab:msg:([^:]+):[0-9.]+$", r"ab:msg:\1:<ts>", name)
    return re.sub(r"^ab:seen:(\w+):.*$", r"ab:seen:\1:<id>", name)


async def paused_runs_figures(redis_url: str, task: str, runs: int = RUNS) -> dict[str, Any]:
    """`runs` runs of `task` (each a call with 100 characters of arguments) paused through the
    bot, in an empty Redis, per run: {"run_keys": bytes of the run's keys (its `{run id}` keys
    and its card's message map entry), "all_keys": bytes of every key of the database,
    "by_kind": {key kind: bytes}}."""
    async with paused_runs_bot(redis_url, runs) as bot:
        for i in range(runs):
            await bot.slack.command(f"run a{i} {task}", user="U1", channel="C1")
        await bot.wait_for_approvals(runs, timeout=60)
        await bot.idle()
        client = aioredis.Redis.from_url(redis_url)
        by_kind: dict[str, int] = {}
        own = 0
        try:
            async for key in client.scan_iter(count=1000):
                size = int(await client.memory_usage(key, samples=0) or 0)
                kind = key_kind(key.decode())
                by_kind[kind] = by_kind.get(kind, 0) + size
                if kind.startswith(("ab:{run}:", "ab:msg:")):
                    own += size
        finally:
            await client.aclose()
    return {
        "run_keys": own / runs,
        "all_keys": sum(by_kind.values()) / runs,
        "by_kind": {kind: size / runs for kind, size in by_kind.items()},
    }


CASES_3900 = (("short task", "clean"), ("3,900-char task", TASK_3900))


async def budget_figures() -> dict[str, dict[str, dict[str, Any]]]:
    """{settings: {case: paused_runs_figures}} for default and listpack Redis settings."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name, server_class in (("default", DefaultRedis), ("listpack", EmbeddedRedis)):
        out[name] = {}
        for case, task in CASES_3900:
            with tempfile.TemporaryDirectory() as tmp:
                server = server_class(Path(tmp))
                await server.start()
                try:
                    out[name][case] = await paused_runs_figures(server.url, task)
                finally:
                    server.stop()
    return out


def budget_report(figures: dict[str, dict[str, dict[str, Any]]]) -> str:
    lines = [f"Bytes per paused run ({RUNS} runs; budget: task length + {BUDGET} B, "
             "for the run's keys):"]  # fmt: skip
    for settings, cases in figures.items():
        for case, data in cases.items():
            task = len(TASK_3900) if case.startswith("3,900") else len("clean")
            lines.append(
                f"  {settings} Redis settings, {case}: run's keys {data['run_keys']:,.0f} B "
                f"(budget {task + BUDGET:,} B), every key {data['all_keys']:,.0f} B"
            )
    for case, data in figures["default"].items():
        parts = ", ".join(
            f"{kind} {size:,.0f}"
            for kind, size in sorted(data["by_kind"].items(), key=lambda item: -item[1])
        )
        lines.append(f"  every key, default settings, {case}: {parts}")
    return "\n".join(lines)


async def run_bytes(client: aioredis.Redis, card: Message) -> dict[str, Any]:
    """Every key of the paused run of `card`: {"bytes", "keys", "by_key"}."""
    approval_id = card.button_value(APPROVE)
    run_id = keys.run_of(approval_id)
    assert run_id is not None
    found = [key async for key in client.scan_iter(match=f"ab:{{{run_id}}}*")]
    found.append(keys.message_key(card.channel, card.ts).encode())
    by_key: dict[str, int] = {}
    for key in found:
        size = await client.memory_usage(key, samples=0)
        if size is not None:
            name = key.decode().replace(run_id, "<run>").replace(approval_id, "<approval>")
            by_key[name.replace(card.ts, "<ts>")] = int(size)
    return {"bytes": sum(by_key.values()), "keys": len(by_key), "by_key": by_key}


async def paused_run_bytes(redis_url: str) -> dict[str, dict[str, Any]]:
    """{"minimal": {...}, "realistic": {...}}: bytes and keys of one paused run of each."""
    from tests.agents_for_tests import Ledger, assistant_message, function_call, ops_agent

    set_tracing_disabled(True)
    figures: dict[str, dict[str, Any]] = {}
    for case, (task, path) in CASES.items():
        steps = [[function_call("delete_logs", {"path": path}, call_id="c1")]]
        agent, _ = ops_agent([*steps, [assistant_message("done")]], Ledger())
        async with BotHarness(redis_url, agent, POLICY) as bot:
            card = await bot.start_and_wait(task, user="U1")
            await bot.idle()
            client = aioredis.Redis.from_url(redis_url)
            try:
                figures[case] = await run_bytes(client, card)
            finally:
                await client.aclose()
    return figures


class _Trips:
    """Counts round trips to Redis (one per command or pipeline sent) and the time spent in
    sending and reading replies, over every connection of the process."""

    def __init__(self) -> None:
        self.trips = 0
        self.seconds = 0.0
        self._saved: tuple[Any, Any] | None = None

    def __enter__(self) -> _Trips:
        from redis.asyncio.connection import AbstractConnection

        send, read = AbstractConnection.send_packed_command, AbstractConnection.read_response
        self._saved = (send, read)
        counter = self

        async def counted_send(conn: Any, *args: Any, **kwargs: Any) -> Any:
            counter.trips += 1
            started = time.perf_counter()
            try:
                return await send(conn, *args, **kwargs)
            finally:
                counter.seconds += time.perf_counter() - started

        async def timed_read(conn: Any, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await read(conn, *args, **kwargs)
            finally:
                counter.seconds += time.perf_counter() - started

        AbstractConnection.send_packed_command = counted_send  # type: ignore[method-assign,assignment]
        AbstractConnection.read_response = timed_read  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        from redis.asyncio.connection import AbstractConnection

        assert self._saved is not None
        send, read = self._saved
        AbstractConnection.send_packed_command = send  # type: ignore[method-assign,assignment]
        AbstractConnection.read_response = read  # type: ignore[method-assign,assignment]


async def click_trips(redis_url: str, clicks: int = 20) -> dict[str, float]:
    """Round trips to Redis and time spent in Redis calls by one Approve click, from the signed
    request to its HTTP response (workers and projector stopped, so only the click counts):
    {"trips", "store_ms", "click_ms"}, means over `clicks` clicks on distinct pending calls.
    The time in Redis calls includes redis-py's reply parsing (hiredis, when installed)."""
    async with paused_runs_bot(redis_url, clicks) as bot:
        for i in range(clicks):
            await bot.slack.command(f"run a{i} {TASK_150}", user="U1", channel="C1")
        cards = await bot.wait_for_approvals(clicks, timeout=60)
        runtime = bot.runtime
        if runtime.worker is not None:
            await runtime.worker.stop(runtime._worker_task, 5)
        await runtime.projector.stop(5)
        trips, store, total = 0, 0.0, 0.0
        for card in cards:
            with _Trips() as counted:
                started = time.perf_counter()
                sent = await bot.click(card, APPROVE, user="U2")
                total += time.perf_counter() - started
            assert sent.status == 200, sent
            trips += counted.trips
            store += counted.seconds
    return {
        "trips": trips / clicks,
        "store_ms": store / clicks * 1000,
        "click_ms": total / clicks * 1000,
    }


def report(figures: dict[str, dict[str, Any]]) -> str:
    lines = ["Redis memory per paused run with one pending call (MEMORY USAGE, bytes):"]
    for case, data in figures.items():
        parts = "  ".join(f"{k.split(':', 2)[-1]} {v}" for k, v in sorted(data["by_key"].items()))
        lines.append(f"  {case}: {data['bytes']} B in {data['keys']} keys ({parts})")
    return "\n".join(lines)


async def parser_figures(redis_url: str, reads: int = 2000) -> dict[str, float]:
    """Microseconds per read of what a click reads (a call and its run, one pipeline), with
    redis-py's pure-Python reply parser and with hiredis (when installed), interleaved so that
    both see the same machine load: {"python_us", "hiredis_us"} (hiredis_us absent without
    it). Needs one paused run in `redis_url` (run `paused_run_bytes` first)."""
    from redis._parsers import _AsyncRESP2Parser
    from redis.utils import HIREDIS_AVAILABLE

    from bot.store.runs import RunStore

    probe = aioredis.Redis.from_url(redis_url)
    try:
        found = [key async for key in probe.scan_iter(match="ab:{*}:call:*")]
    finally:
        await probe.aclose()
    name = found[0].decode()
    approval_id = name.split("{", 1)[1].split("}", 1)[0] + "." + name.rsplit(":", 1)[1]
    parsers: dict[str, Any] = {"python_us": _AsyncRESP2Parser}
    if HIREDIS_AVAILABLE:
        from redis._parsers import _AsyncHiredisParser

        parsers["hiredis_us"] = _AsyncHiredisParser
    spent = dict.fromkeys(parsers, 0.0)
    for _ in range(5):
        for label, parser in parsers.items():
            client = aioredis.Redis.from_url(redis_url, parser_class=parser)
            store = RunStore(client, retention_seconds=3600)
            try:
                await store.call_and_run(approval_id)  # connected
                started = time.perf_counter()
                for _ in range(reads // 5):
                    await store.call_and_run(approval_id)
                spent[label] += time.perf_counter() - started
            finally:
                await client.aclose()
    return {label: seconds / reads * 1e6 for label, seconds in spent.items()}


def click_report(figures: dict[str, float]) -> str:
    from redis.utils import HIREDIS_AVAILABLE

    parser = "hiredis" if HIREDIS_AVAILABLE else "pure-Python parser"
    return (
        f"One Approve click (mean, until its HTTP response; {parser}): "
        f"{figures['trips']:.1f} Redis round trips, {figures['store_ms']:.2f} ms in Redis calls, "
        f"{figures['click_ms']:.1f} ms in all"
    )


async def figures(url: str) -> None:
    print(report(await paused_run_bytes(url)))
    parse = await parser_figures(url)
    print(
        "Reading a call and its run (one pipeline), us per read: "
        + ", ".join(f"{k.removesuffix('_us')} {v:.0f}" for k, v in parse.items())
    )
    await aioredis.Redis.from_url(url).flushall()
    print(click_report(await click_trips(url)))


async def main(url: str | None) -> None:
    print(budget_report(await budget_figures()))
    if url:
        await figures(url)
        return
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedRedis(Path(tmp))
        await server.start()
        try:
            await figures(server.url)
        finally:
            server.stop()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for tests.agents_for_tests
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else None))
