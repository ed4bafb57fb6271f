"""The grant scope picker (#19, item 2): Always approve under a rule with `grant_max` opens a
form; this run only makes no grant, this channel for N hours does, narrowing to an argument's
value covers only later calls with that value; whatever the form sends is judged against the
policy (a longer time, an argument the call lacks: refused, nothing applied). The card says
what the grant does, the thread which grant settled a call. Signed HTTP, real Redis, the
Slack stand-in."""

from __future__ import annotations

import json
from typing import Any

from bot.slack.blocks import ALWAYS_APPROVE, APPROVE
from bot.slack.grant_forms import NARROW_BLOCK, SCOPE_BLOCK
from bot.store.grants import GrantStore
from bot.testing.harness import BotHarness
from tests.agents_for_tests import Ledger, assistant_message, function_call, ops_agent
from tests.test_grants import GRANTING, cards, open_grant_form, submit_scope


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
    assert any("approved by the grant of U2 in this channel (until " in n for n in notes), notes
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
