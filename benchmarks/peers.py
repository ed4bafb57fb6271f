"""The processes the decision benchmark talks to, each in a process of its own so that the bot's
CPU is its own and the load generator's loop is not the one serving them.

    python -m benchmarks.peers standin            # the Slack Web API stand-in; prints its URL
    python -m benchmarks.peers standin SCALE      # ... enforcing Slack's limits, SCALE times
    python -m benchmarks.peers bare PORT API_URL  # a bare Bolt app that only acks clicks
    python -m benchmarks.peers floorpath PORT API_URL REDIS_URL  # the floor's decision path

The stand-in answers one extra method, `bench.result` (`run_id`): it returns, once the run's
final output has been posted, when that post arrived (`time.monotonic()`, which every process
of the machine shares); `bench.results`, that of every run so far; `bench.outputs` (`count`,
`timeout`), once that many runs have their final output (or the timeout passed), how many
have (`outputs` in `bench.state`: so far); `bench.state` returns the
cards posted (approval id -> run id) and the number of `chat.postMessage` and `chat.update`
calls per run, the number of calls by method (`methods`; the requester's notices: `notices`),
and how many connections the bot opened so far; with Slack's limits enforced, the 429s it
answered (`limited`, and when: `limited_at`) and when each card was last updated
(`cards_updated`: approval id -> monotonic time).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import re
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from bot.listening import SHARED_BACKLOG
from bot.testing.slack_api import FakeSlackAPI

GC_YOUNG = 7000  # bot.runtime.GC_YOUNG (importing bot.runtime loads the whole bot)

SIGNING_SECRET = "bench-signing-secret"
TOKEN = "xoxb-bench"


class BenchSlackAPI(FakeSlackAPI):
    """The stand-in, plus when each run's result was posted and how many calls each run cost.
    It keeps no message bodies: thousands of runs pass through it."""

    def __init__(self) -> None:
        super().__init__()
        self.results: dict[str, float] = {}
        self.per_run: dict[str, int] = {}
        self.methods: dict[str, int] = {}  # Web API calls by method
        self.notices = 0  # chat.postMessage / chat.postEphemeral of no run: requester notices
        self.cards: dict[str, str] = {}  # approval id -> run id, in the order they were posted
        self.run_of: dict[str, str] = {}  # message ts -> run id
        self.peers: set[Any] = set()  # the connections the bot opened (address, port)
        self.arrived = asyncio.Event()
        self.card_of: dict[str, str] = {}  # a card's message ts -> its approval id
        self.cards_updated: dict[str, float] = {}  # approval id -> its last chat.update
        self.limited_at: list[float] = []  # when it answered 429 (monotonic)

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        if method == "bench.result":
            return await self._result(request.query["run_id"])
        if method == "bench.results":
            return web.json_response({"ok": True, "results": self.results})
        if method == "bench.outputs":
            count, timeout = int(request.query["count"]), float(request.query["timeout"])
            return await self._outputs(count, timeout)
        if method == "bench.state":
            return web.json_response(
                {
                    "ok": True, "cards": self.cards, "calls": self.per_run,
                    "peers": len(self.peers), "methods": self.methods, "notices": self.notices,
                    # clicks told "still working": not decided by the ack budget
                    "notes": sum("Still working" in str(e.get("text")) for e in self.ephemeral),
                    "limited": len(self.limited_at), "limited_at": self.limited_at,
                    "cards_updated": self.cards_updated, "outputs": len(self.results),
                }
            )  # fmt: skip
        if request.transport is not None:
            self.peers.add(request.transport.get_extra_info("peername"))
        self.methods[method] = self.methods.get(method, 0) + 1
        response = await super()._handle(request)
        if response.status == 429:
            self.limited_at.append(time.monotonic())
        self.calls.clear()
        self.limited.clear()
        return response

    def _chat_postMessage(self, p: dict[str, Any]) -> dict[str, Any]:
        result = super()._chat_postMessage(p)
        payload = (p.get("metadata") or {}).get("event_payload") or {}
        run_id, target = str(payload.get("run_id", "")), str(payload.get("target", ""))
        self._count(run_id)
        self.notices += not run_id
        if target == "result":
            self.results[run_id] = time.monotonic()
            self.arrived.set()
            self.arrived = asyncio.Event()
        elif target.startswith("card:"):
            self.cards[target.partition(":")[2]] = run_id
            self.card_of[str(result["ts"])] = target.partition(":")[2]
        self.run_of[str(result["ts"])] = run_id
        return result

    def _chat_postEphemeral(self, p: dict[str, Any]) -> dict[str, Any]:
        self.notices += "Still working" not in str(p.get("text"))
        return super()._chat_postEphemeral(p)

    def _chat_update(self, p: dict[str, Any]) -> dict[str, Any]:
        self._count(self.run_of.get(str(p.get("ts", "")), ""))
        card = self.card_of.get(str(p.get("ts", "")))
        if card is not None:
            self.cards_updated[card] = time.monotonic()
        return super()._chat_update(p)

    def _count(self, run_id: str) -> None:
        self.per_run[run_id] = self.per_run.get(run_id, 0) + 1

    async def _result(self, run_id: str) -> web.Response:
        while run_id not in self.results:
            await self.arrived.wait()
        return web.json_response({"ok": True, "at": self.results[run_id]})

    async def _outputs(self, count: int, timeout: float) -> web.Response:
        """Once `count` runs in all have their final output posted, or after `timeout` seconds:
        how many have."""
        deadline = time.monotonic() + timeout
        while len(self.results) < count and (left := deadline - time.monotonic()) > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), left)
        return web.json_response({"ok": True, "count": len(self.results)})


async def standin(scale: float = 0.0) -> None:
    """The stand-in; with `scale`, enforcing Slack's limits at `scale` times their rates
    (chat.postMessage 1/s per channel, bursts of 6; chat.update 50/min per workspace, bursts
    of 12)."""
    async with BenchSlackAPI() as slack:
        if scale:
            slack.enforce_limits(
                posts_per_second=1.0 * scale, post_burst=6,
                updates_per_minute=50.0 * scale, update_burst=12,
            )  # fmt: skip
        print(slack.url, flush=True)
        await _until_terminated()


def _bolt(api_url: str) -> AsyncApp:
    """Bolt as the bot uses it: signature verification, process-before-response listeners."""
    return AsyncApp(
        client=AsyncWebClient(token=TOKEN, base_url=api_url),
        signing_secret=SIGNING_SECRET,
        process_before_response=True,
        raise_error_for_unhandled_request=False,
    )


async def bare(port: int, api_url: str) -> None:
    """Bolt as the bot uses it (aiohttp, signature verification, a process-before-response
    listener), with a listener that only acks."""
    app = _bolt(api_url)

    @app.action(re.compile(".*"))
    async def ack_only(ack: AsyncAck) -> None:
        await ack()

    async def events(request: web.Request) -> web.Response:
        response = await app.async_dispatch(await to_bolt_request(request))
        return await to_aiohttp_response(response)

    await _serve(port, events)


async def _serve(port: int, events: Callable[[web.Request], Awaitable[web.Response]]) -> None:
    """Serve `events` at /slack/events on `port` until terminated, as the bot serves (#32): the
    kernel's queue of connections as long as the bot's (aiohttp's default is 128, below a burst
    of 200), and the start-up heap out of the cyclic GC's reach with the bot's threshold
    (`bot.runtime.settle_heap`: a full collection of it stalls every request in flight)."""
    web_app = web.Application(client_max_size=1024 * 1024)
    web_app.add_routes([web.post("/slack/events", events), web.get("/healthz", _ok)])
    runner = web.AppRunner(web_app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, backlog=SHARED_BACKLOG).start()
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])
    print("ready", flush=True)
    await _until_terminated()
    await runner.cleanup()


# The floor's path's Redis writes: each owner-checked, a one-key script (benchmarks/floor.py).
OWNED_WRITE = (
    "if redis.call('GET', KEYS[1]) then return 0 end redis.call('SET', KEYS[1], ARGV[1]) return 1"
)


def floor_state_key(approval_id: str) -> str:
    """Where `benchmarks/decisions.py` leaves a paused run's state for `floorpath`."""
    return f"floor:{approval_id}:state"


async def floor_path(port: int, api_url: str, redis_url: str) -> None:
    """A decision's path with nothing but the floor's parts, in a process of its own as the
    bot's is: Bolt's ack of the click (the bare app's), then, once answered, one after another,
    the decision consumed and the job's take with the run's state (2 Redis round trips), the
    tool's journal before and after (2), the SDK's streamed resume of the paused run, the
    run's end and the job's acknowledgement (2), and the 3 Web API calls through slack_sdk,
    each after its owner-checked write (3): the output's post, then the card's and the run
    message's updates. `benchmarks/decisions.py` clicks it one at a time, as it clicks the bot:
    the latency the bot's path could have on this machine with no cost of its own."""
    from agents import RunState, set_tracing_disabled

    from benchmarks.bench_agents import approve_and_run, deployer
    from bot.slack.api.webapi import build_client
    from bot.store.connection import connect

    set_tracing_disabled(True)
    agent = deployer()
    redis = connect(redis_url, max_connections=8)
    owned = redis.register_script(OWNED_WRITE)
    session = aiohttp.ClientSession()
    client = build_client(TOKEN, api_url, session)
    app = _bolt(api_url)
    running: set[asyncio.Task[None]] = set()

    @app.action(re.compile(".*"))
    async def decide(ack: AsyncAck, body: dict[str, Any], context: dict[str, Any]) -> None:
        await ack()
        context["floor_id"] = str(body["actions"][0]["value"])

    async def path(approval_id: str) -> None:
        async def write(what: str) -> None:
            assert await owned(keys=[f"floor:{approval_id}:{what}"], args=["owner"]) == 1

        # floor.ROUND_TRIPS (9), one after another, with the resume and the 3 Web API calls
        await write("decided")
        stored = await redis.get(floor_state_key(approval_id))  # the job's take
        await write("journal: begun")
        await write("journal: ended")
        assert isinstance(stored, bytes)
        state = await RunState.from_string(agent, stored.decode())
        output = await approve_and_run(agent, state, streamed=True)
        await write("finished")
        await write("acknowledged")
        await write("shown output")
        payload = {"run_id": approval_id, "target": "result"}
        posted = await client.chat_postMessage(
            channel="C1", text=str(output),
            metadata={"event_type": "approval_bot", "event_payload": payload},
        )  # fmt: skip
        for what in ("shown card", "shown run"):
            await write(what)
            await client.chat_update(channel="C1", ts=posted["ts"], text=what)

    async def events(request: web.Request) -> web.Response:
        bolt_request = await to_bolt_request(request)
        answer = await to_aiohttp_response(await app.async_dispatch(bolt_request))
        approval_id = bolt_request.context.get("floor_id")
        if approval_id:  # its path starts once the answer is written (acks first, as the bot)
            task = asyncio.get_running_loop().create_task(path(approval_id))
            running.add(task)
            task.add_done_callback(running.discard)
        return answer

    await _serve(port, events)
    await session.close()
    await redis.aclose()


async def _ok(_: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _until_terminated() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


if __name__ == "__main__":
    if sys.argv[1] == "standin":
        asyncio.run(standin(float(sys.argv[2]) if len(sys.argv) > 2 else 0.0))
    elif sys.argv[1] == "floorpath":
        asyncio.run(floor_path(int(sys.argv[2]), sys.argv[3], sys.argv[4]))
    else:
        asyncio.run(bare(int(sys.argv[2]), sys.argv[3]))
