"""The bot's resume of the minimal paused run in a plain process (#32): `Engine.resume` of the
decisions benchmark's agent (`bench_agents.deployer`: one call that needs approval, then an
answer; a scripted model), streamed, with the callbacks the worker passes (progress, stop
check, stream), without Redis (no journal). Prints the CPU of one resume, median of `--runs`
(each a distinct paused run, as the bot's decisions are), and the SDK's own resume of the same
runs (`RunState.from_json` + `approve` + a streamed `Runner.run_streamed`) beside it, first:
an `Engine` replaces some of the SDK's functions for the version it pins
(`bot.engine.identities`, `bot.engine.invocations`), the SDK's resume alone runs its own.

    .venv/bin/python -m benchmarks.resume [--runs 300] [--pause 0.3]

With `--pause`, each resume follows that many seconds of idleness, as the bot's resumes one at
a time do (a click at a time, each once the bot is idle again: `benchmarks.decisions --serial`,
`benchmarks.trace_path`): the caches the resume's code and data were in are then cold, which
on a shared 2-core machine costs a third more CPU than back to back (#32).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from agents import RunConfig, Runner, RunState

from benchmarks.bench_agents import approvals, approve_and_run, deployer
from bot.engine.approvals import arguments_sha
from bot.engine.context import RunContext
from bot.engine.registry import AgentRegistry
from bot.engine.runner import Decision, Engine, Finished, Paused

WARM = 20  # resumes first, not counted


async def _quiet(text: str) -> None:
    return None


async def _go_on() -> bool:
    return False


async def _idle(pause: float) -> None:
    if pause:
        await asyncio.sleep(pause)


async def bot_resumes(runs: int, idle: float = 0.0) -> list[float]:
    """CPU ms of each `Engine.resume` of `runs` distinct paused runs, as the worker calls it."""
    engine = Engine(AgentRegistry(dict(approvals)), rejection_text="no", max_turns=10)
    paused: list[tuple[str, Paused]] = []
    for i in range(runs + WARM):
        task = f"deploy v{i} to the staging cluster"
        context = RunContext(run_id=f"r{i}", team_id="T1", user_id="U1", channel_id="C1")
        outcome = await engine.start("deployer", task, context)
        assert isinstance(outcome, Paused), outcome
        paused.append((task, outcome))
    cpu = []
    for task, pause in paused:
        [call] = pause.approvals
        shown = (call.agent, call.tool, arguments_sha(call.arguments))
        await _idle(idle)
        began = time.process_time()
        outcome = await engine.resume(
            "deployer", pause.checkpoint, [Decision(call.call_id, True, shown=shown)],
            progress=_quiet, run_id="r", stop=_go_on, task=task, stream=_quiet,
        )  # fmt: skip
        cpu.append((time.process_time() - began) * 1000)
        assert isinstance(outcome, Finished) and outcome.output == "done", outcome
    return cpu[WARM:]


async def sdk_resumes(runs: int, idle: float = 0.0, streamed: bool = True) -> list[float]:
    """CPU ms of the SDK's own resume of the same runs (no engine: the SDK's functions);
    not `streamed`: `Runner.run`, as `benchmarks.decisions` times it."""
    agent = deployer()
    config = RunConfig(tracing_disabled=True)  # as the bot runs (`bot.engine.tracing`)
    stored: list[dict[str, Any]] = []
    for i in range(runs + WARM):
        first = await Runner.run(agent, f"deploy v{i} to the staging cluster", run_config=config)
        stored.append(first.to_state().to_json())
    cpu = []
    for data in stored:
        await _idle(idle)
        began = time.process_time()
        state = await RunState.from_json(agent, data)
        output = await approve_and_run(agent, state, streamed=streamed, config=config)
        cpu.append((time.process_time() - began) * 1000)
        assert output == "done"
    return cpu[WARM:]


def _line(what: str, cpu: list[float]) -> str:
    cpu = sorted(cpu)
    p90 = cpu[9 * len(cpu) // 10]
    return f"{what:<60} {statistics.median(cpu):6.2f}  (p90 {p90:.2f}; {len(cpu)} runs)"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300, help="resumes counted")
    parser.add_argument(
        "--pause", type=float, default=0.0, help="seconds idle before each resume (default 0)"
    )
    args = parser.parse_args()
    after = f", each after {args.pause:g} s idle" if args.pause else ""
    print(f"CPU of one resume, ms, median (a plain process{after}):")
    plain = await sdk_resumes(args.runs, args.pause, streamed=False)
    print(_line("the SDK's own, not streamed (from_json + approve + run)", plain))
    sdk = await sdk_resumes(args.runs, args.pause)
    print(_line("the SDK's own (from_json + approve + run_streamed)", sdk))
    print(_line("the bot's (Engine.resume, streamed, the worker's callbacks)",
                await bot_resumes(args.runs, args.pause)))  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
