"""Grants (#19, item 2): "Always approve" under a rule with `grant_max` lasts in the channel,
for that agent's tool, for later runs; re-judged at each use, dropped when expired or when the
policy tightens. Through signed clicks, real Redis and the Slack stand-in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bot.service.policy.source import PolicySource
from bot.slack.blocks import (
    ALWAYS_APPROVE,
    APPROVE,
    GRANT_MODAL,
    NARROW_BLOCK,
    NARROW_INPUT,
    SCOPE_BLOCK,
    SCOPE_INPUT,
)
from bot.testing.clock import SkippingClock
from bot.testing.harness import BotHarness
from tests.agents_for_tests import Ledger, assistant_message, function_call, ops_agent

GRANTING = """
defaults:
  allow_self_approval: false
channels:
  C1:
    starters: ["*"]
    approvers: [U2, U3]
tools:
  - match: delete_logs
    grant_max: 8h
"""
NO_GRANTS = GRANTING.replace("    grant_max: 8h\n", "")


def two_runs(ledger: Ledger) -> Any:
    agent, _ = ops_agent(
        [
            [function_call("delete_logs", {"path": "/var/log/a"}, call_id="c1")],
            [assistant_message("Deleted a.")],
            [function_call("delete_logs", {"path": "/var/log/b"}, call_id="c2")],
            [assistant_message("Deleted b.")],
        ],
        ledger,
    )
    return agent


def cards(bot: BotHarness) -> list[Any]:
    return [m for m in bot.slack_api.approval_messages() if "delete_logs" in m.all_text()]


async def open_grant_form(bot: BotHarness, card: Any, user: str) -> dict[str, Any]:
    """`user` clicks Always approve; returns the scope form the bot opened."""
    view = await bot.modal(card, ALWAYS_APPROVE, user=user)
    assert view["callback_id"] == GRANT_MODAL
    return view


async def submit_scope(
    bot: BotHarness, view: dict[str, Any], user: str, choice: str, narrow: tuple[str, ...] = ()
) -> Any:
    values: dict[str, Any] = {
        SCOPE_BLOCK: {SCOPE_INPUT: {"type": "radio_buttons",
                                    "selected_option": {"value": choice}}},
        NARROW_BLOCK: {NARROW_INPUT: {"type": "checkboxes",
                                      "selected_options": [{"value": n} for n in narrow]}},
    }  # fmt: skip
    return await bot.slack.submit(view, values, user=user)


async def grant_in_first_run(
    bot: BotHarness, choice: str = str(8 * 3600), narrow: tuple[str, ...] = ()
) -> None:
    first = await bot.start_and_wait("clean a", user="U1")
    view = await open_grant_form(bot, first, "U2")
    sent = await submit_scope(bot, view, "U2", choice, narrow)
    assert sent.status == 200 and not sent.text, sent.text
    await bot.wait_for_status("finished")
    await bot.idle()


async def test_a_grant_settles_a_later_run_in_the_channel_without_a_card(
    redis_url: str,
) -> None:
    ledger = Ledger()
    async with BotHarness(redis_url, two_runs(ledger), GRANTING) as bot:
        await grant_in_first_run(bot)
        await bot.slack.command("clean b", user="U1", channel="C1")
        await bot.wait_for_status("finished")
        await bot.idle()
        entries = await bot.audit()
        shown = cards(bot)
    assert ledger.names() == ["delete_logs", "delete_logs"]
    assert len(shown) == 1  # the first run's card only
    kinds = [e["kind"] for e in entries]
    [made] = [e for e in entries if e["kind"] == "grant_made"]
    [used] = [e for e in entries if e["kind"] == "grant_used"]
    assert made["user"] == used["user"] == "U2" and used["channel"] == "C1"
    assert "until" in made["detail"] and kinds.index("grant_made") < kinds.index("grant_used")
    assert used["run_id"] != made["run_id"]


async def test_an_expired_grant_is_dropped_and_the_call_waits_for_a_person(
    redis_url: str,
) -> None:
    ledger = Ledger()
    clock = SkippingClock()
    async with BotHarness(redis_url, two_runs(ledger), GRANTING, clock=clock) as bot:
        await grant_in_first_run(bot)
        clock.advance(8 * 3600 + 1)
        await bot.slack.command("clean b", user="U1", channel="C1")
        await bot.wait_for_approvals(1)
        [second] = [m for m in cards(bot) if m.action_ids()]
        assert "/var/log/b" in second.all_text()
        assert ledger.names() == ["delete_logs"]
        await bot.click(second, APPROVE, user="U3")
        await bot.wait_for_status("finished")
        await bot.idle()
        entries = await bot.audit()
    [dropped] = [e for e in entries if e["kind"] == "grant_dropped"]
    assert dropped["detail"].startswith("it expired")
    assert not [e for e in entries if e["kind"] == "grant_used"]


async def test_a_grant_is_dropped_when_the_policy_no_longer_allows_it(
    redis_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "policy.yml"
    path.write_text(GRANTING)
    source = PolicySource.from_file(path)
    ledger = Ledger()
    async with BotHarness(redis_url, two_runs(ledger), source) as bot:
        await grant_in_first_run(bot)
        path.write_text(NO_GRANTS)  # grant_max removed: Always is for the run only again
        assert source.reload()
        await bot.slack.command("clean b", user="U1", channel="C1")
        await bot.wait_for_approvals(1)
        assert len([m for m in cards(bot) if m.action_ids()]) == 1
        assert ledger.names() == ["delete_logs"]
        notes = [m.text for m in bot.run_thread()]
        entries = await bot.audit()
    assert any("no longer holds" in n for n in notes), notes
    [dropped] = [e for e in entries if e["kind"] == "grant_dropped"]
    assert "no longer allows grants" in dropped["detail"]


def ephemeral(sent: Any) -> str:
    body = sent.json()
    assert body["response_type"] == "ephemeral", body
    return str(body["text"])


async def test_grants_are_listed_and_revoked_by_an_approver_not_by_anyone(
    redis_url: str,
) -> None:
    ledger = Ledger()
    async with BotHarness(redis_url, two_runs(ledger), GRANTING) as bot:
        await grant_in_first_run(bot)
        listed = ephemeral(await bot.slack.command("grants", user="U1", channel="C1"))
        assert "`ops::delete_logs` by <@U2>, until" in listed
        refused = ephemeral(
            await bot.slack.command("revoke ops::delete_logs", user="U1", channel="C1")
        )
        assert "Only the person who made a grant, or an approver" in refused
        revoked = ephemeral(
            await bot.slack.command("revoke ops::delete_logs", user="U3", channel="C1")
        )
        assert "Revoked the grant for `ops::delete_logs`" in revoked
        after = ephemeral(await bot.slack.command("grants", user="U1", channel="C1"))
        assert "No grants in this channel" in after
        await bot.slack.command("clean b", user="U1", channel="C1")
        await bot.wait_for_approvals(1)  # the later run's call waits on its card
        assert ledger.names() == ["delete_logs"]
        entries = await bot.audit()
    [revoke] = [e for e in entries if e["kind"] == "grant_revoked"]
    assert revoke["user"] == "U3" and "ops::delete_logs in C1" in revoke["detail"]
    assert [e["user"] for e in entries if e.get("decision") == "revoke"] == ["U1", "U3"]
    assert not [e for e in entries if e["kind"] == "grant_used"]
