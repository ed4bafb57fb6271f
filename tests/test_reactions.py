"""Reactions on a card (#33 part 1), through signed events against the real bot: with
`APPROVAL_BOT_REACTIONS` on, :white_check_mark: approves and :x: rejects the card's call, as a
click of the person who reacted (judged alike, audited "by reaction"); off (the default), a
reaction decides nothing."""

from __future__ import annotations

from typing import Any

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


def reaction_payload(bot: BotHarness, card: Message, user: str, shared: bool) -> dict[str, Any]:
    event = {
        "type": "reaction_added", "user": user, "reaction": "white_check_mark",
        "item_user": "UBOT", "item": {"type": "message", "channel": card.channel, "ts": card.ts},
        "event_ts": "1.0",
    }  # fmt: skip
    return {**bot.slack.event_payload(event), "is_ext_shared_channel": shared}


async def test_only_a_person_of_the_served_workspace_decides_by_reaction(redis_url: str) -> None:
    """Slack's `reaction_added` says neither the reactor's team nor whether they are a bot, and
    approvers "*" are the channel's members: guests of another organization (a shared channel)
    and other apps' bot users among them. Their clicks are refused (a guest's by their team;
    a bot cannot click), so their reactions are too: the bot asks the directory (`users.info`)
    who reacted. Another app's bot's reaction is only a reaction; the guest is told; a member
    of the workspace decides, in the shared channel too."""
    ledger = Ledger()
    agent, _ = ops_agent(one_call(), ledger)
    policy = POLICY.replace("approvers: [U2, U3]", 'approvers: ["*"]')
    async with BotHarness(redis_url, agent, policy, settings=ON) as bot:
        # UX1: the other organization's guest; BOTHER: another app's bot user.
        bot.slack_api.channel_members["C1"] = ["U1", "U2", "UX1", "BOTHER"]
        bot.slack_api.user_teams["UX1"] = "T0OTHER"
        bot.slack_api.bot_users.add("BOTHER")
        await bot.slack.command("clean", user="U1", channel="C1")
        [card] = await bot.wait_for_approvals(1)
        approval_id = card.button_value("approval_reject")
        for user, shared in (("BOTHER", False), ("BOTHER", True), ("UX1", True)):
            sent = await bot.slack.send_json(reaction_payload(bot, card, user, shared=shared))
            assert sent.status == 200
        await bot.idle()
        call = await bot.runtime.service.store.get_call(approval_id)
        assert call is not None and call.status == CallStatus.PENDING, call
        assert bot.slack_api.ephemeral_to("BOTHER") == []
        told = bot.slack_api.ephemeral_to("UX1")
        assert any("not served" in t for t in told), told
        await bot.slack.send_json(reaction_payload(bot, card, "U2", shared=True))
        await bot.wait_for_status("finished")
        [decided] = [e for e in await bot.audit() if e["kind"] == "decided"]
    assert (decided["user"], decided["detail"]) == ("U2", "by reaction")
    assert ledger.names() == ["delete_logs"]
