"""The agent may ask (`ask_human`): the question is a card with Answer (a modal) that also takes
a thread reply; the answer is the tool's result. Signed HTTP in, real Redis, the Slack stand-in
out, a scripted model that calls `ask_human` and then receives what was answered."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from agents import Agent
from agents.testing import ScriptedModel

from bot import ask_human
from bot.service.policy.rules import PolicyError, parse_policy
from bot.slack import blocks as question_blocks
from bot.slack.blocks import APPROVE
from bot.slack.render.question import answer_modal
from bot.testing.clock import SkippingClock
from bot.testing.harness import BotHarness, wait_until
from bot.testing.slack_api import FakeSlackAPI, Message
from tests.agents_for_tests import POLICY, assistant_message, function_call, tool_outputs
from tests.test_config import check
from tests.test_home import home_click, home_of, open_home

QUESTION = "Which region should I deploy to? <b>eu</b> & us are both up"


def asking_agent(
    final: str = "Deploying there.", *, asks: bool = True
) -> tuple[Agent[Any], ScriptedModel]:
    """An agent whose model asks one question (unless `asks` is false: it already did, before
    a restart), then ends with `final`."""
    steps: list[Any] = [[assistant_message(final)]]
    if asks:
        steps.insert(0, [function_call("ask_human", {"question": QUESTION}, call_id="q1")])
    model = ScriptedModel(steps)
    agent = Agent(name="ops", instructions="Ask when unsure.", model=model, tools=[ask_human])
    return agent, model


def card(bot: BotHarness, question: Message) -> Message:
    return bot.slack_api.messages[(question.channel, question.ts)]


async def ask(bot: BotHarness, user: str = "U1") -> Message:
    await bot.slack.command("deploy the app", user=user, channel="C1")
    [question] = await bot.wait_for_questions(1)
    return question


async def told(bot: BotHarness, user: str, count: int = 1) -> list[str]:
    found: list[str] = await wait_until(
        lambda: (lambda e: e if len(e) >= count else None)(bot.slack_api.ephemeral_to(user)),
        what=f"a private answer to {user}",
    )
    return found


async def test_answered_with_the_button_the_answer_is_the_tools_result(redis_url: str) -> None:
    agent, model = asking_agent()
    answer = "eu-west-1 <not> us & not prod"
    async with BotHarness(redis_url, agent, POLICY) as bot:
        question = await ask(bot)
        shown = question.all_text()
        # The question, quoted and escaped; who may answer (the starter and the approvers).
        assert "Question from the agent" in shown
        assert "&lt;b&gt;eu&lt;/b&gt; &amp; us" in shown and "<b>" not in shown
        assert "Who may answer: <@U1>, <@U2>, <@U3>" in shown
        assert question.action_ids() == [question_blocks.ANSWER]
        assert "Expires" in shown
        assert len(model.calls) == 1  # paused: the model waits for the answer

        sent = await bot.answer(question, user="U2", text=answer)
        assert sent.status == 200 and sent.text == ""  # the modal closes
        [opened] = bot.slack_api.views
        assert opened["view"]["callback_id"] == question_blocks.ANSWER_MODAL
        assert "&lt;b&gt;eu&lt;/b&gt;" in str(opened["view"]["blocks"][0])
        await bot.wait_for_status("finished")
        await bot.idle()
        run_id = bot.run_message().all_text().split("run `")[1].split("`")[0]
        journal = await bot.runtime.service.journal.entries(run_id)
        # The starter is told who answered, and what.
        [notice] = await wait_until(lambda: bot.slack_api.dms("U1") or None, what="a notice")
    # The tool ran (it was approved, not rejected) and returned the answer, exactly.
    assert tool_outputs(model) == {"q1": answer}
    assert journal["q1"]["status"] == "executed" and journal["q1"]["output"] == answer
    assert "Deploying there." in [m.text for m in bot.run_thread()]
    assert "question of agent *ops* was answered by <@U2>" in notice.text
    assert "eu-west-1 &lt;not&gt; us" in notice.text
    after = card(bot, question)
    assert after.action_ids() == []
    text = after.all_text()
    assert "*Answered* by <@U2>" in text
    assert "UTC>:\n>eu-west-1 &lt;not&gt; us &amp; not prod" in text  # quoted, escaped
    audit = await bot.audit()
    kinds = [e["kind"] for e in audit]
    assert kinds.count("asked") == 1 and kinds.count("answered") == 1
    [asked] = [e for e in audit if e["kind"] == "asked"]
    [answered] = [e for e in audit if e["kind"] == "answered"]
    assert asked["tool"] == "ask_human" and asked["text"] == QUESTION
    assert answered["text"] == answer and answered["user"] == "U2"


async def test_a_thread_reply_by_the_starter_is_the_answer(redis_url: str) -> None:
    agent, model = asking_agent()
    async with BotHarness(redis_url, agent, POLICY) as bot:
        question = await ask(bot, user="U1")
        # Slack encodes & < > in message text; the answer is decoded back.
        sent = await bot.slack.thread_reply(
            "Use staging &amp; skip &lt;prod&gt;", user="U1", channel="C1", thread_ts=question.ts
        )
        assert sent.status == 200
        await bot.wait_for_status("finished")
        await bot.idle()
    assert tool_outputs(model) == {"q1": "Use staging & skip <prod>"}
    text = card(bot, question).all_text()
    assert "*Answered* by <@U1>" in text and "staging &amp; skip &lt;prod&gt;" in text
    assert bot.slack_api.ephemeral_to("U1") == []  # nothing to tell: the card shows it


async def test_an_outsiders_answer_is_refused_by_button_form_and_reply(redis_url: str) -> None:
    agent, model = asking_agent()
    async with BotHarness(redis_url, agent, POLICY) as bot:
        question = await ask(bot)
        # The Answer button: no modal for an outsider, and they are told why.
        sent = await bot.click(question, question_blocks.ANSWER, user="U9")
        assert sent.status == 200
        [why] = await told(bot, "U9")
        assert "You may not answer this question" in why and "<@U2>" in why
        assert bot.slack_api.views == []
        # A forged submission of the answer form (someone else's modal): refused in the form.
        view = answer_modal(
            (await bot.runtime.service.store.pause_calls(question_run(bot)))[0]
        ).to_dict()
        values = {
            question_blocks.ANSWER_BLOCK: {
                question_blocks.ANSWER_INPUT: {"type": "plain_text_input", "value": "prod!"}
            }
        }
        forged = await bot.slack.submit(view, values, user="U9")
        assert forged.status == 200
        errors = forged.json()
        assert errors["response_action"] == "errors"
        assert "You may not answer" in errors["errors"][question_blocks.ANSWER_BLOCK]
        # A thread reply: not taken, and its author is told privately.
        await bot.slack.thread_reply(
            "prod, obviously", user="U9", channel="C1", thread_ts=question.ts
        )
        await told(bot, "U9", 2)
        assert "You may not answer" in bot.slack_api.ephemeral_to("U9")[1]
        # An Approve click forged on a question's id decides nothing either.
        await bot.slack.click(APPROVE, question.button_value(question_blocks.ANSWER), user="U2",
                              channel="C1", message_ts=question.ts)  # fmt: skip
        [approve_refused] = await told(bot, "U2")
        assert "answer it with Answer" in approve_refused
        await bot.idle()
        assert card(bot, question).action_ids() == [question_blocks.ANSWER]  # still waiting
        assert len(model.calls) == 1

        await bot.answer(question, user="U3", text="eu-west-1")
        await bot.wait_for_status("finished")
        await bot.idle()
    assert tool_outputs(model) == {"q1": "eu-west-1"}
    refused = [e for e in await bot.audit() if e["kind"] == "refused"]
    assert {e["user"] for e in refused} == {"U9", "U2"}


def question_run(bot: BotHarness) -> str:
    return bot.run_message().all_text().split("run `")[1].split("`")[0]


async def test_two_answers_at_once_one_wins_and_the_other_is_told(redis_url: str) -> None:
    agent, model = asking_agent()
    async with BotHarness(redis_url, agent, POLICY) as bot:
        question = await ask(bot)
        await asyncio.gather(
            bot.slack.thread_reply("eu", user="U2", channel="C1", thread_ts=question.ts),
            bot.slack.thread_reply("us", user="U3", channel="C1", thread_ts=question.ts),
        )
        await bot.wait_for_status("finished")
        await bot.idle()
    shown = card(bot, question).all_text()
    [(winner, answer)] = [(u, a) for u, a in (("U2", "eu"), ("U3", "us")) if f"by <@{u}>" in shown]
    loser = "U3" if winner == "U2" else "U2"
    assert tool_outputs(model) == {"q1": answer}
    [said] = bot.slack_api.ephemeral_to(loser)
    assert f"already answered by <@{winner}>" in said and "not sent" in said
    assert bot.slack_api.ephemeral_to(winner) == []
    assert [e["kind"] for e in await bot.audit()].count("answered") == 1


async def test_an_unanswered_question_expires_and_the_agent_is_told(redis_url: str) -> None:
    agent, model = asking_agent("I will not deploy without an answer.")
    policy = POLICY.replace("allow_self_approval: false", "allow_self_approval: false\n"
                            "  expire_after: 1h\n  remind_max: 0")  # fmt: skip
    # The hour is skipped, not waited for; and no real time a loaded machine takes reaches it
    # (2 s once could: the question expired before the test saw its card).
    clock = SkippingClock()
    async with BotHarness(redis_url, agent, policy, clock=clock) as bot:
        question = await ask(bot)
        clock.advance(3600)
        await bot.wait_for_status("finished")
        await bot.idle()
        assert tool_outputs(model) == {"q1": "No one answered within 1h."}
        expired = card(bot, question)
        assert expired.action_ids() == []
        text = expired.all_text()
        assert "*Expired*" in text and "no one answered within 1h" in text
        # A late answer is told clearly; nothing changes.
        await bot.slack.thread_reply("eu", user="U2", channel="C1", thread_ts=question.ts)
        [said] = await told(bot, "U2")
        assert "This question expired" in said
        await bot.idle()
    assert [e["kind"] for e in await bot.audit()].count("expired") == 1


async def test_answerers_follow_the_policy_and_survive_a_restart(redis_url: str) -> None:
    policy = (
        POLICY
        + """
tools:
  - match: ask_human
    answerers: [U3]
"""
    )
    async with FakeSlackAPI() as slack:
        agent, _ = asking_agent()
        async with BotHarness(redis_url, agent, policy, slack=slack) as bot:
            question = await ask(bot)
            assert "Who may answer: <@U3>" in question.all_text()
            for user in ("U1", "U2"):  # neither the starter nor an approver, under this rule
                await bot.slack.thread_reply("eu", user=user, channel="C1", thread_ts=question.ts)
                [said] = await told(bot, user)
                assert "You may not answer this question: it is for <@U3>" in said
        # A new process: nothing in memory but what Redis kept.
        agent, model = asking_agent("Deploying after a restart.", asks=False)
        async with BotHarness(redis_url, agent, policy, slack=slack) as bot:
            await bot.answer(question, user="U3", text="eu-central-1")
            await bot.wait_for_status("finished")
            await bot.idle()
        assert tool_outputs(model) == {"q1": "eu-central-1"}
        assert len(model.calls) == 1
        assert "Deploying after a restart." in [m.text for m in bot.run_thread()]


def test_answerers_are_checked_where_the_policy_is_read() -> None:
    parse_policy(POLICY + "    answerers: [starter, U4, '@oncall']\n")  # channel-level: valid
    with pytest.raises(PolicyError) as bad:
        parse_policy(POLICY + "tools:\n  - match: delete_*\n    answerers: [U4]\n")
    assert "only a rule whose match covers ask_human takes answerers" in str(bad.value)
    with pytest.raises(PolicyError) as bad:
        parse_policy(POLICY + "tools:\n  - match: '*'\n    answerers: [owner]\n")
    assert '"starter"' in str(bad.value)


async def test_a_question_reminds_its_answerers_and_escalates(redis_url: str) -> None:
    agent, model = asking_agent()
    policy = (
        POLICY
        + """
tools:
  - match: ask_human
    answerers: [starter]
    expire_after: 30h
    remind_after: 1h
    remind_max: 1
    escalate_after: 2h
    escalate_to: [U7]
"""
    )
    clock = SkippingClock()
    async with BotHarness(redis_url, agent, policy, clock=clock) as bot:
        question = await ask(bot)
        assert "Who may answer: <@U1>" in question.all_text()
        # Before the escalation, U7 may not answer.
        await bot.slack.thread_reply("eu", user="U7", channel="C1", thread_ts=question.ts)
        [said] = await told(bot, "U7")
        assert "You may not answer this question: it is for <@U1>" in said

        def replies(n: int) -> list[Message] | None:
            found = bot.slack_api.thread(question.channel, question.ts)
            return found if len(found) >= n else None

        clock.advance(3600)  # hours skipped: real time a loaded machine takes never reaches them
        [reminder] = await wait_until(lambda: replies(1), what="the reminder")
        assert "the agent's question is still waiting for an answer from <@U1>" in reminder.text
        clock.advance(3600)
        escalated = (await wait_until(lambda: replies(2), what="the escalation"))[1]
        assert "escalated to <@U7>, who may now answer this question too" in escalated.text
        await bot.idle()
        assert "Who may answer: <@U1>, <@U7>" in card(bot, question).all_text()
        # Once escalated, U7 may answer.
        await bot.slack.thread_reply("eu-north-1", user="U7", channel="C1", thread_ts=question.ts)
        await bot.wait_for_status("finished")
        await bot.idle()
    assert tool_outputs(model) == {"q1": "eu-north-1"}
    kinds = [e["kind"] for e in await bot.audit()]
    assert kinds.count("reminded") == 1 and kinds.count("escalated") == 1


def test_approval_bot_check_reports_misplaced_and_malformed_answerers(tmp_path: Path) -> None:
    env = {"SLACK_BOT_TOKEN": "xoxb-x", "SLACK_SIGNING_SECRET": "y", "OPENAI_API_KEY": "sk-test"}
    misplaced = POLICY + "tools:\n  - match: delete_*\n    answerers: [U4]\n"
    result = check(tmp_path, misplaced, **env)
    assert result.returncode == 1
    assert "tools.0.answerers: only a rule whose match covers ask_human" in result.stderr
    malformed = POLICY + "tools:\n  - match: ask_*\n    answerers: [starter, nobody]\n"
    result = check(tmp_path, malformed, **env)
    assert result.returncode == 1
    assert "tools.0.answerers.1: 'nobody' is not a user id" in result.stderr
    good = POLICY + "tools:\n  - match: ask_human\n    answerers: [starter, '@oncall']\n"
    result = check(tmp_path, good, **env)
    assert result.returncode == 0, result.stderr


async def test_a_question_asked_inside_a_nested_agent_tool(redis_url: str) -> None:
    inner_model = ScriptedModel(
        [
            [function_call("ask_human", {"question": "Which cache?"}, call_id="i1")],
            [assistant_message("cleared the build cache")],
        ]
    )
    janitor = Agent(name="janitor", model=inner_model, tools=[ask_human])
    outer = Agent(
        name="lead",
        model=ScriptedModel(
            [
                [function_call("janitor", {"input": "clean a cache"}, call_id="o1")],
                [assistant_message("all clean")],
            ]
        ),
        tools=[janitor.as_tool(tool_name="janitor", tool_description="Cleans things")],
    )
    async with BotHarness(redis_url, outer, POLICY) as bot:
        await bot.slack.command("clean up", user="U1", channel="C1")
        [question] = await bot.wait_for_questions(1)
        assert "Question from the agent janitor" in question.all_text()
        assert "Which cache?" in question.all_text()
        await bot.answer(question, user="U1", text="the build cache")
        await bot.wait_for_status("finished")
        await bot.idle()
    assert tool_outputs(inner_model) == {"i1": "the build cache"}
    assert "all clean" in [m.text for m in bot.run_thread()]


async def test_the_app_home_offers_the_question_to_its_answerers(redis_url: str) -> None:
    agent, model = asking_agent()
    async with BotHarness(redis_url, agent, POLICY) as bot:
        await ask(bot)
        await open_home(bot, "U1")  # the starter may answer: it waits for them
        await wait_until(lambda: "U1" in bot.slack_api.home_views, what="U1's Home")
        home = home_of(bot, "U1")
        assert "*Question:*" in home.all_text() and "Which region" in home.all_text()
        assert home.action_ids() == [question_blocks.ANSWER]
        opened = len(bot.slack_api.views)
        value = home.button_value(question_blocks.ANSWER)
        click = home_click(bot, question_blocks.ANSWER, value, "U1")
        assert (await bot.slack.send_interaction(click)).status == 200
        await wait_until(lambda: len(bot.slack_api.views) > opened, what="the answer modal")
        view = bot.slack_api.views[-1]["view"]
        field = {"type": "plain_text_input", "value": "eu-west-2"}
        values = {question_blocks.ANSWER_BLOCK: {question_blocks.ANSWER_INPUT: field}}
        assert (await bot.slack.submit(view, values, user="U1")).text == ""
        await bot.wait_for_status("finished")
        await bot.idle()
    assert tool_outputs(model) == {"q1": "eu-west-2"}
