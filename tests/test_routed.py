"""A decision is judged on what is true when it is recorded (#32, review-fast finding 2): a
call's routing (the advice rules read, an escalation, an automatic decision handed to people)
has a generation (`CallRecord.routed`) that the judgement reads with the call, and decide.lua
and edit.lua decide nothing when it moved since; the person is then judged again, once, on a
fresh read: refused when the new routing excludes them, recorded (once, under the rule in
force) when it still allows them. Against the real bot (real redis-server; the clicks and the
edit as signed requests over HTTP where the interleaving can be made at Slack's edge, else the
service a click reaches, as `tests/test_advisor.py` does); the advisor's model and Slack are
the only stand-ins."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from agents.testing import assistant_message, function_call

from bot.engine.advisor import Advice
from bot.service.digest import digest_of
from bot.service.oversight.advice import encode_advice, ruled_call
from bot.service.policy.gate import rule_for
from bot.service.ports import Actor
from bot.slack.blocks import APPROVE
from bot.store.records import CallRecord, CallStatus
from bot.testing.advisors import AdvisorModel, scripted_advisor
from bot.testing.harness import BotHarness, wait_until
from tests.agents_for_tests import Ledger, ops_agent
from tests.test_auto_reject import policy_file, stored_pause
from tests.test_grants import GRANTING, grant_in_first_run, two_runs

# Before advice, `fine` could apply (its condition cannot be judged yet), so it routes the call:
# U2 and U3 may decide. Advice "high" routes the call to `others`.
ROUTED_AWAY = """
channels:
  C1:
    approvers: [U2, U3]
tools:
  - name: fine
    match: "*"
    when: {advice.risk: [low, medium]}
    approvers: [U2, U3]
  - name: others
    match: "*"
    approvers: [U7]
"""
# The same, with U2 among the approvers of `others` too.
ROUTED_ALONG = ROUTED_AWAY.replace("approvers: [U7]", "approvers: [U7, U2]")
# Over HTTP: `fine`'s approvers are a user group, so U2's judgement asks Slack who is in it.
BY_GROUP = ROUTED_AWAY.replace("approvers: [U2, U3]\n  - name: others", "approvers: [S0SRE]\n"
                               "  - name: others")  # fmt: skip


def steps() -> list[Any]:
    return [[function_call("delete_logs", {"path": "/var/log/app"}, call_id="d1")],
            [assistant_message("done")]]  # fmt: skip


async def paused_call(bot: BotHarness) -> CallRecord:
    store = bot.runtime.service.store
    [started] = [e for e in await bot.audit() if e["kind"] == "run_started"]
    [call] = await store.pause_calls(started["run_id"])
    return call


async def advise_high(bot: BotHarness, approval_id: str) -> str:
    """Write what the advisor writes for advice 'high' (advise.lua: the advice and the fields of
    the rule it routes the call to); the name of that rule."""
    service = bot.runtime.service
    call = await service.store.get_call(approval_id)
    assert call is not None
    run = await service.store.get_run(call.run_id)
    assert run is not None
    call.advice = encode_advice(Advice(risk="high", rationale="deletes logs", concerns=()))
    rule = rule_for(service.judgement.policy_for(run), run, call)
    assert rule is not None and rule.source != call.rule, rule
    _, routed = ruled_call(call, rule)
    assert await service.store.advise(approval_id, {"advice": call.advice, **routed})
    return rule.source


async def entries(bot: BotHarness, kind: str) -> list[dict[str, str]]:
    return [e for e in await bot.audit() if e["kind"] == kind]


async def test_a_click_read_ahead_before_the_advice_routed_the_call_away_is_refused(
    redis_url: str,
) -> None:
    """The review's repro: U2 clicks while nothing else is in flight (the read goes ahead with
    the ack); the advice routes the call to U7 before the judgement runs. U2 is refused (the
    judgement on a fresh read), nothing is recorded, and U7 may still decide."""
    ledger = Ledger()
    agent, _ = ops_agent(steps(), ledger)
    async with BotHarness(redis_url, agent, ROUTED_AWAY) as bot:
        card = await bot.start_and_wait("clean up", user="U1")
        service = bot.runtime.service
        call = await paused_call(bot)
        read = service.read_ahead(call.approval_id)
        await read  # answered while the click's ack is written
        assert await advise_high(bot, call.approval_id) == "others"
        reply = await service.approve(Actor(call_team(bot), "U2"), call.approval_id,
                                      always=False, version="0", read=read)  # fmt: skip
        after = await service.store.get_call(call.approval_id)
        assert after is not None
        assert not reply.ok and after.status == CallStatus.PENDING, (reply, after.status)
        assert "not among the approvers" in reply.text, reply.text
        [refused] = await entries(bot, "refused")
        assert refused["user"] == "U2" and refused["rule"] == "others", refused
        assert await entries(bot, "decided") == []
        await bot.click(card, APPROVE, user="U7")
        await wait_until(lambda: ledger.names() == ["delete_logs"], what="U7's approval")
        [decided] = await entries(bot, "decided")
        assert decided["user"] == "U7", decided


def call_team(bot: BotHarness) -> str:
    return bot.slack_api.team_id


async def test_a_click_read_ahead_before_a_routing_that_still_allows_it_is_recorded_once(
    redis_url: str,
) -> None:
    """The advice routes the call to a rule that still lets U2 decide it: U2's approval is
    recorded once, judged under the rule in force (its audit entry names `others` and its
    approvers, not the rule U2's read ahead showed), and the tool runs once."""
    ledger = Ledger()
    agent, _ = ops_agent(steps(), ledger)
    async with BotHarness(redis_url, agent, ROUTED_ALONG) as bot:
        await bot.start_and_wait("clean up", user="U1")
        service = bot.runtime.service
        call = await paused_call(bot)
        assert call.rule == "fine"
        read = service.read_ahead(call.approval_id)
        await read
        assert await advise_high(bot, call.approval_id) == "others"
        reply = await service.approve(Actor(call_team(bot), "U2"), call.approval_id,
                                      always=False, version="0", read=read)  # fmt: skip
        assert reply.ok, reply
        await wait_until(lambda: ledger.names() == ["delete_logs"], what="the approved tool")
        await bot.idle()
        [decided] = await entries(bot, "decided")
        assert decided["user"] == "U2" and decided["decision"] == "approve", decided
        assert decided["rule"] == "others", decided
        assert json.loads(decided["approvers"]) == ["U7", "U2"], decided
        assert await entries(bot, "refused") == []
        assert ledger.names() == ["delete_logs"]


async def test_a_signed_click_judged_while_the_advice_routes_the_call_away_is_refused(
    redis_url: str,
) -> None:
    """Over HTTP, with the real advisor: U2 clicks Approve; U2's judgement, on the call as read
    before the advice, asks Slack who is in the group `fine` names (held at Slack's edge);
    meanwhile the advisor says "high" and the call is routed to U7. Once Slack answers, the
    judgement would allow U2 on what it read: decide.lua decides nothing, and U2 is judged
    again on a fresh read and refused."""
    advised = asyncio.Event()

    async def high(card: dict[str, Any]) -> dict[str, Any]:
        await advised.wait()
        return {"risk": "high", "rationale": "Deletes the logs.", "concerns": []}

    ledger = Ledger()
    agent, _ = ops_agent(steps(), ledger)
    advisor = scripted_advisor(high)
    assert isinstance(advisor.model, AdvisorModel)
    asked = advisor.model.cards
    async with BotHarness(redis_url, agent, BY_GROUP, advisor=advisor) as bot:
        slack = bot.slack_api
        slack.usergroups = {"S0SRE": ("sre", ["U2"])}
        await bot.slack.command("clean up", user="U1", channel="C1")
        # (not `start_and_wait`: the bot is not idle while its advisor is being asked)
        [card] = await wait_until(lambda: bot.pending_cards() or None, what="the card")
        await wait_until(lambda: asked, what="the advisor asked about the card")
        slack.hang("usergroups.list")
        click = asyncio.create_task(bot.click(card, APPROVE, user="U2"))
        await wait_until(lambda: slack.hanging == 1, what="U2's judgement asking for the group")
        advised.set()
        await wait_until(entries_of(bot, "routed"), what="the advice routing the call")
        slack.release()
        assert (await click).status == 200
        [refused] = await wait_until(entries_of(bot, "refused"), what="U2's refusal")
        assert refused["user"] == "U2" and refused["rule"] == "others", refused
        assert "not among the approvers" in refused["detail"], refused
        await bot.idle()
        call = await paused_call(bot)
        assert call.status == CallStatus.PENDING and await entries(bot, "decided") == []
        assert ledger.names() == []


def entries_of(bot: BotHarness, kind: str) -> Any:
    """A condition for `wait_until`: the audit's entries of `kind`, once there is one."""

    async def found() -> list[dict[str, str]] | None:
        return await entries(bot, kind) or None

    return found


# A standing decision at a pause (#32): U2 decides the channel's calls as a member of the group
# S0SRE, so U2's judgement asks Slack who is in it. Then the policy rejects deleting logs.
GROUPED = GRANTING.replace("approvers: [U2, U3]", "approvers: [S0SRE]")
REJECTING = GROUPED.replace(
    "tools:\n", "tools:\n  - name: no deletes\n    match: delete_logs\n    auto: reject\n"
)


@pytest.mark.parametrize("standing", ["grant", "earlier_always"])
async def test_a_standing_decision_judged_before_the_call_was_routed_anew_records_nothing(
    redis_url: str, tmp_path: Path, standing: str
) -> None:
    """A pause's automatic decisions apply U2's grant (or U2's Always approve made earlier in
    the run) to a call; U2's judgement waits for Slack's group lookup. Meanwhile the policy is
    reloaded to reject deleting logs by itself, and another pass of the pause's automatic
    decisions routes the call to that rule (`_to_rejection`: its rejection follows). Once
    Slack answers, the judgement would allow U2 on what it read: nothing is recorded, U2 is
    judged again on a fresh read and refused, and the call is rejected by the rule. Before,
    the grant (or the Always) approved the call the policy in force rejects by itself."""
    path, source = policy_file(tmp_path, GRANTING)
    ledger = Ledger()
    async with BotHarness(redis_url, two_runs(ledger), source) as bot:
        slack, service = bot.slack_api, bot.runtime.service
        slack.usergroups = {"S0SRE": ("sre", ["U2"])}
        if standing == "grant":
            await grant_in_first_run(bot)  # (U2 named in the policy: no group lookup)
        path.write_text(GROUPED)
        assert source.reload()
        run, approval = await stored_pause(bot, sticky=standing == "earlier_always")
        saved = await service.store.get_call(approval)
        assert saved is not None  # (bound to its digest, as a pause posts it)
        assert await service.store.set_pending_call_fields(approval, {"digest": digest_of(saved)})
        slack.hang("usergroups.list")
        applying = asyncio.create_task(service.runs.auto_decide(run))
        await wait_until(lambda: slack.hanging == 1, what="U2's judgement asking for the group")
        path.write_text(REJECTING)
        assert source.reload()
        call = await service.store.get_call(approval)
        assert call is not None
        rule = rule_for(service.judgement.policy_for(run), run, call)
        assert rule is not None and rule.source == "no deletes", rule
        assert await service.runs._to_rejection(run, call, rule) is not None
        slack.release()
        await applying
        await service.runs.auto_decide(run)  # (the other pass: the rule's rejection)
        after = await service.store.get_call(approval)
        kinds = [e["kind"] for e in await bot.audit()]
    assert after is not None and after.status == CallStatus.REJECTED, after
    assert (after.decided_by, after.rule) == ("policy", "no deletes"), after
    assert "grant_used" not in kinds and "always_approve" not in str(kinds), kinds
    assert ("grant_dropped" if standing == "grant" else "always_dropped") in kinds, kinds
