"""What a hostile review found (issue #7, items 3 to 8): other organizations, ambiguous replies,
evicted comments, invisible characters, spreadsheet formulas and malformed bodies. Signed HTTP
into the real app, real Redis, the Slack stand-in."""

from __future__ import annotations

from typing import Any

from bot.service.authorize import UNKNOWN_INSTALLATION
from bot.slack.blocks import APPROVE
from bot.testing.harness import BotHarness, wait_until
from bot.testing.slack_api import FakeSlackAPI
from tests.agents_for_tests import Ledger, assistant_message, function_call, ops_agent
from tests.test_security import audited, call_status

OPEN = """
channels:
  C1:
    starters: ["*"]
    approvers: [U2, U3]
"""


def reads_then_deletes(ledger: Ledger) -> Any:
    """An ungated read, then a gated delete: what an outsider could run is the read."""
    agent, _ = ops_agent(
        [
            [function_call("read_logs", {"path": "/secrets"}, call_id="r1")],
            [function_call("delete_logs", {"path": "/a"}, call_id="c1")],
            [assistant_message("ok")],
        ],
        ledger,
    )
    return agent


# 3. Slack Connect and other organizations --------------------------------------------------------


async def test_a_shared_channel_guest_of_another_org_cannot_start_runs(redis_url: str) -> None:
    """No `workspace:` in the policy and starters "*": only the installed workspace is served."""
    ledger = Ledger()
    async with BotHarness(redis_url, reads_then_deletes(ledger), OPEN) as bot:
        sent = await bot.slack.command("read the secrets", user="UX1", channel="C1", team="T0CONN")
        assert sent.json()["text"] == "This workspace is not served by this bot."
        await bot.idle()
        assert bot.slack_api.top_level() == []
        # The same command from the installed workspace starts a run.
        approval = await bot.start_and_wait("clean", user="U1")
        approval_id = approval.button_value(APPROVE)
        # A guest of the other org clicking Approve changes nothing either.
        await bot.slack.click(APPROVE, approval_id, user="UX1", channel="C1", team="T0CONN")
        await bot.idle()
        assert await call_status(redis_url, approval_id) == "pending"
        assert bot.slack_api.ephemeral_to("UX1") == ["This workspace is not served by this bot."]
        entries = await bot.audit()
        audit = await audited(bot)
    assert [e["team"] for e in entries if e["kind"] == "start_refused"] == ["T0CONN"]
    assert audit["refused"] == ["UX1"] and "decided" not in audit
    assert ledger.names() == ["read_logs"]  # the insider's run only


async def test_an_org_member_of_another_workspace_is_not_served_by_a_workspace_install(
    redis_url: str,
) -> None:
    slack = FakeSlackAPI(enterprise_id="E0ORG")
    await slack.start()
    try:
        ledger = Ledger()
        async with BotHarness(redis_url, reads_then_deletes(ledger), OPEN, slack=slack) as bot:
            other = await bot.slack.command("hi", user="UX2", channel="C1", team="T0SISTER")
            assert other.json()["text"] == "This workspace is not served by this bot."
            await bot.idle()
            assert bot.slack_api.top_level() == []
            await audited(bot)
    finally:
        await slack.stop()
    assert ledger.executed == []


async def test_until_slack_says_where_the_bot_is_installed_everyone_is_refused(
    redis_url: str,
) -> None:
    """The bot's own auth.test at start-up fails (Bolt's later one succeeds): fail closed, with
    the reason, until the background retry learns the installation."""
    slack = FakeSlackAPI()
    await slack.start()
    failures = iter([True])
    slack.fail_when = lambda method, _: method == "auth.test" and next(failures, False)
    try:
        ledger = Ledger()
        async with BotHarness(redis_url, reads_then_deletes(ledger), OPEN, slack=slack) as bot:
            refused = await bot.slack.command("hi", user="U1", channel="C1")
            assert refused.json()["text"] == UNKNOWN_INSTALLATION
            authorizer = bot.runtime.service.authorizer
            await wait_until(
                lambda: authorizer.installation is not None, timeout=15, what="auth.test"
            )
            await bot.start_and_wait("clean", user="U1")
            await audited(bot)
    finally:
        await slack.stop()
    assert ledger.names() == ["read_logs"]
