"""Each turn has a requester (#29, item 3): whoever asked for it. A follow-up's turn is its
author's: self-approval, the card, the tools' `RunContext`, the audit trail and the private
notice of outcomes all name that person, and the run's starter keeps the rights over the run.
Through signed HTTP, real Redis and the Slack stand-in."""

from __future__ import annotations

from agents import Agent
from agents.testing import ScriptedModel

from bot import ask_human
from bot.engine.context import RunContext
from bot.slack.blocks import APPROVE
from bot.store.records import CallStatus
from bot.testing.harness import BotHarness, wait_until
from tests.agents_for_tests import (
    Ledger,
    assistant_message,
    function_call,
    ops_agent,
    tool_outputs,
)
from tests.test_follow_ups import in_thread, say
from tests.test_security import call_status

# U1 starts runs, U2 follows up in them; U1, U2 and U3 approve. Nobody approves alone what
# they asked for.
NO_SELF = """
defaults:
  allow_self_approval: false
channels:
  C1:
    starters: ["*"]
    approvers: [U1, U2, U3]
"""


async def test_a_follow_ups_call_is_its_authors_to_ask_not_to_approve(redis_url: str) -> None:
    """Approver U2 follows up in U1's finished run asking for a deletion: the call is U2's
    request. U2 may not approve it alone; U1 (an approver who did not ask) may. The card, the
    tool's context, the audit trail and the outcome's notice say U2 asked."""
    ledger = Ledger()
    agent, _ = ops_agent(
        [
            [assistant_message("Logs look noisy.")],
            [function_call("delete_logs", {"path": "/var/log/noisy"}, call_id="c2")],
            [assistant_message("Deleted them.")],
        ],
        ledger,
    )
    settings = {"requester_notice_seconds": 0.5}
    async with BotHarness(redis_url, agent, NO_SELF, settings=settings) as bot:
        bot.slack_api.channel_members["C1"] = ["U1", "U2", "U3"]
        await bot.slack.command("look at the logs", user="U1", channel="C1")
        await wait_until(lambda: in_thread(bot, "Logs look noisy."), what="the first answer")
        await say(bot, "delete the noisy ones", user="U2")
        [card] = await bot.wait_for_approvals(1)
        assert "asked by <@U2> · turn 2 of <@U1>'s run" in card.all_text()
        approval_id = card.button_value(APPROVE)

        await bot.click(card, APPROVE, user="U2")  # who asked, alone: refused
        refused = await wait_until(lambda: bot.slack_api.ephemeral_to("U2"), what="U2 told")
        assert "self-approval is not allowed" in refused[-1]
        await bot.idle()
        assert await call_status(redis_url, approval_id) == CallStatus.PENDING
        assert ledger.executed == []

        await bot.click(card, APPROVE, user="U1")  # the starter, who did not ask: allowed
        await wait_until(lambda: in_thread(bot, "Deleted them."), what="turn 2's answer")
        await bot.wait_for_status("finished")
        told = await wait_until(
            lambda: [m for m in bot.slack_api.dms("U2") if "delete_logs" in m.text],
            what="U2 told of the outcome of what they asked for",
        )
        await bot.idle()
        run_id = approval_id.partition(".")[0]
        stored = await bot.runtime.service.store.get_run(run_id)
    assert ledger.executed == [("delete_logs", {"path": "/var/log/noisy"})]
    [context] = ledger.contexts
    assert isinstance(context, RunContext)
    assert (context.user_id, context.starter_id) == ("U2", "U1")
    assert "Approved by <@U1>" in told[0].text and f"<@U1>'s run `{run_id}`" in told[0].text
    # U1 did not ask for it, and decided it: nothing to tell them.
    assert not [m for m in bot.slack_api.dms("U1") if "delete_logs" in m.text]
    audit = await bot.audit()
    turn = [e for e in audit if e.get("approval_id") == approval_id or e["kind"] == "paused"]
    by_kind = {e["kind"]: e for e in turn if e.get("run_id") == run_id}
    assert by_kind["refused"]["user"] == "U2" and by_kind["refused"]["requester"] == "U2"
    assert by_kind["decided"]["user"] == "U1" and by_kind["decided"]["requester"] == "U2"
    assert [e.get("requester", "") for e in audit if e["kind"] == "paused"] == ["U2"]
    assert [e["requester"] for e in audit if e["kind"] == "turn_started"] == ["U2"]
    assert "requester" not in next(e for e in audit if e["kind"] == "run_started")
    # The run is still its starter's (whose rights over it README lists).
    assert stored is not None and stored.user_id == "U1"


async def test_a_question_in_a_follow_ups_turn_is_its_authors_to_answer(redis_url: str) -> None:
    """`starter` among who may answer (the default) is also who asked for the turn: U4, who
    neither started the run nor approves, answers the agent's question in their own turn."""
    model = ScriptedModel(
        [
            [assistant_message("Deployed to eu.")],
            [function_call("ask_human", {"question": "Which region now?"}, call_id="q1")],
            [assistant_message("Deploying to us too.")],
        ]
    )
    agent = Agent(name="ops", instructions="Ask when unsure.", model=model, tools=[ask_human])
    async with BotHarness(redis_url, agent, NO_SELF) as bot:
        bot.slack_api.channel_members["C1"] = ["U1", "U2", "U3", "U4"]
        await bot.slack.command("deploy the app", user="U1", channel="C1")
        await wait_until(lambda: in_thread(bot, "Deployed to eu."), what="the first answer")
        await say(bot, "deploy it again", user="U4")
        [question] = await bot.wait_for_questions(1)
        assert "Who may answer: <@U1>, <@U4>, <@U2>" in question.all_text()
        assert "asked by <@U4> · turn 2 of <@U1>'s run" in question.all_text()
        await bot.answer(question, user="U4", text="us-east-1")
        await wait_until(lambda: in_thread(bot, "Deploying to us too."), what="turn 2's answer")
    assert tool_outputs(model) == {"q1": "us-east-1"}
