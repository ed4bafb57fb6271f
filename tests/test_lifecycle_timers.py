"""Nothing waits forever unseen: a pending call expires (rejected, said on its card and to the
agent), its approvers are reminded in the card's thread, and it escalates to more people.
Signed HTTP in, real Redis, the Slack stand-in out; durations of a second or two."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from bot import metrics
from bot.service.policy.rules import PolicyError, parse_policy
from bot.service.policy.source import PolicySource, policy_version
from bot.slack.blocks import APPROVE
from bot.store import keys
from bot.store.records import CallRecord, Decided
from bot.testing.clock import SkippingClock
from bot.testing.cluster import redis_for
from bot.testing.harness import BotHarness, wait_until
from bot.testing.requests import SlackRequests
from bot.testing.slack_api import FakeSlackAPI, Message
from tests.agents_for_tests import Ledger, assistant_message, function_call, ops_agent, tool_outputs
from tests.processes import bot_env, executions, free_port, running_bot

CHANNEL = """
channels:
  C1:
    starters: ["*"]
    approvers: [U2, U3]
"""


def policy(defaults: str) -> str:
    return f"defaults:\n  allow_self_approval: false\n{defaults}{CHANNEL}"


def one_call(path: str = "/var/log/app") -> tuple[object, object, Ledger]:
    ledger = Ledger()
    agent, model = ops_agent(
        [
            [function_call("delete_logs", {"path": path}, call_id="c1")],
            [assistant_message("Understood, I did not delete anything.")],
        ],
        ledger,
    )
    return agent, model, ledger


def card(bot: BotHarness, approval: Message) -> Message:
    return bot.slack_api.messages[(approval.channel, approval.ts)]


def card_thread(bot: BotHarness, approval: Message) -> list[Message]:
    return bot.slack_api.thread(approval.channel, approval.ts)


async def call_hash(redis_url: str, approval_id: str) -> dict[str, str]:
    client = await redis_for(redis_url, decode_responses=True)
    try:
        found = await client.hgetall(keys.call_key(approval_id))  # type: ignore[misc]
        return {str(k): str(v) for k, v in found.items()}
    finally:
        await client.aclose()


async def due_now(bot: BotHarness, approval_id: str) -> None:
    """Move a call's expiry (its pause + expire_after) to now, rather than wait for it."""
    key = keys.call_key(approval_id)
    after = int(await bot.runtime.redis.hget(key, "expire_after"))  # type: ignore[misc]
    await bot.runtime.redis.hset(key, "paused_at", f"{time.time() - after:.3f}")  # type: ignore[misc]


def expiry(stored: dict[str, str]) -> float:
    """A stored call's expiry, as the bot reads it."""
    return CallRecord.from_hash(stored).expires_at


async def late_click(bot: BotHarness, approval: Message, approval_id: str, user: str) -> None:
    """A click on a button the card no longer shows (a client that has not refreshed yet)."""
    sent = await bot.slack.click(
        APPROVE, approval_id, user=user, channel=approval.channel, message_ts=approval.ts
    )
    assert sent.status == 200


@pytest.mark.cluster_too
async def test_an_undecided_call_expires_and_the_run_goes_on(redis_url: str) -> None:
    agent, model, ledger = one_call()
    expired_before = metrics.EXPIRIES._value.get()
    # An hour, skipped: no loaded machine reaches it before the clock is moved (two seconds
    # did: the call expired before the test saw its card).
    rules = "  expire_after: 1h\n  remind_max: 0\n"
    clock = SkippingClock()
    async with BotHarness(redis_url, agent, policy(rules), clock=clock) as bot:
        approval = await bot.start_and_wait("clean the logs", user="U1")
        aid = approval.button_value(APPROVE)
        shown = approval.all_text()
        assert "Expires <!date^" in shown and "UTC>" in shown  # Slack date, with a fallback
        assert "Reminds" not in shown  # remind_max: 0
        stored = await call_hash(redis_url, aid)
        waits = expiry(stored) - float(stored["paused_at"])
        assert waits == pytest.approx(3600, abs=0.01)

        clock.advance(3600)
        await bot.wait_for_status("finished")
        await bot.idle()
        expired = card(bot, approval)
        assert expired.action_ids() == []
        text = expired.all_text()
        assert "Expired" in text and "no reviewer decided within 1h" in text
        assert "Approved" not in text and "Rejected" not in text
        # The agent got the rejection, saying why; the tool never ran.
        assert tool_outputs(model)["c1"] == "No reviewer decided within 1h; the call was not run."  # type: ignore[arg-type]
        assert ledger.executed == []
        stored = await call_hash(redis_url, aid)
        assert stored["status"] == "expired"
        # On time: not before its expiry (the card still waited before the clock was moved).
        assert float(stored["decided_at"]) >= expiry(stored)
        audit = await bot.audit()
        assert [e["kind"] for e in audit].count("expired") == 1
        [entry] = [e for e in audit if e["kind"] == "expired"]
        assert entry["tool"] == "delete_logs" and "1h" in entry["detail"]
        assert [e["kind"] for e in audit].count("resumed") == 1
        assert metrics.EXPIRIES._value.get() == expired_before + 1

        # A late click is told clearly; nothing changes.
        await late_click(bot, approval, aid, "U2")
        told = await wait_until(lambda: bot.slack_api.ephemeral_to("U2"), what="the answer")
        assert "This request expired at" in told[-1] and "no reviewer decided in time" in told[-1]
        await bot.idle()
        assert ledger.executed == []
        assert (await call_hash(redis_url, aid))["status"] == "expired"


@pytest.mark.cluster_too
async def test_a_click_racing_the_expiry_decides_exactly_once(redis_url: str) -> None:
    """At the moment of expiry, an approval click and the timer (this process's loop and an
    explicit firing) go at once: exactly one of them decides the call."""
    outcomes = set()
    for offset in (-0.03, 0.0, 0.01):
        agent, _, ledger = one_call()
        # An hour, skipped to the moment: two seconds let a loaded machine expire the call
        # before the test saw its card (and the card it then saw had no buttons).
        clock = SkippingClock()
        rules = policy("  expire_after: 1h\n")
        async with BotHarness(redis_url, agent, rules, clock=clock) as bot:
            approval = await bot.start_and_wait("clean the logs", user="U1")
            aid = approval.button_value(APPROVE)
            stored = await call_hash(redis_url, aid)
            clock.advance(max(0.0, expiry(stored) + offset - clock.time()))
            service = bot.runtime.service
            await asyncio.gather(
                late_click(bot, approval, aid, "U2"), service.fire_due(), service.fire_due()
            )
            await bot.wait_for_status("finished")
            await bot.idle()
            status = (await call_hash(redis_url, aid))["status"]
            outcomes.add(status)
            kinds = [e["kind"] for e in await bot.audit() if e.get("approval_id")]
            assert kinds.count("decided") + kinds.count("expired") == 1, kinds
            resumes = [e for e in await bot.audit() if e["kind"] == "resumed"]
            assert len(resumes) == 1
            if status == "approved":
                assert ledger.executed == [("delete_logs", {"path": "/var/log/app"})]
                assert "Approved by <@U2>" in card(bot, approval).all_text()
            else:
                assert status == "expired" and ledger.executed == []
                assert "expired" in bot.slack_api.ephemeral_to("U2")[-1]
            await bot.runtime.redis.flushdb()
    assert outcomes <= {"approved", "expired"}


async def test_replicas_firing_the_same_expiry_expire_it_once(redis_url: str) -> None:
    agent, _, ledger = one_call()
    async with BotHarness(redis_url, agent, policy("  expire_after: 30m\n")) as bot:
        approval = await bot.start_and_wait("clean the logs", user="U1")
        store = bot.runtime.service.store
        call = await store.get_call(approval.button_value(APPROVE))
        assert call is not None
        await due_now(bot, call.approval_id)
        pause = await store.pause_ids(call.run_id)
        fired = await asyncio.gather(
            *(store.timers.fire(call, pause=pause, owner=f"p{n}", reason="r") for n in range(8))
        )
        assert [f.expired for f in fired].count(True) == 1
        assert [f.resume for f in fired].count(True) == 1
        owner = f"p{[f.resume for f in fired].index(True)}"
        run = await store.get_run(call.run_id)
        assert run is not None and (run.status, run.owner, run.undecided) == ("resuming", owner, 0)
        await bot.runtime.service._enqueue("resume", call.run_id, owner)
        await bot.wait_for_status("finished")
        await bot.idle()
        assert "Expired" in card(bot, approval).all_text()
    assert ledger.executed == []


async def test_a_decision_that_came_first_makes_the_expiry_a_no_op(redis_url: str) -> None:
    agent, _, ledger = one_call()
    async with BotHarness(redis_url, agent, policy("  expire_after: 30m\n")) as bot:
        approval = await bot.start_and_wait("clean the logs", user="U1")
        store = bot.runtime.service.store
        call = await store.get_call(approval.button_value(APPROVE))
        assert call is not None
        decided = await store.decide(
            call.approval_id, approve=True, always=False, team="T0TEST", user="U2",
            reason="", owner="someone",
        )  # fmt: skip
        assert isinstance(decided, Decided)
        # The expiry comes and finds the call decided.
        await due_now(bot, call.approval_id)
        pause = await store.pause_ids(call.run_id)
        fired = await store.timers.fire(call, pause=pause, owner="timer", reason="late")
        assert not fired.expired and fired.next_due is None
        assert (await store.get_call(call.approval_id)).status == "approved"  # type: ignore[union-attr]
        await bot.runtime.service._enqueue("resume", call.run_id, "someone")
        await bot.wait_for_status("finished")
        await bot.idle()
    assert ledger.executed == [("delete_logs", {"path": "/var/log/app"})]


async def test_reminders_mention_the_approvers_up_to_remind_max(redis_url: str) -> None:
    agent, _, ledger = one_call()
    # Hours, skipped: no loaded machine reaches a timer before the clock is moved.
    rules = "  expire_after: 24h\n  remind_after: 1h\n  remind_max: 2\n"
    clock = SkippingClock()
    async with BotHarness(redis_url, agent, policy(rules), clock=clock) as bot:
        approval = await bot.start_and_wait("clean the logs", user="U1")
        assert "Reminds approvers every 1h (up to 2 times)" in await bot.details(
            approval, user="U2"
        )
        for n in (1, 2):  # an hour at a time (after a gap, only the latest due is sent)
            clock.advance(3600)
            await wait_until(lambda: len(card_thread(bot, approval)) >= n, what=f"reminder {n}")  # noqa: B023
        first, second = card_thread(bot, approval)
        for n, reply in enumerate((first, second), start=1):
            assert f"Reminder ({n} of 2)" in reply.text
            assert "<@U2>" in reply.text and "<@U3>" in reply.text
            assert "expires <!date^" in reply.text
        # No third: the call's next timer is its expiry, and what fired is shown.
        expires_at = expiry(await call_hash(redis_url, approval.button_value(APPROVE)))

        async def next_is_the_expiry() -> bool:
            due = await bot.runtime.redis.zscore(keys.TIMERS, approval.button_value(APPROVE))
            return due is not None and abs(due / 1000 - expires_at) < 0.01

        clock.advance(5400)  # a third would be due now
        await wait_until(next_is_the_expiry, what="the expiry to be the next timer")
        await bot.idle()
        assert len(card_thread(bot, approval)) == 2
        assert not bot.run_thread()  # reminders are in the card's thread, not the run's
        await bot.click(approval, APPROVE, user="U2")
        await bot.wait_for_status("finished")
        await bot.idle()
        assert len(card_thread(bot, approval)) == 2
        kinds = [e["kind"] for e in await bot.audit()]
        assert kinds.count("reminded") == 2
    assert ledger.names() == ["delete_logs"]


async def test_no_reminder_after_a_decision(redis_url: str) -> None:
    agent, _, _ = one_call()
    rules = "  expire_after: 24h\n  remind_after: 1h\n  remind_max: 5\n"  # skipped, never reached
    clock = SkippingClock()
    async with BotHarness(redis_url, agent, policy(rules), clock=clock) as bot:
        approval = await bot.start_and_wait("clean the logs", user="U1")
        clock.advance(3600)
        await wait_until(lambda: card_thread(bot, approval), what="the first reminder")
        await bot.click(approval, APPROVE, user="U3")
        await bot.wait_for_status("finished")
        count = len(card_thread(bot, approval))
        assert count in (1, 2)  # a second may have fired in the same instant as the click

        async def no_timer_left() -> bool:
            return await bot.runtime.redis.zcard(keys.TIMERS) == 0

        clock.advance(9000)  # reminders 2 and 3 would be due now
        # Dropped as it comes due (a decided call's timer is a no-op, not removed at once).
        await wait_until(no_timer_left, what="the decided call's timers dropped")
        await bot.idle()
        assert len(card_thread(bot, approval)) == count
        assert await bot.runtime.redis.zcard(keys.TIMERS) == 0  # nothing left to fire


async def test_escalation_lets_more_people_decide_only_once_it_fired(redis_url: str) -> None:
    agent, _, ledger = one_call()
    rules = (
        "  expire_after: 24h\n  remind_max: 0\n  escalate_after: 2h\n  escalate_to: [U9, S0LEADS]\n"
    )
    clock = SkippingClock()  # hours, skipped: no loaded machine reaches them first
    async with BotHarness(redis_url, agent, policy(rules), clock=clock) as bot:
        bot.slack_api.usergroups["S0LEADS"] = ("leads", ["U1", "U8"])  # U1 starts the run
        approval = await bot.start_and_wait("clean the logs", user="U1")
        aid = approval.button_value(APPROVE)
        assert "Escalates to <@U9>, `S0LEADS` after 2h" in await bot.details(approval, user="U2")
        # Before escalate_after: U9 is refused like anyone who is not an approver.
        await bot.click(approval, APPROVE, user="U9")
        refused = await wait_until(lambda: bot.slack_api.ephemeral_to("U9"), what="a refusal")
        assert "not among the approvers" in refused[-1]
        assert (await call_hash(redis_url, aid))["status"] == "pending"

        clock.advance(7200)
        [told] = await wait_until(lambda: card_thread(bot, approval), what="the escalation")
        assert "escalated to <@U9>, <!subteam^S0LEADS>" in told.text
        assert "may now decide" in told.text
        await wait_until(
            lambda: "Escalated to <@U9>" in card(bot, approval).all_text(), what="the card"
        )
        stored = await call_hash(redis_url, aid)
        assert float(stored["escalated_at"]) >= float(stored["escalate_at"])
        # The starter stays refused (self-approval): the escalation widens who, not the rules.
        await bot.click(approval, APPROVE, user="U1")
        await wait_until(lambda: bot.slack_api.ephemeral_to("U1"), what="the starter's refusal")
        assert "self-approval is not allowed" in bot.slack_api.ephemeral_to("U1")[-1]
        await bot.click(approval, APPROVE, user="U9")
        await bot.wait_for_status("finished")
        await bot.idle()
        assert "Approved by <@U9>" in card(bot, approval).all_text()
        kinds = [e["kind"] for e in await bot.audit()]
        assert kinds.count("escalated") == 1
    assert ledger.names() == ["delete_logs"]


async def test_escalation_and_reminders_follow_the_policy_in_force(
    redis_url: str, tmp_path: Path
) -> None:
    """The policy changes while the call waits: `escalate_to: [U8]` is removed and the channel's
    approvers become U3, U5. When the old escalation time passes, U8 is not let in, and the
    reminder names the approvers of the policy in force, not those of the card's posting.
    The times are long enough that none passes before the test skips the clock (a 1 s reminder
    fired under the old policy on a loaded machine, before the reload was seen)."""
    agent, _, ledger = one_call()
    timers = "  expire_after: 900s\n  remind_after: 30s\n  remind_max: 5\n"
    before = (
        f"defaults:\n  allow_self_approval: false\n{timers}"
        "  escalate_after: 60s\n  escalate_to: [U8]\n" + CHANNEL
    )
    after = f"defaults:\n  allow_self_approval: false\n{timers}" + CHANNEL.replace(
        "[U2, U3]", "[U3, U5]"
    )
    path = tmp_path / "policy.yml"
    path.write_text(before)
    source = PolicySource.from_file(path, check_every=0.05)
    clock = SkippingClock()
    async with BotHarness(redis_url, agent, source, clock=clock) as bot:
        approval = await bot.start_and_wait("clean the logs", user="U1")
        aid = approval.button_value(APPROVE)
        assert "Escalates to <@U8> after" in await bot.details(approval, user="U2")
        path.write_text(after)
        await wait_until(
            lambda: source.current().version == policy_version(after), what="the reload"
        )
        clock.advance(60)  # the old escalation time, and reminder 2
        [told] = await wait_until(
            lambda: [m for m in card_thread(bot, approval) if "Reminder" in m.text],
            what="the reminder",
        )
        assert "<@U3>" in told.text and "<@U5>" in told.text
        assert "<@U2>" not in told.text and "<@U8>" not in told.text
        await bot.click(approval, APPROVE, user="U8")
        refused = await wait_until(lambda: bot.slack_api.ephemeral_to("U8"), what="a refusal")
        assert "not among the approvers" in refused[-1]
        assert (await call_hash(redis_url, aid))["status"] == "pending"
        await bot.idle()
        assert not any("escalated to" in m.text for m in card_thread(bot, approval))
        assert "Escalat" not in card(bot, approval).all_text()
        assert "escalated" not in [e["kind"] for e in await bot.audit()]
        await bot.click(approval, APPROVE, user="U5")
        await bot.wait_for_status("finished")
    assert ledger.names() == ["delete_logs"]


async def test_run_records_outlive_the_wait(redis_url: str) -> None:
    """Retention of one day, a call that may wait seven: the run's records are kept past it."""
    agent, _, _ = one_call()
    rules = "  expire_after: 7d\n"
    settings = {"run_retention_days": 1}
    async with BotHarness(redis_url, agent, policy(rules), settings=settings) as bot:
        approval = await bot.start_and_wait("clean the logs", user="U1")
        aid = approval.button_value(APPROVE)
        run_id = keys.run_of(aid)
        assert run_id is not None
        client = bot.runtime.redis
        for key in (
            keys.run_key(run_id),
            keys.state_key(run_id),
            keys.call_key(aid),
        ):
            assert await client.ttl(key) > 7 * 86400, key
        assert "Expires <!date^" in approval.all_text()


def test_timer_settings_combine_across_levels_and_are_checked() -> None:
    policy_text = """
defaults:
  expire_after: 2h
channels:
  C1:
    approvers: [U2]
    remind_after: 30m
    escalate_after: 1h
    escalate_to: ["@leads"]
  C2:
    approvers: [U2]
tools:
  - match: deploy
    channel: C1
    expire_after: 90s
    remind_max: 0
"""
    parsed = parse_policy(policy_text)
    rule = parsed.rule_for(channel="C1", agent="a", tool="deploy")
    assert rule is not None
    assert (rule.expire_after, rule.remind_after, rule.remind_max) == (90, 1800, 0)
    assert (rule.escalate_after, rule.escalate_to) == (3600, ("@leads",))
    other = parsed.rule_for(channel="C2", agent="a", tool="x")
    assert other is not None
    assert (other.expire_after, other.remind_after, other.remind_max) == (7200, 4 * 3600, 3)
    assert other.escalate_after == 0
    plain = parse_policy(CHANNEL).rule_for(channel="C1", agent="a", tool="x")
    assert plain is not None and plain.expire_after == 24 * 3600
    with pytest.raises(PolicyError) as bad:
        parse_policy(
            "channels:\n  C1:\n    approvers: [U2]\n    expire_after: 31d\n"
            "    escalate_after: 1h\n    remind_after: soon\n"
        )
    text = " ".join(bad.value.problems)
    assert "'soon' is not a duration like 90s, 30m, 4h or 7d" in text
    with pytest.raises(PolicyError) as bad:
        parse_policy("channels:\n  C1:\n    approvers: [U2]\n    expire_after: 31d\n"
                     "    escalate_after: 1h\n")  # fmt: skip
    text = " ".join(bad.value.problems)
    assert "expire_after: at most 30d" in text and "escalate_after needs escalate_to" in text


@pytest.mark.cluster_too
async def test_a_call_expires_on_time_once_across_a_restart(
    slack: FakeSlackAPI, tmp_path: Path, redis_url: str
) -> None:
    """The bot pauses, stops, and starts again: the call still expires when it should, once."""
    policy_file = tmp_path / "policy.yml"
    policy_file.write_text(policy("  expire_after: 6s\n  remind_max: 0\n"))
    env = bot_env(slack, policy_file, tmp_path, REDIS_URL=redis_url)
    port = free_port()
    url = f"http://127.0.0.1:{port}/slack/events"
    async with running_bot(env, port) as first, SlackRequests(url, "test-signing-secret") as rq:
        assert (await rq.command("/var/log/app", user="U1", channel="C1")).status == 200
        [approval] = await wait_until(lambda: slack.approval_messages(), what="approval message")
        aid = approval.button_value(APPROVE)
        first.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(first.wait, 30) == 0
    stored = await call_hash(redis_url, aid)
    assert stored["status"] == "pending"  # the first process did not expire it
    async with running_bot(env, free_port()):
        await wait_until(
            lambda: any(
                "tool said: No reviewer decided within 6s; the call was not run." in m.text
                for m in slack.messages.values()
            ),
            timeout=30,
            what="the expired run's output",
        )
        # The card's update and the output post go out side by side in one projector pass.
        await wait_until(
            lambda: "Expired" in slack.messages[(approval.channel, approval.ts)].all_text(),
            what="the card to say Expired",
        )
    stored = await call_hash(redis_url, aid)
    assert stored["status"] == "expired"
    # On time: at its expiry (or, a loaded machine having taken longer to restart the bot than
    # the call had left, once the new bot is up: the wait above bounds it); never before.
    assert expiry(stored) <= float(stored["decided_at"])
    client = await redis_for(redis_url, decode_responses=True)
    try:
        entries = list(await client.xrange("ab:audit"))  # type: ignore[arg-type]
    finally:
        await client.aclose()
    kinds = [(fields or {}).get("kind") for _, fields in entries]
    assert kinds.count("expired") == 1 and kinds.count("resumed") == 1
    assert executions(tmp_path) == []
