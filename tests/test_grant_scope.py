"""The grant scope picker (#19, item 2): Always approve under a rule with `grant_max` opens a
form; this run only makes no grant, this channel for N hours does, narrowing to an argument's
value covers only later calls with that value; whatever the form sends is judged against the
policy (a longer time, an argument the call lacks: refused, nothing applied). The card says
what the grant does, the thread which grant settled a call. Signed HTTP, real Redis, the
Slack stand-in."""

from __future__ import annotations

import json
from typing import Any

from bot.slack.blocks import (
    ALWAYS_APPROVE,
    APPROVE,
    GRANT_REVOKE,
    NARROW_BLOCK,
    SCOPE_BLOCK,
)
from bot.store.grants import GrantStore
from bot.testing.harness import BotHarness, wait_until
from tests.agents_for_tests import Ledger, assistant_message, function_call, ops_agent
from tests.test_grants import GRANTING, cards, open_grant_form, submit_scope
from tests.test_home import home_click, home_of, open_home


def runs_on(ledger: Ledger, *paths: str) -> Any:
    steps: list[Any] = []
    for n, path in enumerate(paths):
        steps += [
            [function_call("delete_logs", {"path": path}, call_id=f"c{n}")],
            [assistant_message(f"Deleted {path}.")],
        ]
    agent, _ = ops_agent(steps, ledger)
    return agent


async def first_form(bot: BotHarness) -> tuple[Any, dict[str, Any]]:
    card = await bot.start_and_wait("clean", user="U1")
    return card, await open_grant_form(bot, card, "U2")


async def status_of(bot: BotHarness, approval_id: str) -> str:
    call = await bot.runtime.service.store.get_call(approval_id)
    assert call is not None
    return str(call.status)


def waiting(bot: BotHarness) -> list[Any]:
    return [m for m in cards(bot) if m.action_ids()]


async def test_the_form_offers_lengths_up_to_grant_max_and_the_arguments(redis_url: str) -> None:
    ledger = Ledger()
    async with BotHarness(redis_url, runs_on(ledger, "/var/log/a"), GRANTING) as bot:
        card, view = await first_form(bot)
        approval_id = card.button_value(APPROVE)
        await bot.idle()
        assert await status_of(bot, approval_id) == "pending"  # the click decided nothing
        text = json.dumps(view)
    scope = next(b for b in view["blocks"] if b.get("block_id") == SCOPE_BLOCK)["element"]
    assert [o["value"] for o in scope["options"]] == ["run", "3600", "14400", "28800"]
    assert scope["initial_option"]["value"] == "run"  # the narrowest is the default
    narrow = next(b for b in view["blocks"] if b.get("block_id") == NARROW_BLOCK)["element"]
    assert [o["value"] for o in narrow["options"]] == ["path"]
    assert '`path` = `\\"/var/log/a\\"`' in text
    assert json.loads(view["private_metadata"]) == {"approval_id": approval_id, "channel": "C1"}


async def test_this_run_only_makes_no_grant(redis_url: str) -> None:
    ledger = Ledger()
    async with BotHarness(redis_url, runs_on(ledger, "/var/log/a", "/var/log/b"), GRANTING) as bot:
        _, view = await first_form(bot)
        sent = await submit_scope(bot, view, "U2", "run")
        assert sent.status == 200 and not sent.text
        await bot.wait_for_status("finished")
        await bot.idle()
        [first] = cards(bot)
        assert "(always, for the rest of this run)" in first.all_text()
        await bot.slack.command("clean b", user="U1", channel="C1")
        await bot.wait_for_approvals(1)
        assert len(waiting(bot)) == 1  # the later run's call waits on its card
        entries = await bot.audit()
    assert ledger.names() == ["delete_logs"]
    assert not [e for e in entries if e["kind"].startswith("grant_")]
    assert [e["decision"] for e in entries if e["kind"] == "decided"] == ["always_approve"]


async def test_this_channel_for_4h_grants_for_4h_and_says_so(redis_url: str) -> None:
    ledger = Ledger()
    async with BotHarness(redis_url, runs_on(ledger, "/var/log/a", "/var/log/b"), GRANTING) as bot:
        _, view = await first_form(bot)
        sent = await submit_scope(bot, view, "U2", "14400")
        assert sent.status == 200 and not sent.text
        await bot.wait_for_status("finished")
        await bot.idle()
        [grant] = await GrantStore(bot.runtime.service.store.redis).in_channel("T0TEST", "C1")
        [first] = cards(bot)
        shown = first.all_text()
        await bot.slack.command("clean b", user="U1", channel="C1")
        await bot.wait_for_status("finished")
        await bot.idle()
        notes = [m.text for m in bot.run_thread()]
        entries = await bot.audit()
    assert round(grant.until - grant.made) == 4 * 3600 and grant.user == "U2" and not grant.narrow
    assert "(always approve: this channel, 4h, `delete_logs`, until " in shown, shown
    assert ledger.names() == ["delete_logs", "delete_logs"]
    assert len(cards(bot)) == 1  # the later call was approved without a card
    assert any("approved by the grant of <@U2> in this channel (until " in n for n in notes), notes
    [made] = [e for e in entries if e["kind"] == "grant_made"]
    assert made["user"] == "U2" and grant.grant_id in made["detail"]


async def test_a_choice_the_policy_does_not_allow_is_refused_and_nothing_applied(
    redis_url: str,
) -> None:
    ledger = Ledger()
    async with BotHarness(redis_url, runs_on(ledger, "/var/log/a"), GRANTING) as bot:
        card, view = await first_form(bot)
        approval_id = card.button_value(APPROVE)
        too_long = await submit_scope(bot, view, "U2", str(24 * 3600))
        assert too_long.json()["response_action"] == "errors"
        said = too_long.json()["errors"][SCOPE_BLOCK]
        assert "lasts at most `8h`" in said and "not `24h`" in said and "Nothing was" in said
        no_such = await submit_scope(bot, view, "U2", "3600", narrow=("force",))
        assert "no argument `force`" in no_such.json()["errors"][SCOPE_BLOCK]
        narrow_run = await submit_scope(bot, view, "U2", "run", narrow=("path",))
        assert "applies to a grant for the channel" in narrow_run.json()["errors"][SCOPE_BLOCK]
        garbage = await submit_scope(bot, view, "U2", "forever")
        assert "Choose one of the lengths" in garbage.json()["errors"][SCOPE_BLOCK]
        stranger = await submit_scope(bot, view, "U9", "3600")
        assert stranger.json()["response_action"] == "errors"
        await bot.idle()
        assert await status_of(bot, approval_id) == "pending"
        assert not await GrantStore(bot.runtime.service.store.redis).any_in("T0TEST", "C1")
        # A crafted Always approve click opens the form again; it decides nothing either.
        await bot.slack.click(ALWAYS_APPROVE, approval_id, user="U2", channel="C1")
        await bot.idle()
        assert await status_of(bot, approval_id) == "pending"
        ok = await submit_scope(bot, view, "U2", "28800")
        assert ok.status == 200 and not ok.text
        await bot.wait_for_status("finished")
        await bot.idle()
        entries = await bot.audit()
    refused = [e for e in entries if e["kind"] == "refused"]
    assert [e["user"] for e in refused] == ["U2", "U2", "U2", "U9"]
    assert [e["kind"] for e in entries].count("grant_made") == 1


async def test_a_narrowed_grant_covers_only_calls_with_that_value(redis_url: str) -> None:
    ledger = Ledger()
    agent = runs_on(ledger, "/var/log/a", "/var/log/a", "/var/log/b")
    async with BotHarness(redis_url, agent, GRANTING) as bot:
        _, view = await first_form(bot)
        sent = await submit_scope(bot, view, "U2", "14400", narrow=("path",))
        assert sent.status == 200 and not sent.text
        await bot.wait_for_status("finished")
        await bot.idle()
        [first] = cards(bot)
        shown = first.all_text()
        # The same value: approved by the grant, no card.
        await bot.slack.command("clean a again", user="U1", channel="C1")
        await bot.wait_for_status("finished")
        await bot.idle()
        assert len(cards(bot)) == 1
        notes = [m.text for m in bot.run_thread()]
        # Another value: the grant does not cover it; it waits on its card (and the grant stays).
        await bot.slack.command("clean b", user="U1", channel="C1")
        await bot.wait_for_approvals(1)
        [second] = waiting(bot)
        assert "/var/log/b" in second.all_text()
        [grant] = await GrantStore(bot.runtime.service.store.redis).in_channel("T0TEST", "C1")
        entries = await bot.audit()
    assert '`delete_logs` where `path` = `"/var/log/a"`, until ' in shown, shown
    assert grant.narrow == {"path": "/var/log/a"}
    assert any('where path = "/var/log/a"' in n for n in notes), notes
    assert ledger.names() == ["delete_logs", "delete_logs"]
    used = [e for e in entries if e["kind"] == "grant_used"]
    assert len(used) == 1 and not [e for e in entries if e["kind"] == "grant_dropped"]


ROUTED_GRANTS = """
defaults:
  allow_self_approval: false
channels:
  C1:
    starters: ["*"]
    approvers: [U2, U3]
tools:
  - match: delete_logs
    approvers: [U4]
    grant_max: 8h
"""


def revoke_value(bot: BotHarness, user: str) -> str:
    home = home_of(bot, user)
    return home.button_value(GRANT_REVOKE) if GRANT_REVOKE in home.action_ids() else ""


async def test_revoke_from_the_home_by_an_approver_and_by_the_grantor_not_by_an_outsider(
    redis_url: str,
) -> None:
    """U4 (the rule's approver, not the channel's) grants; U2 (an approver of the channel)
    may revoke it, and so may U4 (its grantor); U1 (who starts runs there) sees no grants and
    a forged Revoke by U1 with the grant's id is refused."""
    ledger = Ledger()
    agent = runs_on(ledger, "/var/log/a", "/var/log/b")
    async with BotHarness(redis_url, agent, ROUTED_GRANTS) as bot:
        for user in ("U1", "U2", "U4"):
            await open_home(bot, user)
        card = await bot.start_and_wait("clean", user="U1")
        view = await open_grant_form(bot, card, "U4")
        assert (await submit_scope(bot, view, "U4", "28800")).status == 200
        await bot.wait_for_status("finished")
        await wait_until(lambda: revoke_value(bot, "U2") and revoke_value(bot, "U4"),
                         what="the grant on U2's and U4's Homes")  # fmt: skip
        [grant] = await GrantStore(bot.runtime.service.store.redis).in_channel("T0TEST", "C1")
        assert revoke_value(bot, "U2") == revoke_value(bot, "U4") == grant.grant_id
        shown = home_of(bot, "U2").all_text()
        assert "`delete_logs` of agent *ops* in <#C1>" in shown and "grant of <@U4>" in shown
        await wait_until(lambda: "U1" in bot.slack_api.home_views, what="U1's Home")
        assert "Grants" not in home_of(bot, "U1").all_text()

        forged = home_click(bot, GRANT_REVOKE, grant.grant_id, "U1")
        assert (await bot.slack.send_interaction(forged)).status == 200
        # (U1's direct messages also hold their run's notice, which may come before or after.)
        await wait_until(
            lambda: [m for m in bot.slack_api.dms("U1")
                     if "Only the person who made a grant, or an approver" in m.text],
            what="U1 told the Revoke is not theirs",
        )  # fmt: skip
        assert await GrantStore(bot.runtime.service.store.redis).by_id(grant.grant_id)

        by_approver = home_click(bot, GRANT_REVOKE, grant.grant_id, "U2")
        assert (await bot.slack.send_interaction(by_approver)).status == 200
        told = await wait_until(lambda: bot.slack_api.dms("U2"), what="U2 told")
        assert "Revoked the grant for `delete_logs`" in told[-1].text
        await wait_until(lambda: not revoke_value(bot, "U2") and not revoke_value(bot, "U4"),
                         what="the Homes without the grant")  # fmt: skip
        assert await GrantStore(bot.runtime.service.store.redis).by_id(grant.grant_id) is None

        # The later run waits on its card; U4 grants again, then revokes it from the Home.
        await bot.slack.command("clean b", user="U1", channel="C1")
        [second] = await bot.wait_for_approvals(1)
        view = await open_grant_form(bot, second, "U4")
        assert (await submit_scope(bot, view, "U4", "3600")).status == 200
        await bot.wait_for_status("finished")
        await wait_until(lambda: revoke_value(bot, "U4"), what="the new grant on U4's Home")
        again = revoke_value(bot, "U4")
        assert again != grant.grant_id
        own = home_click(bot, GRANT_REVOKE, again, "U4")
        assert (await bot.slack.send_interaction(own)).status == 200
        await wait_until(lambda: not revoke_value(bot, "U4"), what="U4's Home without it")
        await bot.idle()
        entries = await bot.audit()
    revoked = [e for e in entries if e["kind"] == "grant_revoked"]
    assert [e["user"] for e in revoked] == ["U2", "U4"]
    assert [e["user"] for e in entries if e["kind"] == "refused"] == ["U1"]
    assert ledger.names() == ["delete_logs", "delete_logs"]
