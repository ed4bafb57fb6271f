"""`bot.testing.models`: one call puts a model on every agent, handoffs and agent tools included,
and the offline demo model drives real approvals through the whole bot."""

from __future__ import annotations

from typing import Any

import pytest
from agents import Agent, function_tool, handoff

from bot.slack.blocks import APPROVE
from bot.testing.harness import BotHarness
from bot.testing.models import DemoModel, reachable_agents, use_model
from tests.agents_for_tests import POLICY


def team(done: list[str]) -> Agent[Any]:
    @function_tool(needs_approval=True)
    def delete_path(path: str) -> str:
        """Delete files under a path."""
        done.append(path)
        return f"deleted {path}"

    janitor = Agent(name="janitor", instructions="Clean up.", model="gpt-4.1", tools=[delete_path])
    specialist = Agent(name="specialist", model="gpt-4.1")
    return Agent(
        name="lead",
        model="gpt-4.1",
        tools=[janitor.as_tool(tool_name="janitor", tool_description="Frees disk space.")],
        handoffs=[handoff(specialist)],
    )


def test_use_model_reaches_handoffs_and_agent_tools() -> None:
    lead = team([])
    model = DemoModel()
    found = use_model({"lead": lead}.values(), model)
    assert sorted(a.name for a in found) == ["janitor", "lead", "specialist"]
    assert all(a.model is model for a in reachable_agents(lead))
    per_agent = use_model(lead, lambda agent: DemoModel(calls=1))
    assert len({id(a.model) for a in per_agent}) == 3


async def test_the_demo_model_reaches_an_approval_inside_a_nested_agent(redis_url: str) -> None:
    done: list[str] = []
    lead = team(done)
    use_model(lead, DemoModel())
    async with BotHarness(redis_url, lead, POLICY) as bot:
        approval = await bot.start_and_wait("clear /tmp/cache", user="U1")
        assert "agent *janitor*" in approval.all_text() and "delete_path" in approval.all_text()
        # It says why, in the same response as the call: the card shows it.
        assert (
            "*Why, in the agent's words:*\n>(offline demo model) To work on “clear /tmp/cache”, "
            "I will call delete_path (Delete files under a path)."
        ) in approval.all_text()
        await bot.click(approval, APPROVE, user="U2")
        await bot.wait_for_status("finished")
        await bot.idle()
        output = [m.text for m in bot.run_thread()][-1]
    assert done and output.startswith("Done.")


def test_use_model_takes_every_shape_the_bot_serves() -> None:
    """An Agent, a dict of agents (the docs' shape), a list, a callable returning one."""
    for shape in (
        lambda a: a,
        lambda a: {"ops": a},
        lambda a: [a],
        lambda a: lambda: {"ops": a},
    ):
        agent = Agent(name="ops", instructions="x")
        model = DemoModel()
        assert use_model(shape(agent), model) == [agent] and agent.model is model


def test_use_model_names_what_is_not_an_agent() -> None:
    with pytest.raises(TypeError, match="found str 'ops'"):
        use_model(["ops"], DemoModel())  # type: ignore[list-item]
