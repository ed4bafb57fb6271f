"""A call the policy in force rejects by itself (`auto: reject`) is approved by nobody (#32, the
fast-path review's finding 1): not by a click on its card drawn before the policy said so, not
in the window after the advisor's advice routed it so, not by a grant or an earlier Always; a
person may still reject it. A refused approval, and a reload of the policy, have it rejected by
the rule, as any automatic rejection (audited, its card, the run goes on). Real Redis, the real
Bolt app over HTTP with signed requests; the Slack and model stand-ins only."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from agents.testing import assistant_message, function_call

from bot.engine.advisor import Advice
from bot.service.digest import digest_of
from bot.service.judgement import Allowed, Attempt, Refused, Way
from bot.service.oversight.advice import ruled_call
from bot.service.oversight.advised import encode_advice
from bot.service.policy.gate import rule_for
from bot.service.policy.source import CHECK_EVERY_SECONDS, PolicySource
from bot.service.ports import Actor
from bot.slack.blocks import APPROVE
from bot.store import keys
from bot.store.grants import Grant, new_grant_id
from bot.store.records import CallRecord, CallStatus, RunRecord
from bot.testing.harness import BotHarness, wait_until
from tests.agents_for_tests import Ledger, ops_agent
from tests.saved_pauses import saved_pause
from tests.test_grants import GRANTING, grant_in_first_run, two_runs

BEFORE = """
channels:
  C1:
    approvers: [U2, U3]
"""
NO_DELETES = """
tools:
  - name: no deletes
    match: delete_logs
    auto: reject
    reason: deleting logs is forbidden now
"""
AFTER = BEFORE + NO_DELETES
# The advisor's high risk routes delete_logs to an automatic rejection; before any advice the
# condition cannot be judged, so the call waits for the channel's approvers.
ADVISED = (
    BEFORE
    + """
tools:
  - name: risky deletes
    match: delete_logs
    when: {advice.risk: high}
    auto: reject
"""
)


def one_call(ledger: Ledger) -> object:
    steps = [[function_call("delete_logs", {"path": "/var/log/app"}, call_id="d1")],
             [assistant_message("done")]]  # fmt: skip
    agent, _ = ops_agent(steps, ledger)
    return agent


async def rejected_by_rule(bot: BotHarness, approval_id: str) -> CallRecord:
    """Wait until the call is rejected by the policy (the rule's automatic rejection)."""
    store = bot.runtime.service.store

    async def rejected() -> CallRecord | None:
        call = await store.get_call(approval_id)
        done = call is not None and call.status == CallStatus.REJECTED
        return call if done and call.decided_by == "policy" else None

    found: CallRecord = await wait_until(rejected, what="the call rejected by the rule")
    return found


def policy_file(
    tmp_path: Path, text: str, check_every: float = CHECK_EVERY_SECONDS
) -> tuple[Path, PolicySource]:
    """A policy file that holds `text` and the bot's source of it (checked for changes every
    `check_every` seconds): the test writes the policy in force next over it."""
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return path, PolicySource.from_file(path, check_every=check_every)


def approval_of(card: object) -> str:
    return str(card.button_value(APPROVE)).split(":")[0]  # type: ignore[attr-defined]


async def test_an_approval_of_a_call_the_policy_now_rejects_is_refused_and_the_rule_rejects_it(
    redis_url: str, tmp_path: Path
) -> None:
    path, source = policy_file(tmp_path, BEFORE)
    ledger = Ledger()
    async with BotHarness(redis_url, one_call(ledger), source) as bot:
        card = await bot.start_and_wait("clean up", user="U1")
        path.write_text(AFTER)
        assert source.reload()  # the operator forbids deleting logs; the card still shows
        sent = await bot.click(card, APPROVE, user="U2")
        assert sent.status == 200
        call = await rejected_by_rule(bot, approval_of(card))
        await bot.wait_for_status("finished")
        told = " ".join(
            await wait_until(lambda: bot.slack_api.ephemeral_to("U2"), what="U2 told why")
        )
        await bot.idle()
        entries = await bot.audit()
        shown = bot.slack_api.messages[(card.channel, card.ts)].all_text()
    assert ledger.names() == []  # the tool never ran
    assert "rejects this call automatically" in told and "`no deletes`" in told, told
    assert call.rule == "no deletes" and call.reason == "deleting logs is forbidden now"
    decided = [(e.get("user", ""), e["decision"]) for e in entries if e["kind"] == "decided"]
    assert decided == [("", "auto_reject")], decided
    [refused] = [e for e in entries if e["kind"] == "refused"]
    assert refused["user"] == "U2" and "rule no deletes" in refused["detail"]
    [routed] = [e for e in entries if e["kind"] == "routed"]
    assert "no deletes" in routed["detail"]
    assert "Rejected automatically by policy rule `no deletes`" in shown, shown


async def test_a_reload_rejects_the_pending_calls_the_new_policy_rejects_by_itself(
    redis_url: str, tmp_path: Path
) -> None:
    path, source = policy_file(tmp_path, BEFORE, check_every=0.05)
    ledger = Ledger()
    settings = {"job_lease_seconds": 1}  # a sweep every second, not every 30
    async with BotHarness(redis_url, one_call(ledger), source, settings=settings) as bot:
        card = await bot.start_and_wait("clean up", user="U1")
        path.write_text(AFTER)  # nobody clicks: the sweeper's next pass sees the reload
        await rejected_by_rule(bot, approval_of(card))
        await bot.wait_for_status("finished")
        await bot.idle()
        entries = await bot.audit()
    assert ledger.names() == []
    assert [e["decision"] for e in entries if e["kind"] == "decided"] == ["auto_reject"]


async def test_a_person_may_still_reject_a_call_the_policy_now_rejects(
    redis_url: str, tmp_path: Path
) -> None:
    path, source = policy_file(tmp_path, BEFORE)
    ledger = Ledger()
    async with BotHarness(redis_url, one_call(ledger), source) as bot:
        card = await bot.start_and_wait("clean up", user="U1")
        approval = approval_of(card)
        path.write_text(AFTER)
        assert source.reload()
        await bot.reject(card, user="U3", reason="not now")
        await bot.wait_for_status("finished")
        await bot.idle()
        call = await bot.runtime.service.store.get_call(approval)
        entries = await bot.audit()
    assert ledger.names() == []
    assert call is not None and call.status == CallStatus.REJECTED and call.decided_by == "U3"
    assert [e for e in entries if e["kind"] == "refused"] == []


async def test_a_click_after_the_advice_routed_the_call_to_a_rejection_cannot_approve_it(
    redis_url: str,
) -> None:
    """The advisor wrote its advice and the call's new rule (advise.lua) and has not yet applied
    the automatic rejection (`Advisor._record`: two audit writes, then `auto_decide`): a click
    landing in that window is refused, and the call is rejected by the rule."""
    ledger = Ledger()
    async with BotHarness(redis_url, one_call(ledger), ADVISED) as bot:
        card = await bot.start_and_wait("clean up", user="U1")
        service = bot.runtime.service
        approval = approval_of(card)
        call = await service.store.get_call(approval)
        run = await service.store.get_run(approval.split(".")[0])
        assert call is not None and run is not None and call.status == CallStatus.PENDING
        call.advice = encode_advice(Advice("high", "Deletes logs."))
        rule = rule_for(service.judgement.policy_for(run), run, call)
        assert rule is not None and rule.auto == "reject"
        _, routed = ruled_call(call, rule)
        assert await service.store.advise(approval, {"advice": call.advice, **routed})
        await bot.click(card, APPROVE, user="U2")
        await rejected_by_rule(bot, approval)
        await bot.wait_for_status("finished")
        await bot.idle()
        entries = await bot.audit()
    assert ledger.names() == []
    assert [e["decision"] for e in entries if e["kind"] == "decided"] == ["auto_reject"]
    assert [e["user"] for e in entries if e["kind"] == "refused"] == ["U2"]


async def stored_pause(bot: BotHarness, *, sticky: bool) -> tuple[RunRecord, str]:
    """A pause saved under the first policy by a worker that stopped before applying its
    automatic decisions (as the sweeper then finds it): one call of delete_logs posted for
    people; `sticky`: with U2's Always approve made earlier in the run."""
    run_id, [call] = await saved_pause(bot, {
        "arguments": json.dumps({"path": "/var/log/b"}), "rule": "tools[0] (delete_logs)",
        "approvers": json.dumps(["U2", "U3"]), "allow_always": True,
    })  # fmt: skip
    store = bot.runtime.service.store
    if sticky:
        made = {
            "decision": "approved",
            "team": "T0TEST",
            "user": "U2",
            "at": f"{time.time():.3f}",
            "reason": "",
            "approval_id": "earlier",
            "agent": "ops",
            "tool": "delete_logs",
        }
        await store.redis.hset(keys.sticky_key(run_id), call.sticky, json.dumps(made))
    paused = await store.get_run(run_id)
    assert paused is not None
    return paused, call.approval_id


@pytest.mark.parametrize("standing", ["grant", "earlier_always"])
async def test_a_grant_or_an_earlier_always_does_not_approve_a_call_the_policy_rejects(
    redis_url: str, tmp_path: Path, standing: str
) -> None:
    path, source = policy_file(tmp_path, GRANTING)
    ledger = Ledger()
    async with BotHarness(redis_url, two_runs(ledger), source) as bot:
        if standing == "grant":
            await grant_in_first_run(bot)  # U2's grant for delete_logs in C1, for 8 hours
        run, approval = await stored_pause(bot, sticky=standing == "earlier_always")
        first = "tools:\n  - name: no deletes\n    match: delete_logs\n    auto: reject\n"
        path.write_text(GRANTING.replace("tools:\n", first))
        assert source.reload()
        await bot.runtime.service.runs.auto_decide(run)
        call = await bot.runtime.service.store.get_call(approval)
        entries = await bot.audit()
    assert call is not None and call.status == CallStatus.REJECTED, call
    assert call.decided_by == "policy" and call.rule == "no deletes"
    assert [e for e in entries if e["kind"] == "grant_used"] == []


async def test_a_standing_decision_in_the_run_does_not_approve_a_call_the_policy_rejects(
    redis_url: str,
) -> None:
    """The window of a reload in the run: the call was built under the policy before, and a
    grant, an earlier Always or an edit's one-shot approval is judged under the one after."""
    ledger = Ledger()
    async with BotHarness(redis_url, one_call(ledger), AFTER) as bot:
        judgement = bot.runtime.service.judgement
        stamp = f"{time.time():.3f}"
        run = RunRecord(
            run_id=keys.new_run_id(), team_id="T0TEST", user_id="U1", channel_id="C1",
            agent_name="ops", task="t", status="running", created_at=stamp, updated_at=stamp,
        )  # fmt: skip
        call = CallRecord(
            approval_id=keys.new_approval_id(run.run_id), run_id=run.run_id, index=0,
            call_id="c0", agent="ops", tool="delete_logs", kind="function",
            sticky="ops::delete_logs", arguments=json.dumps({"path": "/var/log/b"}),
            rule="channels.C1", channel_id="C1",
        )  # fmt: skip
        call.digest = digest_of(call)
        u2 = Actor("T0TEST", "U2")
        now = time.time()
        grant = Grant(
            sticky=call.sticky, team="T0TEST", user="U2", channel="C1", made=now,
            until=now + 3600, approval_id="earlier", narrow={}, grant_id=new_grant_id(),
            tool="delete_logs",
        )  # fmt: skip
        attempts = [Attempt(Way.GRANT_USE, grant=grant), Attempt(Way.EARLIER_ALWAYS),
                    Attempt(Way.EDITED_CALL, edit_required=1)]  # fmt: skip
        judged = [await judgement.settle(u2, run, call, a) for a in attempts]
        always_reject = await judgement.settle(u2, run, call, Attempt(Way.EARLIER_ALWAYS, False))
    for each in judged:
        assert isinstance(each, Refused), each
        assert "rejects this call automatically" in each.reason
    assert isinstance(always_reject, Allowed)  # a rejection still stands
