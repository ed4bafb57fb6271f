"""The README's own steps, followed literally: what used to trip a new user up."""

from __future__ import annotations

from bot.slack.blocks import permalink, use_slack_api
from bot.testing.harness import BotHarness
from tests.agents_for_tests import POLICY, Ledger, assistant_message, function_call, ops_agent


def test_permalinks_follow_the_slack_host_in_use() -> None:
    try:
        use_slack_api("https://slack-gov.com/api/")
        assert permalink("C1", "1700000000.000100") == (
            "https://slack-gov.com/archives/C1/p1700000000000100"
        )
        use_slack_api("http://127.0.0.1:8080/api/")
        assert permalink("C1", "1.2").startswith("http://127.0.0.1:8080/archives/C1/p12")
    finally:
        use_slack_api("https://slack.com/api/")
    assert permalink("C1", "1.2") == "https://slack.com/archives/C1/p12"


async def test_approval_cards_link_to_the_run_on_the_slack_in_use(redis_url: str) -> None:
    agent, _ = ops_agent(
        [[function_call("delete_logs", {"path": "/tmp/x"}, call_id="c1")], [assistant_message("done")]],
        Ledger(),
    )
    try:
        async with BotHarness(redis_url, agent, POLICY) as bot:
            approval = await bot.start_and_wait("clean /tmp/x", user="U1")
            host = bot.slack_api.url.removesuffix("/").removesuffix("/api")
            run = bot.run_message()
            link = f"{host}/archives/C1/p{run.ts.replace('.', '')}"
            assert f"<{link}|run thread>" in approval.all_text()
            [waiting] = [m for m in bot.run_thread() if m.text.startswith("Waiting for approval")]
            assert f"{host}/archives/C1/p{approval.ts.replace('.', '')}" in waiting.text
            assert "https://slack.com" not in approval.all_text() + waiting.text
    finally:
        use_slack_api("https://slack.com/api/")
