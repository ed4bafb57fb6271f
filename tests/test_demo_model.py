"""`bot.testing.models`: one call puts a model on every agent, handoffs and agent tools included,
and the offline demo model drives real approvals through the whole bot."""

from __future__ import annotations

from typing import Any

import pytest
from agents import Agent, function_tool, handoff

from bot import ask_human
from bot.examples import agents as ex
from bot.slack.blocks import APPROVE
from bot.testing.harness import BotHarness, edit_values
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
        text = approval.all_text()
        assert "agent *janitor*" in text and "*delete_path* on `/tmp/cache`" in text
        # It says why, in the same response as the call: the card shows it.
        assert "To clear /tmp/cache, I will call delete_path with path /tmp/cache." in text
        await bot.click(approval, APPROVE, user="U2")
        await bot.wait_for_status("finished")
        await bot.idle()
        output = [m.text for m in bot.run_thread()][-1]
    assert done == ["/tmp/cache"] and output.startswith("Done.")


def examples() -> dict[str, Agent[Any]]:
    """The example agents' own tools on agents of this test's own (use_model sets models in
    place: the example module's agents stay as they are)."""
    janitor = Agent(name="janitor", instructions="Clean up.", tools=[ex.delete_path, ask_human])
    ops = Agent(
        name="ops",
        instructions="Operate.",
        tools=[ex.read_metrics, ex.restart_service, ex.scale_service, ask_human],
    )
    use_model([ops, janitor], DemoModel())
    return {"ops": ops, "janitor": janitor}


async def test_arguments_come_from_the_schema_and_the_task_not_the_task_everywhere(
    redis_url: str,
) -> None:
    async with BotHarness(redis_url, examples(), POLICY) as bot:
        await bot.slack.command(
            "restart the web tier and scale it to 8 replicas", user="U1", channel="C1"
        )
        cards = await bot.wait_for_approvals(2)
        texts = sorted(card.all_text() for card in cards)
        assert "```service: web```" in texts[0]  # restart_service
        assert "```service: web\nreplicas: 8```" in texts[1]  # scale_service
        assert not any("service: restart" in t for t in texts)
        for card in cards:
            await bot.click(card, APPROVE, user="U2")
        await bot.wait_for_status("finished")
        await bot.idle()
        summary = [m.text for m in bot.run_thread()][-1]
    assert summary.startswith("Done. What happened:")
    assert "restart_service" in summary and "restarted web (example only)" in summary
    assert "scaled web to 8 replicas" in summary


async def test_it_asks_first_alone_then_acts_on_the_answer(redis_url: str) -> None:
    """ "clear the old caches" names no path: the janitor asks which, in a pause of its own (no
    deletion waits beside the question), then proposes a path the answer does not forbid."""
    async with BotHarness(redis_url, examples(), POLICY) as bot:
        await bot.slack.command("run janitor clear the old caches", user="U1", channel="C1")
        [question] = await bot.wait_for_questions(1)
        assert "delete_path with path /var/cache/app" in question.all_text()
        assert not [m for m in bot.slack_api.approval_messages() if m.action_ids()]
        await bot.answer(question, user="U1", text="Keep /var/log; the rest may go")
        [card] = await bot.wait_for_approvals(1)
        text = card.all_text()
        assert "You answered “Keep /var/log; the rest may go”." in text
        assert "```path: /var/cache/app```" in text
        await bot.click(card, APPROVE, user="U2")
        await bot.wait_for_status("finished")
        await bot.idle()
        summary = [m.text for m in bot.run_thread()][-1]
    assert summary.startswith("You told me: “Keep /var/log; the rest may go”.")
    assert "deleted /var/cache/app (example only)" in summary


async def test_the_summary_after_an_edit_is_in_words(redis_url: str) -> None:
    """No internals (the bot's instructions to the model), no raw user id, no Slack markup."""
    async with BotHarness(redis_url, examples(), POLICY) as bot:
        card = await bot.start_and_wait("restart the web tier", user="U1")
        view = await bot.open_edit(card, user="U2")
        await bot.slack.submit(view, edit_values(view, {"field:service": "api"}), user="U2")
        await bot.wait_for_status("finished")
        await bot.idle()
        summary = [m.text for m in bot.run_thread()][-1]
    assert "a reviewer changed the arguments; I ran their version instead" in summary
    assert "restarted api (example only)" in summary
    for internal in ("Not run as proposed", "U2", "&lt;@", "approved once"):
        assert internal not in summary, summary


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
