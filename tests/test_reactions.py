"""Reactions on a card (#33 part 1), through signed events against the real bot: with
`APPROVAL_BOT_REACTIONS` on, :white_check_mark: approves and :x: rejects the card's call, as a
click of the person who reacted (judged alike, audited "by reaction"); off (the default), a
reaction decides nothing."""

from __future__ import annotations

from bot.store.records import CallStatus
from bot.testing.harness import BotHarness, wait_until
from bot.testing.requests import Sent
from bot.testing.slack_api import Message
from tests.agents_for_tests import Ledger, assistant_message, function_call, ops_agent

POLICY = """
defaults:
  allow_self_approval: false
channels:
  C1:
    approvers: [U2, U3]
tools:
  - name: typed
    match: restart_service
    confirm: type
  - name: logs
    match: delete_logs
"""
ON = {"reactions": True}


async def react(bot: BotHarness, card: Message, emoji: str, user: str) -> Sent:
    """`user` adds the reaction `emoji` to the message `card` (Slack's `reaction_added`)."""
    event = {
        "type": "reaction_added",
        "user": user,
        "reaction": emoji,
        "item_user": "UBOT",
        "item": {"type": "message", "channel": card.channel, "ts": card.ts},
        "event_ts": "1.0",
    }
    return await bot.slack.send_json(bot.slack.event_payload(event))


def one_call(tool: str = "delete_logs") -> list[object]:
    arguments = {"path": "/a"} if tool == "delete_logs" else {"service": "web"}
    return [[function_call(tool, arguments, call_id="c1")], [assistant_message("done")]]


async def status_of(bot: BotHarness, card: Message) -> CallStatus:
    approval_id = card.button_value("approval_reject")
    call = await bot.runtime.service.store.get_call(approval_id)
    assert call is not None
    return call.status


async def test_a_check_mark_approves_as_the_person_who_reacted(redis_url: str) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(one_call(), ledger)
    async with BotHarness(redis_url, agent, POLICY, settings=ON) as bot:
        await bot.slack.command("clean", user="U1", channel="C1")
        [card] = await bot.wait_for_approvals(1)
        assert (await react(bot, card, "thumbsup", "U2")).status == 200  # another emoji
        assert (await react(bot, card, "white_check_mark", "U4")).status == 200  # not an approver
        await bot.idle()
        assert await status_of(bot, card) == CallStatus.PENDING
        told = bot.slack_api.ephemeral_to("U4")
        assert any("not among the approvers" in t for t in told), told
        await react(bot, card, "white_check_mark", "U2")
        await bot.wait_for_status("finished")
        await bot.idle()
        [decided] = [e for e in await bot.audit() if e["kind"] == "decided"]
        shown = bot.slack_api.messages[(card.channel, card.ts)].all_text()
    assert (decided["user"], decided["detail"]) == ("U2", "by reaction")
    assert "Approved by <@U2> (by reaction)" in shown
    assert ledger.names() == ["delete_logs"]


async def test_a_cross_rejects_without_a_reason(redis_url: str) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(one_call(), ledger)
    async with BotHarness(redis_url, agent, POLICY, settings=ON) as bot:
        await bot.slack.command("clean", user="U1", channel="C1")
        [card] = await bot.wait_for_approvals(1)
        await react(bot, card, "x", "U3")
        await bot.wait_for_status("finished")
        await bot.idle()
        [decided] = [e for e in await bot.audit() if e["kind"] == "decided"]
    assert (decided["user"], decided["decision"], decided["detail"]) == ("U3", "reject",
                                                                         "by reaction")  # fmt: skip
    assert ledger.names() == []


async def test_a_reaction_cannot_give_a_typed_confirmation(redis_url: str) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(one_call("restart_service"), ledger)
    async with BotHarness(redis_url, agent, POLICY, settings=ON) as bot:
        await bot.slack.command("clean", user="U1", channel="C1")
        [card] = await bot.wait_for_approvals(1)
        await react(bot, card, "white_check_mark", "U2")
        await bot.idle()
        await wait_until(lambda: bot.slack_api.ephemeral_to("U2"), what="the refusal")
        assert await status_of(bot, card) == CallStatus.PENDING
        assert any("typed confirmation" in t for t in bot.slack_api.ephemeral_to("U2"))
    assert ledger.names() == []


async def test_reactions_are_off_by_default(redis_url: str) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(one_call(), ledger)
    async with BotHarness(redis_url, agent, POLICY) as bot:
        await bot.slack.command("clean", user="U1", channel="C1")
        [card] = await bot.wait_for_approvals(1)
        assert (await react(bot, card, "white_check_mark", "U2")).status == 200
        await bot.idle()
        assert await status_of(bot, card) == CallStatus.PENDING
        assert bot.slack_api.ephemeral_to("U2") == []
        assert [e for e in await bot.audit() if e["kind"] in ("decided", "refused")] == []
    assert ledger.names() == []


async def test_a_reaction_in_a_channel_shared_with_another_org_decides_nothing(
    redis_url: str,
) -> None:
    """Slack's `reaction_added` does not say which organization the reactor is in (a click
    does: its user's team), so in a channel shared with another organization (the envelope's
    `is_ext_shared_channel`) a reaction cannot tell a guest of the other organization from a
    member: with approvers "*" (the channel's members, who include the guests), it decides
    nothing, for either, and says why; the card's buttons still do."""
    ledger = Ledger()
    agent, _ = ops_agent(one_call(), ledger)
    policy = POLICY.replace("approvers: [U2, U3]", 'approvers: ["*"]')
    async with BotHarness(redis_url, agent, policy, settings=ON) as bot:
        bot.slack_api.channel_members["C1"] = ["U1", "U2", "UX1"]  # UX1: the other org's guest
        await bot.slack.command("clean", user="U1", channel="C1")
        [card] = await bot.wait_for_approvals(1)
        approval_id = card.button_value("approval_reject")
        for user in ("UX1", "U2"):
            event = {
                "type": "reaction_added", "user": user, "reaction": "white_check_mark",
                "item_user": "UBOT", "item": {"type": "message", "channel": "C1", "ts": card.ts},
                "event_ts": "1.0",
            }  # fmt: skip
            payload = {**bot.slack.event_payload(event), "is_ext_shared_channel": True}
            assert (await bot.slack.send_json(payload)).status == 200
        await bot.idle()
        call = await bot.runtime.service.store.get_call(approval_id)
        assert call is not None and call.status == CallStatus.PENDING, call
        for user in ("UX1", "U2"):
            told = bot.slack_api.ephemeral_to(user)
            assert any("shared with another organization" in t for t in told), told
        await bot.click(card, "approval_approve", user="U2")
        await bot.wait_for_status("finished")
    assert ledger.names() == ["delete_logs"]
