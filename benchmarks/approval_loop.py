"""Benchmarks of the approval loop, printed as figures (run: `make bench`).

- click -> resume latency: from sending a signed Approve click over HTTP to the resumed run's
  first model call (the scripted model notes the time), p50 / p99 over N runs;
- decision throughput: concurrent Approve clicks on distinct pending calls, decisions per second;
- storage: Redis bytes per paused run (run hash, snapshot, call record) and the snapshot's
  compression ratio;
- Slack Web API calls per completed decision (from the click to the run's end, all settled);
- pacing: the longest a card waits behind its channel's post pacing in a burst of 50 posts.

Runs are spread over channels (one each) except in the pacing figure: Slack allows about one
post per second per channel, and the bot paces itself to that.

Everything is real but the model (ScriptedModel) and Slack's Web API (the local stand-in).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from agents import Agent, function_tool, set_tracing_disabled
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from bot.engine.runner import unpack_state
from bot.slack.blocks import APPROVE
from bot.store import keys
from bot.store.connection import EmbeddedRedis
from bot.store.runs import decode_snapshot
from bot.store.trail.audit import AUDIT_STREAM
from bot.testing.harness import PRODUCTION_WINDOWS, BotHarness, wait_until
from bot.testing.slack_api import Message

CHANNELS = 200
POLICY = "channels:\n" + "".join(f"  C{i}:\n    approvers: [U2]\n" for i in range(CHANNELS))


def build_agent(resumed_at: dict[str, float], runs: int) -> Agent[Any]:
    @function_tool(needs_approval=True)
    def deploy(version: str) -> str:
        """Deploy a version."""
        return f"deployed {version}"

    def respond(call: Any) -> list[Any]:
        """Answers from the input alone, so runs may start and resume in any order."""
        items = call.input if isinstance(call.input, list) else [call.input]
        for item in items:
            data = item if isinstance(item, dict) else getattr(item, "model_dump", dict)()
            if data.get("type") == "function_call_output":
                resumed_at[str(data["call_id"])] = time.perf_counter()
                return [assistant_message("done")]
        task = str(items[0] if isinstance(items[0], str) else items[0].get("content"))
        version = task.split()[-1]
        return [function_call("deploy", {"version": version}, call_id=f"call-{version[1:]}")]

    model = ScriptedModel([ModelStep.respond(respond) for _ in range(2 * runs)])
    return Agent(name="deployer", model=model, tools=[deploy])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# One person starts every run of the benchmark: no start limits. The bot's windows and polls
# as in production (the test kit's are short).
UNLIMITED = {
    **PRODUCTION_WINDOWS,
    "user_start_burst": 0,
    "channel_start_burst": 0,
    "user_open_runs": 0,
    "channel_open_runs": 0,
}
# Figures about the bot itself: Slack's pacing (~1 post/s per channel, ~50 updates/min) off.
UNPACED = {
    **UNLIMITED,
    "slack_posts_per_second": 10_000.0,
    "slack_updates_per_minute": 600_000.0,
}


def live_cards(bot: BotHarness, channel: str) -> list[Message]:
    return [m for m in bot.slack_api.approval_messages() if m.action_ids() and m.channel == channel]


async def pending(bot: BotHarness, count: int) -> list[Message]:
    return await bot.wait_for_approvals(count, timeout=120)


async def latency(redis_url: str, runs: int) -> None:
    resumed_at: dict[str, float] = {}
    async with BotHarness(
        redis_url, build_agent(resumed_at, runs), POLICY, settings=UNPACED
    ) as bot:
        samples = []
        for i in range(runs):
            channel = f"C{i % CHANNELS}"
            await bot.slack.command(f"deploy v{i}", user="U1", channel=channel)
            [message] = await wait_until(lambda ch=channel: live_cards(bot, ch), timeout=30)  # type: ignore[misc]
            started = time.perf_counter()
            await bot.click(message, APPROVE, user="U2")
            call_id = f"call-{i}"
            await wait_until(lambda cid=call_id: cid in resumed_at, timeout=30)  # type: ignore[misc]
            samples.append((resumed_at[call_id] - started) * 1000)
        await bot.idle()
    print(f"click -> resumed model call, {runs} runs (ms):")
    print(
        f"  p50 {statistics.median(samples):.2f}  p99 {percentile(samples, 0.99):.2f}  "
        f"min {min(samples):.2f}  max {max(samples):.2f}"
    )


async def throughput(redis_url: str, runs: int) -> None:
    resumed_at: dict[str, float] = {}
    async with BotHarness(
        redis_url, build_agent(resumed_at, runs), POLICY, settings=UNPACED
    ) as bot:
        for i in range(runs):
            await bot.slack.command(f"deploy v{i}", user="U1", channel=f"C{i % CHANNELS}")
        messages = await pending(bot, runs)
        await bot.idle()
        started = time.perf_counter()
        responses = await asyncio.gather(*(bot.click(m, APPROVE, user="U2") for m in messages))
        acked = time.perf_counter() - started
        await wait_until(lambda: len(resumed_at) == runs, timeout=120)
        finished = time.perf_counter() - started
        await bot.idle()
        assert {r.status for r in responses} == {200}
    print(f"{runs} concurrent Approve clicks on distinct calls:")
    print(
        f"  all acknowledged in {acked * 1000:.0f} ms ({runs / acked:.0f} decisions/s); "
        f"all {runs} runs resumed in {finished * 1000:.0f} ms ({runs / finished:.0f} resumes/s)"
    )


PROSE = (
    "please check the nightly backup of the billing database on db-7 and if the restore "
    "test from yesterday failed again rotate the credentials then open an incident with "
    "the storage team and summarise what you changed for the on call engineer"
)


def prose(chars: int) -> str:
    """Realistic task text (it compresses like language does, not like repeated letters)."""
    words = PROSE.split()
    out: list[str] = []
    i = 0
    while sum(len(w) + 1 for w in out) < chars:
        out.append(f"{words[i % len(words)]}{i // len(words) if i % 7 == 0 else ''}")
        i += 1
    return " ".join(out)[:chars]


async def storage(redis_url: str, task_chars: int = 0) -> None:
    """Redis bytes for one paused run (every key of the run) and the audit entries it added."""
    resumed_at: dict[str, float] = {}
    settings = {"max_task_chars": 0}
    async with BotHarness(redis_url, build_agent(resumed_at, 1), POLICY, settings=settings) as bot:
        client = aioredis.Redis.from_url(redis_url)
        task = (prose(task_chars) + " ") if task_chars else ""
        await bot.slack.command(task + "deploy v0", user="U1", channel="C0")
        [message] = await pending(bot, 1)
        await bot.idle()
        approval_id = message.button_value(APPROVE)
        run_id = keys.run_of(approval_id)
        assert run_id is not None
        sizes: dict[str, int] = {}
        async for key in client.scan_iter(match=f"ab:{{{run_id}}}*"):
            name = key.decode().split("}:", 1)[1].split(":")[0]
            sizes[name] = sizes.get(name, 0) + (await client.memory_usage(key, samples=0) or 0)
        entries: list[Any] = await client.xrange(AUDIT_STREAM) or []
        audit = sum(
            sum(len(k) + len(v) for k, v in fields.items())
            for _, fields in entries
            if fields.get(b"run_id") == run_id.encode()
        )
        stored = await client.get(keys.state_key(run_id))
        blob = decode_snapshot(stored).state if isinstance(stored, bytes) else None
        await client.aclose()
    assert isinstance(blob, bytes)
    raw = unpack_state(blob)
    total = sum(sizes.values())
    what = f"a {task_chars:,}-character task" if task_chars else "a minimal task"
    print(f"Redis memory for one paused run with one pending call, {what} (bytes):")
    print("  " + "  ".join(f"{k} {v}" for k, v in sorted(sizes.items())) + f"  total {total}")
    print(f"  audit entries of the run so far: {audit} bytes of fields and values")
    print(f"  snapshot {len(raw)} B of JSON stored as {len(blob)} B ({len(raw) / len(blob):.1f}x)")


async def cost(redis_url: str, runs: int) -> None:
    """Web API calls from an Approve click until the run finished and Slack shows it all."""
    resumed_at: dict[str, float] = {}
    counts: list[int] = []
    methods: dict[str, int] = {}
    async with BotHarness(
        redis_url, build_agent(resumed_at, runs), POLICY, settings=UNPACED
    ) as bot:
        for i in range(runs):
            channel = f"C{i % CHANNELS}"
            await bot.slack.command(f"deploy v{i}", user="U1", channel=channel)
            [message] = [m for m in await pending(bot, 1) if m.channel == channel]
            before = len(bot.slack_api.calls)
            await bot.click(message, APPROVE, user="U2")
            await wait_until(lambda cid=f"call-{i}": cid in resumed_at, timeout=30)  # type: ignore[misc]
            await bot.idle()
            made = bot.slack_api.calls[before:]
            counts.append(len(made))
            for call in made:
                methods[call.method] = methods.get(call.method, 0) + 1
    print(f"Slack Web API calls per completed decision ({runs} runs; goal <= 3):")
    print(
        f"  mean {statistics.mean(counts):.2f}  max {max(counts)}  ("
        + ", ".join(f"{m} {n / runs:.1f}" for m, n in sorted(methods.items()))
        + ")"
    )


async def pacing(redis_url: str, posts: int) -> None:
    """`posts` chat.postMessage calls at once in one channel (a run message and a card per
    run): how long the last card waits behind the channel's pacing (≈1/s after a burst)."""
    resumed_at: dict[str, float] = {}
    runs = posts // 2
    async with BotHarness(
        redis_url, build_agent(resumed_at, runs), POLICY, settings=UNLIMITED
    ) as bot:
        started = time.perf_counter()
        await asyncio.gather(
            *(bot.slack.command(f"deploy v{i}", user="U1", channel="C0") for i in range(runs))
        )
        await pending(bot, runs)
        elapsed = time.perf_counter() - started
        waited = bot.runtime.projector.posts.longest_wait
        retried = len(bot.slack_api.calls_to("chat.postMessage")) - posts
    print(f"a burst of {posts} posts in one channel ({runs} runs):")
    print(
        f"  longest wait behind pacing {waited:.1f} s; all {runs} cards shown after "
        f"{elapsed:.1f} s; posts beyond the {posts} needed: {retried}"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--storage-only", action="store_true", help="only the storage figures")
    args = parser.parse_args()
    set_tracing_disabled(True)
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedRedis(Path(tmp))
        await server.start()
        try:
            if not args.storage_only:
                await latency(server.url, min(args.runs, 200))
                client = aioredis.Redis.from_url(server.url)
                await client.flushall()
                await throughput(server.url, args.runs)
                await client.flushall()
                await cost(server.url, 20)
                await client.flushall()
                await pacing(server.url, 50)
                await client.flushall()
                await client.aclose()
            await storage(server.url)
            await storage(server.url, 40_000)
        finally:
            server.stop()


if __name__ == "__main__":
    asyncio.run(main())
