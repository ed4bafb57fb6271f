"""The approval loop end to end: signed Slack requests in, real Redis, fake Slack Web API out."""

from __future__ import annotations

import json

from bot.slack.blocks import APPROVE
from bot.testing.harness import BotHarness, status_line
from tests.agents_for_tests import POLICY, Ledger, assistant_message, function_call, ops_agent


async def test_approve_runs_the_tool_and_posts_the_output(redis_url: str) -> None:
    ledger = Ledger()
    agent, model = ops_agent(
        [
            [function_call("delete_logs", {"path": "/var/log/app"}, call_id="c1")],
            [assistant_message("Deleted the app logs.")],
        ],
        ledger,
    )
    async with BotHarness(redis_url, agent, POLICY) as bot:
        sent = await bot.slack.command("clean up &amp; tidy the logs", user="U1", channel="C1")
        assert sent.status == 200
        [approval] = await bot.wait_for_approvals(1)
        assert ledger.executed == []
        assert approval.action_ids() == [
            "approval_approve",
            "approval_reject",
            "approval_always_approve",
            "approval_always_reject",
        ]
        labels = [
            e["text"]["text"]
            for b in approval.blocks
            if b["type"] == "actions"
            for e in b["elements"]
        ]
        assert labels == ["Approve", "Reject", "Always approve", "Always reject"]
        text = approval.all_text()
        assert "delete_logs" in text and "/var/log/app" in text and "<@U1>" in text
        assert "waiting for 1 approval" in status_line(bot.run_message())

        clicked = await bot.slack.click(
            APPROVE, approval.button_value(APPROVE), user="U2", channel="C1"
        )
        assert clicked.status == 200
        await bot.wait_for_status("finished")
        await bot.idle()

    assert ledger.executed == [("delete_logs", {"path": "/var/log/app"})]
    # The task reached the agent exactly as typed (Slack's &amp; decoded).
    first_input = model.calls[0].input
    assert "clean up & tidy the logs" in json.dumps(first_input)
    thread = [m.text for m in bot.run_thread()]
    assert "Deleted the app logs." in thread
    decided = bot.slack_api.messages[(approval.channel, approval.ts)]
    assert decided.action_ids() == []
    assert "Approved by <@U2>" in decided.all_text()
    # The tool saw who asked.
    [ctx] = ledger.contexts
    assert (ctx.user_id, ctx.channel_id, ctx.team_id) == ("U1", "C1", "T0TEST")
