"""What a resume does besides the SDK's own resume (#32): a decided call is matched to the
stored state by what its reviewer was shown, without reading its arguments through the tool's
parameter model again (that reading judged it at its pause; the SDK reads them once more when
it runs the tool). The readings are counted by wrapping `receive` where the descriptions call
it (it still reads: nothing of ours is replaced)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agents import Agent
from agents.testing import ScriptedModel, assistant_message, function_call

import bot.engine.approvals
import bot.engine.arguments
from bot.engine.approvals import arguments_sha
from bot.engine.context import RunContext
from bot.engine.registry import AgentRegistry
from bot.engine.runner import Decision, Engine, Failed, Finished, Paused
from tests.agents_for_tests import DEPLOYED, deploy

READS: list[str] = []  # the arguments of each reading by a description


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


def _graphs() -> list[Agent[Any]]:
    """Agent graphs: one agent; handoffs (one back to the first: a cycle); an agent used as a
    tool; two agents of one name (a handoff's and a tool's), which the SDK tells apart by
    their signatures; two of one name at the root's level."""
    one: Agent[Any] = Agent(name="one", tools=[deploy])
    b: Agent[Any] = Agent(name="b")
    a: Agent[Any] = Agent(name="a", handoffs=[b])
    b.handoffs = [a]
    helper: Agent[Any] = Agent(name="helper", tools=[deploy])
    lead: Agent[Any] = Agent(name="lead", tools=[helper.as_tool("ask", "ask helper")])
    twin1: Agent[Any] = Agent(name="twin", instructions="first")
    twin2: Agent[Any] = Agent(name="twin", instructions="second", tools=[deploy])
    twins: Agent[Any] = Agent(name="twins", handoffs=[twin2, twin1])
    root_twin: Agent[Any] = Agent(name="twin", handoffs=[twin1])
    return [one, a, lead, twins, root_twin]


def test_the_agent_identities_are_the_sdks_own() -> None:
    """Installed (as an Engine does), the SDK's agent identity map and ambiguous agents are
    what the SDK's own functions compute, for distinct names and for shared ones."""
    import agents._run_state_agent_identity as identity
    import agents.run_state as run_state

    from bot.engine import identities

    assert identities.install()
    _engine()
    for root in _graphs():
        built = identity._build_agent_identity_map(root)
        own = identities.sdk_identity_map(root)
        assert list(built.items()) == list(own.items())  # same keys, order and agents
        assert run_state._get_ambiguous_agent_ids(root) == identities.sdk_ambiguous_ids(root)
    twins = _graphs()[3]
    assert sorted(identity._build_agent_identity_map(twins)) == ["twin", "twin#2", "twins"]


async def test_a_resume_of_distinctly_named_agents_computes_no_agent_signature(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The SDK computes a signature of an agent's whole definition only to tell apart agents
    that share a name (`bot.engine.identities`): a resume of agents named apart needs none."""
    import agents._run_state_agent_identity as identity

    signed: list[str] = []
    signature = identity._agent_identity_signature

    def counted(agent: Any) -> str:
        signed.append(agent.name)
        return signature(agent)

    monkeypatch.setattr(identity, "_agent_identity_signature", counted)
    engine = _engine()
    paused = await _paused(engine)
    signed.clear()
    outcome = await engine.resume(
        "deployer", paused.checkpoint, [Decision("c1", True)], task="deploy web"
    )
    assert isinstance(outcome, Finished) and outcome.output == "done", outcome
    assert DEPLOYED == ["web"]
    assert signed == []
