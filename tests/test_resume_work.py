"""What a resume does besides the SDK's own resume (#32): a decided call is matched to the
stored state by what its reviewer was shown, without reading its arguments through the tool's
parameter model again (that reading judged it at its pause; the SDK reads them once more when
it runs the tool). The readings are counted by wrapping `receive` where the descriptions call
it (it still reads: nothing of ours is replaced)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

import bot.engine.approvals
import bot.engine.arguments
from bot.engine.approvals import arguments_sha
from bot.engine.context import RunContext
from bot.engine.registry import AgentRegistry
from bot.engine.runner import Decision, Engine, Failed, Finished, Paused

READS: list[str] = []  # the arguments of each reading by a description
DEPLOYED: list[str] = []


@function_tool(needs_approval=True)
def deploy(target: str, replicas: int = 1) -> str:
    """Deploy a target."""
    DEPLOYED.append(target)
    return f"deployed {target} x{replicas}"


@pytest.fixture(autouse=True)
def _counted(monkeypatch: pytest.MonkeyPatch) -> None:
    receive = bot.engine.arguments.receive

    def counted(tool: Any, arguments: str | None) -> Any:
        READS.append(arguments or "")
        return receive(tool, arguments)

    monkeypatch.setattr(bot.engine.approvals, "receive", counted)
    READS.clear()
    DEPLOYED.clear()


def _engine() -> Engine:
    model = ScriptedModel(
        [[function_call("deploy", {"target": "web"}, call_id="c1")],
         [assistant_message("done")]]
    )  # fmt: skip
    agent: Agent[Any] = Agent(name="deployer", model=model, tools=[deploy])
    return Engine(AgentRegistry({"deployer": agent}), rejection_text="no", max_turns=5)


async def _paused(engine: Engine) -> Paused:
    context = RunContext(run_id="r1", team_id="T1", user_id="U1", channel_id="C1")
    paused = await engine.start("deployer", "deploy web", context)
    assert isinstance(paused, Paused), paused
    return paused


async def test_a_resume_reads_the_decided_calls_arguments_only_where_the_tool_runs() -> None:
    engine = _engine()
    paused = await _paused(engine)
    [approval] = paused.approvals
    assert [json.loads(r) for r in READS] == [{"target": "web"}]  # its pause: what was judged
    READS.clear()
    shown = (approval.agent, approval.tool, arguments_sha(approval.arguments))
    outcome = await engine.resume(
        "deployer", paused.checkpoint, [Decision("c1", True, shown=shown)], task="deploy web"
    )
    assert isinstance(outcome, Finished) and outcome.output == "done", outcome
    assert DEPLOYED == ["web"]
    assert READS == []  # matched to the state by what was shown: not read again


async def test_a_decided_call_that_no_longer_matches_what_was_shown_is_not_resumed() -> None:
    engine = _engine()
    paused = await _paused(engine)
    [approval] = paused.approvals
    READS.clear()
    for shown in [
        ("deployer", "deploy", arguments_sha('{"target": "db"}')),
        ("other", "deploy", arguments_sha(approval.arguments)),
        ("deployer", "undeploy", arguments_sha(approval.arguments)),
    ]:
        outcome = await engine.resume(
            "deployer", paused.checkpoint, [Decision("c1", True, shown=shown)], task="deploy web"
        )
        assert isinstance(outcome, Failed) and "no longer matches" in outcome.error, outcome
    assert DEPLOYED == []  # nothing ran
