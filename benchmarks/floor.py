"""The floor under a decision's cost on this machine: what no implementation of the bot can
spend less than, measured part by part (`make bench`; issue #17 item 5).

A decision, from the signed click to the run's output in Slack, needs at least:
- the SDK's own resume of the run (`RunState.from_string` + `approve` + `Runner.run`, and the
  streamed run the bot uses so that an answer can be shown as it is written);
- Bolt acknowledging the click (signature verification, parsing, dispatch: the bare app);
- three Web API calls through slack_sdk (the card's update, the output's post, the run
  message's update: the fewest that show the decision, the output and the run's state);
- the Redis round trips that carry the upstream guidance's guarantees, at the least:
  consuming the decision atomically, the job's take, the tool's journal entry before and
  after it runs, the run's end, the job's acknowledgement, and one owner-checked write per
  message shown (a card shown twice or an output posted twice otherwise): 9.

Each part is timed alone here, in processes of its own where it serves requests: CPU time,
user + system. Their sum is the floor of CPU per decision; the bot spends it and more. The
floor of 200 decisions at once on this machine's cores is that sum times 200, spread over
every core with nothing else running: the Redis server's and the Slack stand-in's work, and
the load generator's, come on top.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp
from agents import Runner, RunResult, RunResultStreaming, RunState, set_tracing_disabled

from benchmarks.bench_agents import deployer
from benchmarks.decisions import Process, bare_floor, cpu_seconds
from benchmarks.peers import TOKEN
from bot.slack.webapi import build_client
from bot.store.connection import EmbeddedRedis, connect

ROUND_TRIPS = 9  # the guarantees' round trips listed above
WEB_API_CALLS = 3
GOAL_CPU_MS = 8.0
GOAL_P99_S = 1.0


async def sdk_cpu(samples: int) -> tuple[float, float]:
    """ms of CPU for the SDK's own resume of the minimal run (medians): `Runner.run`, and the
    streamed run the bot uses; the two alternate, so that both see the same machine."""
    agent = deployer()
    cpu: dict[bool, list[float]] = {False: [], True: []}
    for i in range(2 * (samples + 10)):  # the first few of each warm up
        streamed = bool(i % 2)
        paused = await Runner.run(agent, f"deploy v{i}")
        stored = paused.to_state().to_string()
        started = time.process_time()
        state = await RunState.from_string(agent, stored)
        for item in state.get_interruptions():
            state.approve(item)
        result: RunResult | RunResultStreaming
        if streamed:
            result = Runner.run_streamed(agent, state)
            async for _ in result.stream_events():
                pass
        else:
            result = await Runner.run(agent, state)
        cpu[streamed].append((time.process_time() - started) * 1000)
        assert result.final_output == "done"
    return statistics.median(cpu[False][10:]), statistics.median(cpu[True][10:])


async def redis_cpu(url: str, samples: int) -> tuple[float, float]:
    """ms of CPU in this process per round trip with the bot's client (a GET; a one-key
    script), and in the redis-server per round trip (its /proc)."""
    client = connect(url, max_connections=8)
    script = client.register_script("return redis.call('GET', KEYS[1])")
    await client.set("floor:k", "v")
    await script(keys=["floor:k"])
    pid = int((await client.info("server"))["process_id"])
    server_before = cpu_seconds(pid)
    started = time.process_time()
    for _ in range(samples):
        await client.get("floor:k")
        await script(keys=["floor:k"])
    ours = (time.process_time() - started) * 1000 / (2 * samples)
    theirs = (cpu_seconds(pid) - server_before) * 1000 / (2 * samples)
    await client.aclose()
    return ours, theirs


async def web_api_cpu(api_url: str, standin_pid: int, samples: int) -> tuple[float, float]:
    """ms of CPU per `chat.postMessage` through slack_sdk on one pooled session, as the bot
    calls it: in this process, and in the stand-in answering it."""
    async with aiohttp.ClientSession() as session:
        client = build_client(TOKEN, api_url, session)
        for _ in range(10):
            await client.chat_postMessage(channel="C1", text="warm")
        theirs_before = cpu_seconds(standin_pid)
        started = time.process_time()
        for i in range(samples):
            await client.chat_postMessage(channel="C1", text=f"output {i}")
        ours = (time.process_time() - started) * 1000 / samples
        theirs = (cpu_seconds(standin_pid) - theirs_before) * 1000 / samples
    return ours, theirs


async def ack_cpu(api_url: str, clicks: int) -> float:
    """ms of CPU of the bare Bolt app per acknowledged click (one at a time)."""
    load = (await bare_floor(api_url, {1: clicks}))[1]
    assert load.lost == 0
    return load.cpu * 1000 / clicks


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=300)
    args = parser.parse_args()
    set_tracing_disabled(True)
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedRedis(Path(tmp) / "redis")
        await server.start()
        standin = Process(["-m", "benchmarks.peers", "standin"])
        try:
            api_url = await standin.first_line()
            sdk_run, sdk_streamed = await sdk_cpu(args.samples)
            rt_ours, rt_server = await redis_cpu(server.url, args.samples * 10)
            api_ours, api_standin = await web_api_cpu(api_url, standin.pid, args.samples)
            ack = await ack_cpu(api_url, args.samples)
        finally:
            await standin.stop()
            server.stop()
    cores = os.cpu_count() or 1
    bot = sdk_streamed + ack + WEB_API_CALLS * api_ours + ROUND_TRIPS * rt_ours
    others = WEB_API_CALLS * api_standin + ROUND_TRIPS * rt_server
    rows = [
        ("the SDK's resume, Runner.run (ms of CPU)", f"{sdk_run:.2f}", ""),
        ("the SDK's resume, streamed as the bot runs it", f"{sdk_streamed:.2f}", "1x"),
        ("Bolt's ack of a click (bare app)", f"{ack:.2f}", "1x"),
        ("a Web API call through slack_sdk (the stand-in's side)",
         f"{api_ours:.2f} ({api_standin:.2f})", f"{WEB_API_CALLS}x"),
        ("a Redis round trip through redis-py (the server's side)",
         f"{rt_ours:.3f} ({rt_server:.3f})", f"{ROUND_TRIPS}x"),
        ("floor of the bot's CPU per decision", f"{bot:.2f}", f"goal <= {GOAL_CPU_MS:g}"),
        ("  and of the stand-in's and Redis's CPU per decision", f"{others:.2f}", ""),
        (f"floor of 200 decisions at once on {cores} cores, the bot alone (s)",
         f"{200 * bot / 1000 / cores:.2f}", f"p99 goal <= {GOAL_P99_S:g}"),
        ("  with the stand-in's and Redis's share (s)",
         f"{200 * (bot + others) / 1000 / cores:.2f}", ""),
    ]  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    print("The floor under a decision (each part alone; `benchmarks/floor.py`):")
    for name, value, count in rows:
        print(f"  {name.ljust(widths[0])}  {value.rjust(widths[1])}  {count}".rstrip())


if __name__ == "__main__":
    asyncio.run(main())
