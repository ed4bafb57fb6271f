"""The App Home (issue #22 items 2 and 6): a decision is offered only with the call's arguments
in view; Homes of people the bot does not serve are not kept; an escalatee's Home follows the
call that reached them.

Signed HTTP into the real Bolt app, real Redis, the Slack Web API stand-in at the edge."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from bot.service.policy.source import PolicySource, policy_version
from bot.slack.blocks import ALWAYS_APPROVE, APPROVE
from bot.store import keys
from bot.store.delivery.home import VIEWER_DAYS
from bot.testing.clock import SkippingClock
from bot.testing.harness import BotHarness, wait_until
from bot.testing.slack_api import Message
from tests.agents_for_tests import (
    POLICY,
    Ledger,
    assistant_message,
    delete_then_say,
    function_call,
    ops_agent,
)

LONG = "/var/log/" + "x" * 1500


def home_click(bot: BotHarness, action_id: str, value: str, user: str) -> dict[str, Any]:
    """A click on a button of the App Home: no channel, a `view` container."""
    payload = bot.slack.click_payload(action_id, value, user=user, channel="")
    del payload["channel"], payload["message"]
    payload["container"] = {"type": "view", "view_id": f"VH{user}"}
    payload["view"] = {"id": f"VH{user}", "type": "home", "team_id": bot.slack_api.team_id}
    return payload


async def open_home(bot: BotHarness, user: str) -> None:
    event = {"type": "app_home_opened", "user": user, "channel": f"D{user}", "tab": "home"}
    assert (await bot.slack.send_json(bot.slack.event_payload(event))).status == 200


def home_of(bot: BotHarness, user: str) -> Message:
    return Message("home", "", "", bot.slack_api.home_views[user]["blocks"])


async def test_the_home_shows_the_arguments_it_offers_a_decision_on(redis_url: str) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(
        [
            [
                function_call("delete_logs", {"path": "/var/log/payments-7"}, call_id="c1"),
                function_call("delete_logs", {"path": LONG}, call_id="c2"),
            ],
            [assistant_message("ok")],
        ],
        ledger,
    )
    async with BotHarness(redis_url, agent, POLICY) as bot:
        await bot.slack.command("clean", user="U1", channel="C1")
        cards = await bot.wait_for_approvals(2)
        short, long = sorted(cards, key=lambda c: len(c.all_text()))
        await open_home(bot, "U2")
        await wait_until(lambda: "U2" in bot.slack_api.home_views, what="U2's Home")
        home = home_of(bot, "U2")
        text = home.all_text()
        # The short call: its arguments, then the card's buttons (Always approve among them).
        assert "/var/log/payments-7" in text
        assert home.button_value(ALWAYS_APPROVE) == short.button_value(APPROVE)
        # The long call: shortened, no buttons, its card one click away.
        assert "x" * 500 in text and "truncated" in text
        assert long.button_value(APPROVE) not in [
            e.get("value") for b in home.blocks for e in b.get("elements") or []
        ]
        assert f"/archives/C1/p{long.ts.replace('.', '')}" in text

        # A click on the Home decides the call it showed.
        sent = await bot.slack.send_interaction(
            home_click(bot, APPROVE, short.button_value(APPROVE), "U2")
        )
        assert sent.status == 200
        await wait_until(lambda: "Approved by <@U2>" in short.all_text(), what="the approval")
        await bot.click(long, APPROVE, user="U2")
        await bot.wait_for_status("finished")
    # Both ran, once each (in either order: the second click may join the first one's resume,
    # and the SDK runs a turn's approved calls side by side).
    assert sorted(args["path"] for _, args in ledger.executed) == sorted(
        ["/var/log/payments-7", LONG]
    )


async def test_an_escalatees_open_home_shows_the_call_that_reached_them(redis_url: str) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(delete_then_say(), ledger)
    rules = "  expire_after: 30s\n  remind_max: 0\n  escalate_after: 2s\n  escalate_to: [U9]\n"
    clock = SkippingClock()
    policy = POLICY.replace("defaults:\n", "defaults:\n" + rules)
    async with BotHarness(redis_url, agent, policy, clock=clock) as bot:
        approval = await bot.start_and_wait("clean", user="U1")
        await open_home(bot, "U9")
        await wait_until(lambda: "U9" in bot.slack_api.home_views, what="U9's Home")
        assert home_of(bot, "U9").action_ids() == []  # not an approver yet
        clock.advance(2)
        card = bot.slack_api.messages[(approval.channel, approval.ts)]
        await wait_until(lambda: "Escalated to <@U9>" in card.all_text(), what="the escalation")
        await wait_until(
            lambda: APPROVE in home_of(bot, "U9").action_ids(),
            what="U9's Home with the escalated call",
        )
        assert home_of(bot, "U9").button_value(APPROVE) == approval.button_value(APPROVE)


async def test_homes_of_unserved_workspaces_are_not_kept(redis_url: str) -> None:
    ledger = Ledger()
    agent, _ = ops_agent([[assistant_message("ok")]], ledger)
    async with BotHarness(redis_url, agent, POLICY) as bot:
        client = aioredis.from_url(redis_url, decode_responses=True)
        try:
            # A viewer gone for longer than VIEWER_DAYS, with what they were shown.
            old = time.time() * 1000 - (VIEWER_DAYS + 1) * 86400_000
            gone = f"{bot.slack_api.team_id}:U7"
            await client.zadd(keys.HOME_VIEWERS, {gone: old})
            await client.hset(keys.HOME_SHOWN, gone, f"{old:.0f} abc")
            await client.hset(keys.HOME_ORGS, gone, "")
            # Someone of another workspace opens the bot's Home, then U2 of the served one.
            other = {"type": "app_home_opened", "user": "U5", "channel": "DU5", "tab": "home"}
            payload = bot.slack.event_payload(other)
            payload["team_id"] = "T0OTHER"
            payload["authorizations"][0]["team_id"] = "T0OTHER"
            assert (await bot.slack.send_json(payload)).status == 200
            await open_home(bot, "U2")
            await wait_until(lambda: "U2" in bot.slack_api.home_views, what="U2's Home")
            await wait_until(bot.runtime.home.idle, what="no App Home due")
            assert "U5" not in bot.slack_api.home_views
            kept = set(await client.zrange(keys.HOME_VIEWERS, 0, -1))
            kept |= set(await client.hkeys(keys.HOME_SHOWN))
            kept |= set(await client.hkeys(keys.HOME_ORGS))
            assert kept == {f"{bot.slack_api.team_id}:U2"}
        finally:
            await client.aclose()


async def test_lists_are_limited_per_person(redis_url: str) -> None:
    ledger = Ledger()
    agent, _ = ops_agent([[assistant_message("ok")]], ledger)
    async with BotHarness(redis_url, agent, POLICY, settings={"user_lists_per_minute": 2}) as bot:
        for _ in range(2):
            sent = await bot.slack.command("list", user="U2", channel="C1")
            assert "Waiting for your decision" in json.dumps(sent.json())
        refused = (await bot.slack.command("list", user="U2", channel="C1")).json()
        assert "faster than this bot allows (2 a minute)" in refused["text"], refused
        other = await bot.slack.command("list", user="U3", channel="C1")
        assert "Waiting for your decision" in json.dumps(other.json())  # per person


async def test_a_policy_change_takes_the_call_from_a_removed_approvers_home(
    redis_url: str, tmp_path: Path
) -> None:
    """#22 item 3: U2 is no longer an approver once the policy changes: their open Home stops
    offering the call (and their click from an old Home is refused)."""
    ledger = Ledger()
    agent, _ = ops_agent(delete_then_say(), ledger)
    path = tmp_path / "policy.yml"
    path.write_text(POLICY)
    after = POLICY.replace("approvers: [U2, U3]", "approvers: [U3]")
    source = PolicySource.from_file(path, check_every=0.05)
    async with BotHarness(redis_url, agent, source) as bot:
        approval = await bot.start_and_wait("clean", user="U1")
        await open_home(bot, "U2")
        await wait_until(
            lambda: "U2" in bot.slack_api.home_views and APPROVE in home_of(bot, "U2").action_ids(),
            what="U2's Home with the call",
        )
        path.write_text(after)
        await wait_until(lambda: source.current().version == policy_version(after), what="reload")
        await wait_until(
            lambda: home_of(bot, "U2").action_ids() == [], what="U2's Home without the call"
        )
        sent = await bot.slack.send_interaction(
            home_click(bot, APPROVE, approval.button_value(APPROVE), "U2")
        )
        assert sent.status == 200
        refused = await wait_until(lambda: bot.slack_api.dms("U2"), what="U2 told")
        assert "not among the approvers" in refused[-1].text
        assert ledger.executed == []


async def test_a_viewer_who_opens_the_home_after_the_viewers_were_read_follows_changes(
    redis_url: str,
) -> None:
    """The projector keeps the App Home viewers it read while their version is unchanged (read
    with each pass, #32): a person who opens their Home afterwards changes it, so the next
    change of a run reaches their Home too."""
    ledger = Ledger()
    agent, _ = ops_agent(delete_then_say(), ledger)
    async with BotHarness(redis_url, agent, POLICY) as bot:
        card = await bot.start_and_wait("clean", user="U1")
        await bot.idle()  # the passes that posted the run message and the card read no viewer
        await open_home(bot, "U2")
        await wait_until(
            lambda: (
                "U2" in bot.slack_api.home_views
                and home_of(bot, "U2").action_ids().count(APPROVE) == 1
            ),
            what="U2's Home offering the call",
        )
        await bot.click(card, APPROVE, user="U2")
        await bot.wait_for_status("finished")
        await wait_until(
            lambda: home_of(bot, "U2").action_ids().count(APPROVE) == 0,
            what="U2's Home without the decided call",
        )


async def test_a_home_this_process_makes_due_is_published_without_waiting_for_a_look(
    redis_url: str,
) -> None:
    """The App Home publisher is woken by its own process's changes (#32): a Home opened, or
    made due by a run's change (at once, or once `home_refresh_seconds` after its last publish
    has passed), is published then, not at the publisher's next look at its index (those are
    for other processes' changes). With its looks 30 s apart, each Home here is published
    within a third of that: the code before waited for a look."""
    look = 30.0
    ledger = Ledger()
    agent, _ = ops_agent(delete_then_say(), ledger)
    slow_looks = {"home_poll_seconds": look, "projector_idle_poll_seconds": look}
    async with BotHarness(redis_url, agent, POLICY, settings=slow_looks) as bot:
        await open_home(bot, "U2")
        await wait_until(
            lambda: "U2" in bot.slack_api.home_views, timeout=look / 3, what="U2's Home"
        )
        card = await bot.start_and_wait("clean", user="U1")
        await wait_until(
            lambda: home_of(bot, "U2").action_ids().count(APPROVE) == 1,
            timeout=look / 3,
            what="U2's Home offering the call",
        )
        await bot.click(card, APPROVE, user="U2")
        await wait_until(
            lambda: home_of(bot, "U2").action_ids().count(APPROVE) == 0,
            timeout=look / 3,
            what="U2's Home without the decided call",
        )
        await bot.wait_for_status("finished")
    assert ledger.names() == ["delete_logs"]
