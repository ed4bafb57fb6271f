"""Where the wall-clock time of one decision goes, one at a time (issue #32): a timeline of the
critical path from the click to the output in Slack.

`python -m benchmarks.trace_path [--clicks 30] [--processes 1]` starts a local redis-server,
the Slack stand-in and the bot (as `benchmarks.decisions` does), with every Redis round trip,
Web API call and a few of the bot's steps stamped (`time.monotonic()`, one clock for every
process on the machine) in the bot's processes; it sends the clicks one at a time, each once
the bot is idle again, and prints, for the steps of a decision in order, when each happened
after the click was sent (median over the clicks) and the gap from the step before.

With TRACE_CENSUS=1 it also times every event-loop callback (wall and thread CPU) and every
wait in the selector of the serving process, and prints what ran within the resumes (the run's
own steps, other tasks, waits, the GC's collections): measuring only, a few microseconds a
callback.

As a program wrapping the bot (`python -m benchmarks.trace_path bot <bot's arguments>`) it
installs the stamps and writes them, on SIGUSR2, to TRACE_DIR/<pid>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

STAMPS: list[tuple[float, str, int]] = []  # (when, what, the Redis connection's id or 0)
# With TRACE_CENSUS set, each event-loop callback and each wait in the selector: (start, wall
# ms, thread CPU ms, what: "job" for the run's own task, "idle" for a wait, else its name).
CENSUS: list[tuple[float, float, float, str]] = []


def stamp(label: str, connection: int = 0) -> None:
    STAMPS.append((time.monotonic(), label, connection))


def _wrap(owner: Any, name: str, label: str, *, end: bool = True) -> None:
    """Stamp `owner.name`'s start (and end) as `label`."""
    original = getattr(owner, name)

    @functools.wraps(original)
    async def wrapped(*args: Any, **kwargs: Any) -> Any:
        stamp(label)
        try:
            return await original(*args, **kwargs)
        finally:
            if end:
                stamp(label + " end")

    setattr(owner, name, wrapped)


def _wrap_sync(owner: Any, name: str, label: str) -> None:
    """Stamp the synchronous `owner.name`'s start and end as `label`."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        stamp(label)
        try:
            return original(*args, **kwargs)
        finally:
            stamp(label + " end")

    setattr(owner, name, wrapped)


def install() -> None:
    """Stamp the bot's round trips, Web API calls and steps from now on."""
    from redis.asyncio.connection import AbstractConnection
    from slack_sdk.web.async_client import AsyncWebClient

    import bot.runtime
    from benchmarks.roundtrips import _name, _scripts
    from bot.engine.runner import Engine
    from bot.service.decisions.decide import Decisions
    from bot.service.foreground import Foreground
    from bot.service.running.runs import Runs
    from bot.slack.delivery.projector import Projector
    from bot.store.delivery.outbox import Outbox

    _scripts()
    send, read = AbstractConnection.send_packed_command, AbstractConnection.read_response

    async def sent(self: Any, command: Any, check_health: bool = True) -> None:
        stamp(_name(command)[:90], id(self))
        await send(self, command, check_health)

    async def replied(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await read(self, *args, **kwargs)
        finally:
            stamp("<", id(self))

    AbstractConnection.send_packed_command = sent  # type: ignore[method-assign]
    AbstractConnection.read_response = replied  # type: ignore[method-assign]
    call = AsyncWebClient.api_call

    async def api_call(self: Any, api_method: str, *args: Any, **kwargs: Any) -> Any:
        stamp("api " + api_method)
        try:
            return await call(self, api_method, *args, **kwargs)
        finally:
            stamp("api end")

    AsyncWebClient.api_call = api_call  # type: ignore[method-assign]
    runtime: Any = bot.runtime  # (its names imported from elsewhere, replaced here)
    admit, respond = runtime.admit, runtime.to_aiohttp_response

    def admitted(*args: Any) -> Any:
        stamp("http in")
        return admit(*args)

    async def responded(*args: Any) -> Any:
        try:
            return await respond(*args)
        finally:
            stamp("http out")

    runtime.admit, runtime.to_aiohttp_response = admitted, responded
    _wrap(Decisions, "approve", "decide")
    _wrap(Runs, "run_job", "job")
    _wrap(Engine, "resume", "resume")
    _wrap(Projector, "_handle", "pass")
    lull = Foreground.lull

    async def lulled(self: Any) -> None:
        if self._busy():
            stamp("lull wait")
            await lull(self)
            stamp("lull end")
        else:
            await lull(self)

    Foreground.lull = lulled  # type: ignore[method-assign]
    making_due = Outbox.making_due

    @contextlib.contextmanager
    def made_due(self: Any, run_id: str) -> Any:
        with making_due(self, run_id):
            yield
        stamp("woken")

    Outbox.making_due = made_due  # type: ignore[method-assign]
    gc.callbacks.append(lambda phase, info: stamp(f"gc {phase} {info['generation']}"))
    if os.environ.get("TRACE_CENSUS"):
        install_census()
    if os.environ.get("TRACE_FINE"):
        _fine()


def install_census() -> None:
    """Time every event-loop callback (wall and thread CPU) and every wait in the selector:
    measurement only (it adds a few microseconds to each callback)."""
    import selectors
    from asyncio import events

    from bot.engine.journal import CURRENT

    run = events.Handle._run

    def timed(self: Any) -> None:
        t0, c0 = time.monotonic(), time.thread_time()
        try:
            run(self)
        finally:
            wall, cpu = (time.monotonic() - t0) * 1000, (time.thread_time() - c0) * 1000
            if self._context.get(CURRENT) is not None:
                what = "job"
            else:
                callback = self._callback
                what = getattr(callback, "__qualname__", "") or type(callback).__name__
            CENSUS.append((t0, wall, cpu, what))

    events.Handle._run = timed  # type: ignore[method-assign]
    select = selectors.EpollSelector.select

    def waited(self: Any, timeout: float | None = None) -> Any:
        t0 = time.monotonic()
        try:
            return select(self, timeout)
        finally:
            CENSUS.append((t0, (time.monotonic() - t0) * 1000, 0.0, "idle"))

    selectors.EpollSelector.select = waited  # type: ignore[method-assign]


def _fine() -> None:
    """More stamps (TRACE_FINE=1): the steps between the milestones."""
    from aiohttp.web_protocol import RequestHandler

    from bot.service.foreground import Foreground
    from bot.service.running.runs import Runs
    from bot.service.running.streaming import AnswerStream
    from bot.service.running.worker import Worker
    from bot.slack.delivery.projector import Projector
    from bot.store.parts.calls import Calls
    from bot.store.runs import Runs as StoredRuns

    _wrap(RequestHandler, "finish_response", "-aiohttp write")
    _wrap(Calls, "decide", "-calls.decide")
    _wrap(AnswerStream, "close", "-stream close")
    _wrap(Runs, "_settle", "-settle")
    _wrap(StoredRuns, "finish", "-store finish")
    _wrap(Projector, "project", "-project")
    adopt, release = Worker.adopt, Foreground._release

    def adopted(self: Any, jobs: Any) -> None:
        stamp("-adopt")
        adopt(self, jobs)

    def released(self: Any) -> None:
        stamp("-pump")
        release(self)

    from redis.asyncio.client import Pipeline

    from bot.service.core import ServiceCore
    from bot.service.judgement import Judgement

    _wrap(Judgement, "settle", "-settle judgement")
    _wrap(Pipeline, "execute", "-pipe execute")
    for owner, name in ((Projector, "_pass_in"), (StoredRuns, "_ended_in"),
                        (ServiceCore, "audit_in")):  # fmt: skip
        _wrap_sync(owner, name, f"-{name}")
    Worker.adopt = adopted  # type: ignore[method-assign]
    Foreground._release = released  # type: ignore[method-assign]


def _dump(signum: int, frame: FrameType | None) -> None:
    path = Path(os.environ["TRACE_DIR"]) / f"{os.getpid()}.json"
    path.write_text(json.dumps(STAMPS))
    if CENSUS:
        path.with_suffix(".census").write_text(json.dumps(CENSUS))


# The driver ---------------------------------------------------------------------------------


async def drive(clicks: int, processes: int) -> None:
    from agents import set_tracing_disabled

    from benchmarks.decisions import SLOW, Bot, Process, click_body, until
    from bot.store.connection import EmbeddedRedis

    set_tracing_disabled(True)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TRACE_DIR"] = tmp
        os.environ["BENCH_BOT"] = "-m benchmarks.trace_path bot"
        server = EmbeddedRedis(Path(tmp) / "redis")
        await server.start()
        standin = Process(["-m", "benchmarks.peers", "standin"])
        try:
            api_url = await standin.first_line()
            bot = Bot(server.url, api_url, Path(tmp), processes=processes)
            try:
                await bot.start()
                runs = await bot.paused_runs(clicks + 5, lambda i: f"deploy t{i}")
                sends: list[tuple[float, float, float]] = []
                import aiohttp

                async with aiohttp.ClientSession() as session:
                    for approval_id, run_id in runs:
                        body, headers = click_body(approval_id)
                        await asyncio.sleep(0.3)  # the projector's looks slow down when idle
                        started = time.monotonic()
                        async with session.post(bot.url, data=body, headers=headers) as response:
                            assert response.status == 200
                        acked = time.monotonic()
                        shown = await bot.standin("bench.result", run_id=run_id)
                        sends.append((started, acked, float(shown["at"])))
                        await until(bot.settled, 30 * SLOW, "the run's messages")
                stamps: list[tuple[float, int, str, int]] = []
                census: list[tuple[float, float, float, str]] = []
                for pid in bot.pids:
                    os.kill(pid, signal.SIGUSR2)
                for pid in bot.pids:
                    path = Path(tmp) / f"{pid}.json"
                    await until(lambda p=path: asyncio.sleep(0, p.exists()), 10, "stamps")  # type: ignore[misc]
                    await asyncio.sleep(0.1)
                    stamps += [(t, pid, label, c) for t, label, c in json.loads(path.read_text())]
                    counted = path.with_suffix(".census")
                    if counted.exists():
                        census += [tuple(c) for c in json.loads(counted.read_text())]
            finally:
                await bot.stop()
        finally:
            await standin.stop()
            server.stop()
    report(sorted(stamps), sends[5:])
    if census:
        report_census(sorted(stamps), sorted(census), sends[5:][0][0])


# Milestones of a decision's path, in order: (name, what the step's label starts with).
MILESTONES = [
    ("request in", "http in"),
    ("decision starts (after the lull)", "decide"),
    ("call and run read", "HGETALL"),
    ("decide.lua", "EVALSHA(decide"),
    ("the decision's index writes + job", "LPUSH"),
    ("ack answered (handler returned)", "http out"),
    ("ack received by the clicker", "-- ack"),
    # One at a time the job is handed to the idle worker in decide.lua's round trip: no
    # blocked read returns it and no take_job.lua of its own (a busy worker's path has both).
    ("job starts", "job"),
    ("state read", "EVALSHA(resume_state"),
    ("SDK resume starts", "resume"),
    ("journal: tool begins", "EVALSHA(begin_call"),
    ("journal: tool ended", "EVALSHA(end_call"),
    ("SDK resume ends", "resume end"),
    ("finish.lua", "EVALSHA(finish"),
    ("the end's index writes", "ZADD"),
    ("projector woken", "woken"),
    ("claim + read", "EVALSHA(9b00e755 ab:{outbox}:due)+EVALSHA(projection"),
    ("pass starts", "pass"),
    # One at a time the output's token is taken in finish.lua's round trip (output_token.lua):
    # no round trip of its own (a burst's pass has one, with its updates' takes).
    ("token takes", "EVALSHA(pace ab:pace:{post:"),
    ("the output's posting record", "MULTI+HSET(ab:{<id>}:shown)"),
    ("chat.postMessage sent", "api chat.postMessage"),
    ("output seen by the stand-in", "-- output"),
]


# With TRACE_FINE=1: the steps between the milestones too.
FINE = [
    ("request in", "http in"),
    ("the decision waits for the lull", "lull wait"),
    ("Bolt's answer returned", "http out"),
    ("aiohttp writes the answer", "-aiohttp write"),
    ("aiohttp's write returned", "-aiohttp write end"),
    ("the lull's pump", "-pump"),
    ("decision starts (after the lull)", "decide"),
    ("call and run read", "HGETALL"),
    ("the judgement done: Calls.decide", "-calls.decide"),
    ("decide.lua", "EVALSHA(decide"),
    ("Calls.decide returned", "-calls.decide end"),
    ("the decision returned", "decide end"),
    ("job starts", "job"),
    ("SDK resume starts", "resume"),
    ("SDK resume ends", "resume end"),
    ("the answer stream closed", "-stream close end"),
    ("Runs.finish called", "-store finish"),
    ("finish.lua", "EVALSHA(finish"),
    ("pass starts", "pass"),
    ("project starts", "-project"),
    ("token takes", "EVALSHA(pace ab:pace:{post:"),
    ("chat.postMessage sent", "api chat.postMessage"),
    ("output seen by the stand-in", "-- output"),
]


def _round_trips(
    stamps: list[tuple[float, int, str, int]],
) -> list[tuple[float, int, str]]:
    """Each Redis round trip as one step at its send, named with how long it took (from the
    send to its first reply); the other stamps as they are."""
    steps: list[tuple[float, int, str]] = []
    open_: dict[tuple[int, int], tuple[float, str]] = {}
    for t, pid, label, connection in stamps:
        if not connection:
            steps.append((t, pid, label))
        elif label != "<":
            open_[pid, connection] = (t, label)
        elif (pid, connection) in open_:
            sent, name = open_.pop((pid, connection))
            steps.append((sent, pid, f"{name} [{(t - sent) * 1000:.2f} ms]"))
    return sorted(steps)


def report(
    stamps: list[tuple[float, int, str, int]], sends: list[tuple[float, float, float]]
) -> None:
    """The first traced click's steps; then, for each milestone of the path, its median time
    after the click and the median gap from the milestone before."""
    pids = sorted({pid for _, pid, _, _ in stamps})
    steps = _round_trips(stamps)
    timelines: list[list[tuple[float, str]]] = []
    for started, acked, shown in sends:
        tl = [(t - started, f"p{pids.index(pid)} {label}")
              for t, pid, label in steps if started - 0.001 <= t <= shown + 0.004]  # fmt: skip
        tl.append((acked - started, "-- ack received"))
        tl.append((shown - started, "-- output seen by the stand-in"))
        timelines.append(sorted(tl))
    if os.environ.get("TRACE_DUMP"):  # every click's timeline, for a closer look
        Path(os.environ["TRACE_DUMP"]).write_text(json.dumps(timelines))
    for tl in timelines[:2]:
        print("One click, ms after it was sent:")
        for t, label in tl:
            print(f"  {t * 1000:7.2f}  {label}")
    milestones = FINE if os.environ.get("TRACE_FINE") else MILESTONES
    found: dict[str, list[float]] = {name: [] for name, _ in milestones}
    for tl in timelines:
        i = 0
        for name, prefix in milestones:
            for j in range(i, len(tl)):
                label = tl[j][1].split(" ", 1)[1] if tl[j][1].startswith("p") else tl[j][1]
                if label.startswith(prefix):
                    found[name].append(tl[j][0] * 1000)
                    i = j
                    break
    print(f"\nMilestones, median ms after the click over {len(timelines)} clicks (found in how "
          "many); gap from the one before:")  # fmt: skip
    before = 0.0
    for name, _ in milestones:
        if found[name]:
            at = statistics.median(found[name])
            print(f"  {at:7.2f}  {at - before:6.2f}  {name} ({len(found[name])})")
            before = at
    totals = sorted((shown - started) * 1000 for started, _, shown in sends)
    print(f"\nclick -> output p50 {statistics.median(totals):.2f} ms "
          f"(min {totals[0]:.2f}, max {totals[-1]:.2f}; {len(totals)} clicks)")  # fmt: skip


def report_census(
    stamps: list[tuple[float, int, str, int]],
    census: list[tuple[float, float, float, str]],
    since: float,
) -> None:
    """Within each resume (`Engine.resume`'s start to its end; one serving process): the event
    loop's callbacks of the run's own task ("job"), of other tasks and callbacks (by name), the
    selector's waits ("idle") and the garbage collector's passes, per resume."""
    windows: list[tuple[float, float]] = []
    gcs: list[tuple[float, float]] = []
    started, gc_at = 0.0, 0.0
    for t, _, label, _ in stamps:
        if t < since:
            continue
        if label == "resume":
            started = t
        elif label == "resume end" and started:
            windows.append((started, t))
            started = 0.0
        elif label.startswith("gc start"):
            gc_at = t
        elif label.startswith("gc stop") and gc_at:
            gcs.append((gc_at, t))
    # what -> per resume (wall ms, CPU ms, callbacks)
    rows: dict[str, list[tuple[float, float, int]]] = {}
    totals: list[float] = []
    with_gc: list[float] = []
    without_gc: list[float] = []
    for begin, end in windows:
        mine: dict[str, tuple[float, float, int]] = {}
        for t0, wall, cpu, what in census:
            if begin <= t0 < end:
                w, c, k = mine.get(what, (0.0, 0.0, 0))
                mine[what] = (w + wall, c + cpu, k + 1)
        collected = [e - b for b, e in gcs if begin <= b < end]
        mine["(the GC's collections)"] = (sum(collected) * 1000, 0.0, len(collected))
        for what, sums in mine.items():
            rows.setdefault(what, []).append(sums)
        total = (end - begin) * 1000
        totals.append(total)
        (with_gc if collected else without_gc).append(total)
    n = len(windows)
    if not n:
        return
    print(f"\nInside the resume ({n} resumes, wall p50 {statistics.median(totals):.2f} ms): "
          "per resume, mean wall and CPU ms, callbacks; (in how many resumes)")  # fmt: skip
    order = sorted(rows.items(), key=lambda kv: -sum(w for w, _, _ in kv[1]))
    for what, got in order[:20]:
        wall = sum(w for w, _, _ in got) / n
        cpu = sum(c for _, c, _ in got) / n
        calls = sum(k for _, _, k in got) / n
        print(f"  {wall:7.3f} {cpu:7.3f}  x{calls:5.1f}  {what[:60]} ({len(got)})")
    accounted = sum(w for got in rows.values() for w, _, _ in got) / n
    print(f"  {statistics.fmean(totals) - accounted:7.3f}           the loop's own work between")
    job = rows.get("job", [])
    if job:
        print("the run's own steps, p50 wall / CPU ms: "
              f"{statistics.median(w for w, _, _ in job):.2f} / "
              f"{statistics.median(c for _, c, _ in job):.2f}")  # fmt: skip
    for what, walls in (("with", with_gc), ("without", without_gc)):
        if walls:
            print(f"resumes {what} a collection: {len(walls)}, wall p50 "
                  f"{statistics.median(walls):.2f} ms")  # fmt: skip


if __name__ == "__main__":
    if sys.argv[1:2] == ["bot"]:
        install()
        signal.signal(signal.SIGUSR2, _dump)
        from bot.cli import main

        sys.argv = [sys.argv[0], *sys.argv[2:]]
        sys.exit(main())
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clicks", type=int, default=30)
    parser.add_argument("--processes", type=int, default=1)
    args = parser.parse_args()
    asyncio.run(drive(args.clicks, args.processes))
