"""`approvers: ["*"]` is anyone in the channel (issue #22 item 1): its members, from Slack's
`conversations.members` (paginated, cached, single flight), on every surface: the card, the
App Home, `/agent list`, status and cancel. A private channel's runs never reach a non-member.

Signed HTTP into the real Bolt app, real Redis, the Slack Web API stand-in at the edge."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bot.service.ports import GroupLookupError
from bot.slack.blocks import APPROVE
from bot.slack.directory.channels import SlackChannels
from bot.testing.harness import BotHarness, status_line, wait_until
from bot.testing.slack_api import FakeSlackAPI, Message
from tests.agents_for_tests import Ledger, delete_then_say, ops_agent
from tests.test_home import home_click, open_home

PRIVATE = """
defaults:
  allow_self_approval: false
channels:
  G1:
    starters: [U1]
    approvers: ["*"]
  G2:
    starters: [U1]
    approvers: ["*"]
"""


def one_call_agent(ledger: Ledger) -> Any:
    agent, _ = ops_agent(delete_then_say(), ledger)
    return agent


def ephemeral(sent: Any) -> str:
    body = sent.json()
    assert body["response_type"] == "ephemeral", body
    return str(body["text"]) + json.dumps(body.get("blocks") or [])


async def test_a_private_channels_run_reaches_its_members_only(redis_url: str) -> None:
    ledger = Ledger()
    async with BotHarness(redis_url, one_call_agent(ledger), PRIVATE) as bot:
        bot.slack_api.members_page = 1  # three pages: U2 is on the last one
        bot.slack_api.channel_members["G1"] = ["U1", "U3", "U2"]
        card = await bot.start_and_wait("clean", user="U1", channel="G1")
        approval_id = card.button_value(APPROVE)
        run_id = status_line(bot.run_message()).split("run `", 1)[1].split("`", 1)[0]

        # U9 is not in G1: nothing of the run on their list (asked from anywhere)...
        listed = ephemeral(await bot.slack.command("list", user="U9", channel="C7"))
        assert "delete_logs" not in listed and run_id not in listed
        assert "Waiting for your decision:* nothing" in listed
        # ...nor on their Home; U2 (a member) sees the call with its buttons.
        await open_home(bot, "U9")
        await open_home(bot, "U2")
        await wait_until(lambda: {"U2", "U9"} <= set(bot.slack_api.home_views), what="Homes")
        outsider_home = Message("home", "", "", bot.slack_api.home_views["U9"]["blocks"])
        assert outsider_home.action_ids() == [] and run_id not in outsider_home.all_text()
        member_home = Message("home", "", "", bot.slack_api.home_views["U2"]["blocks"])
        assert member_home.button_value(APPROVE) == approval_id

        # U9's status and cancel are refused and show nothing of the run.
        status = ephemeral(await bot.slack.command(f"status {run_id}", user="U9", channel="C7"))
        assert "Only the person who started this run" in status and "delete_logs" not in status
        cancel = ephemeral(await bot.slack.command(f"cancel {run_id}", user="U9", channel="C7"))
        assert "Cancelled" not in cancel
        # U9's click from the Home is refused; the call still waits.
        await bot.slack.send_interaction(home_click(bot, APPROVE, approval_id, "U9"))
        await wait_until(lambda: bot.slack_api.dms("U9"), what="the outsider's DM")
        assert "not among the approvers" in bot.slack_api.dms("U9")[0].text
        call = await bot.runtime.service.store.get_call(approval_id)
        assert call is not None and call.status == "pending"

        # U3 (a member) may see the status; U2 (a member) approves from the card.
        u3 = ephemeral(await bot.slack.command(f"status {run_id}", user="U3", channel="G1"))
        assert f"Run `{run_id}`" in u3
        await bot.click(card, APPROVE, user="U2")
        await bot.wait_for_status("finished")
        # Every check above was answered from one lookup of G1's three pages (cached).
        lookups = bot.slack_api.calls_to("conversations.members")
        assert [c.params.get("channel") for c in lookups] == ["G1"] * 3
    assert ledger.names() == ["delete_logs"]


async def test_members_unknown_refuse_with_the_reason(redis_url: str) -> None:
    ledger = Ledger()
    async with BotHarness(redis_url, one_call_agent(ledger), PRIVATE) as bot:
        # G2's members are not set: the stand-in answers channel_not_found.
        card = await bot.start_and_wait("clean", user="U1", channel="G2")
        await bot.slack.click(
            APPROVE, card.button_value(APPROVE), user="U2", channel="G2", message_ts=card.ts
        )
        await wait_until(lambda: bot.slack_api.ephemeral_to("U2"), what="the refusal")
        told = bot.slack_api.ephemeral_to("U2")[-1]
        assert "could not check" in told and "channel_not_found" in told, told
        call = await bot.runtime.service.store.get_call(card.button_value(APPROVE))
        assert call is not None and call.status == "pending"
    assert ledger.executed == []


async def test_the_member_lookup_is_shared_bounded_and_remembers_failures() -> None:
    async with FakeSlackAPI() as slack:
        slack.channel_members["G1"] = ["U1", "U2"]
        channels = SlackChannels(AsyncWebClient(token="xoxb-t", base_url=slack.url), wait=0.3)
        try:
            slack.hang("conversations.members")
            # Five checks at once: one lookup; none waits more than `wait`, each says why.
            results = await asyncio.gather(
                *(channels.members("T1", "G1") for _ in range(5)), return_exceptions=True
            )
            assert all(isinstance(r, GroupLookupError) for r in results), results
            assert "within 0.3 s" in str(results[0])
            assert len(slack.calls_to("conversations.members")) == 1
            slack.release()
            # The lookup goes on: this check shares it (or reads what it cached).
            assert await channels.members("T1", "G1") == {"U1", "U2"}
            assert await channels.members("T1", "G1") == {"U1", "U2"}  # from the cache
            assert len(slack.calls_to("conversations.members")) == 1
            # A failure is remembered: the next check gets the reason without asking Slack.
            for _ in range(2):
                try:
                    await channels.members("T1", "G9")
                except GroupLookupError as exc:
                    assert "channel_not_found" in str(exc)
                else:
                    raise AssertionError("G9's members were not refused")
            assert len(slack.calls_to("conversations.members")) == 2
        finally:
            await channels.close()
