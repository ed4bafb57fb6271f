"""A second opinion on the card (#33 part 2): the operator's advisor is asked about each call
once its card is posted; its advice is on the card and in the audit, and the policy may route
on it. An advisor that fails, never answers or answers out of shape leaves "no advice" and
approves nothing; none of them holds up a decision. Through signed requests, against the real
bot; the advisor's model is the only stand-in (`bot.testing.advisors`)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from agents.testing import assistant_message, function_call

from bot import metrics
from bot.service.policy.rules import PolicyError, parse_policy
from bot.slack.blocks import APPROVE
from bot.testing.advisors import AdvisorModel, scripted_advisor
from bot.testing.clock import SkippingClock
from bot.testing.harness import BotHarness, wait_until
from bot.testing.slack_api import Message
from tests.agents_for_tests import Ledger, ops_agent

# High risk goes to U7 and U8, both of them; low risk restarts are approved by the policy; the
# rest goes to the channel's approvers.
POLICY = """
channels:
  C1:
    approvers: [U2, U3]
tools:
  - name: risky
    match: "*"
    when: {advice.risk: high}
    approvers: [U7, U8]
    required_approvals: 2
  - name: harmless restarts
    match: restart_service
    when: {advice.risk: low}
    auto: approve
"""


def two_calls() -> list[Any]:
    """One pause: delete the logs and restart the web tier; then an answer."""
    calls = [
        function_call("delete_logs", {"path": "/var/log/app"}, call_id="d1"),
        function_call("restart_service", {"service": "web"}, call_id="r1"),
    ]
    return [calls, [assistant_message("done")]]


def by_tool(card: dict[str, Any]) -> dict[str, Any]:
    """Deleting is high risk (with untrusted text that must not ping anyone); restarting low."""
    if card.get("tool") == "delete_logs":
        return {
            "risk": "high",
            "rationale": "Deletes the only copy of the logs <!channel>.",
            "concerns": ["irreversible", "ping <@U2>"],
        }
    return {"risk": "low", "rationale": "A restart.", "concerns": []}


def now_of(bot: BotHarness, card: Message) -> str:
    """The card's text as Slack shows it now (its latest update)."""
    return bot.slack_api.messages[(card.channel, card.ts)].all_text()


async def card_saying(bot: BotHarness, card: Message, words: str) -> str:
    return await wait_until(
        lambda: now_of(bot, card) if words in now_of(bot, card) else None,
        timeout=30, what=f"the card to say {words!r}",
    )  # fmt: skip


async def entries(bot: BotHarness, kind: str) -> list[dict[str, str]]:
    return [e for e in await bot.audit() if e["kind"] == kind]


def advisor_count(outcome: str) -> float:
    name = "approval_bot_advisor_seconds_count"
    return metrics.REGISTRY.get_sample_value(name, {"outcome": outcome}) or 0.0


def tokens(kind: str) -> float:
    name = "approval_bot_advisor_tokens_total"
    return metrics.REGISTRY.get_sample_value(name, {"kind": kind}) or 0.0


async def test_high_risk_goes_to_other_approvers_and_low_risk_is_approved_by_the_rule(
    redis_url: str,
) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(two_calls(), ledger)
    advisor = scripted_advisor(by_tool)
    model = advisor.model
    assert isinstance(model, AdvisorModel)
    advised, tokens_in = advisor_count("advised"), tokens("input")
    async with BotHarness(redis_url, agent, POLICY, advisor=advisor) as bot:
        await bot.slack.command("clean up, token sk-SECRET", user="U1", channel="C1")
        delete = (await bot.wait_for_cards(1))[0]
        text = await card_saying(bot, delete, "Second opinion")
        assert "Risk: *high*. Deletes the only copy of the logs &lt;!channel&gt;." in text
        assert "ping &lt;@U2&gt;" in text  # untrusted: escaped, nobody pinged
        assert "<!channel>" not in text
        # The restart was approved by the rule on the advisor's advice (the audit says so).
        decided = await wait_until(lambda: _of(bot, "decided", 1), what="the restart decided")
        assert decided[0]["tool"] == "restart_service"
        assert decided[0]["decision"] == "auto_approve"
        assert "policy rule harmless restarts" in decided[0]["detail"]
        assert "on the advisor's advice: risk low" in decided[0]["detail"]
        # The delete is U7's and U8's: the channel's approvers may not decide it.
        sent = await bot.click(delete, APPROVE, user="U2")
        assert sent.status == 200
        await wait_until(lambda: bot.slack_api.ephemeral_to("U2"), what="U2's refusal")
        assert ledger.names() == []
        for user in ("U7", "U8"):
            sent = await bot.click(delete, APPROVE, user=user)
            assert sent.status == 200
        await bot.wait_for_status("finished")
        assert sorted(ledger.names()) == ["delete_logs", "restart_service"]
        await bot.idle()
        audited = {e["tool"]: e for e in await entries(bot, "advised")}
        assert audited["delete_logs"]["decision"] == "high"
        assert "Deletes the only copy" in audited["delete_logs"]["text"]
        assert audited["restart_service"]["decision"] == "low"
        # Its time and cost: seconds, and the model's tokens in and out (as the SDK counted).
        assert re.fullmatch(r"\d+\.\d\d s, [1-9]\d* \+ [1-9]\d* tokens",
                            audited["delete_logs"]["detail"])  # fmt: skip
        votes = [e["user"] for e in await entries(bot, "approval_vote")]
        assert votes == ["U7"]
    # What the advisor saw: what the card shows, not the run's task (nor anything else).
    assert {c["tool"] for c in model.cards} == {"delete_logs", "restart_service"}
    for card in model.cards:
        assert set(card) == {"tool", "kind", "agent", "tool_description", "arguments",
                             "agent_reason"}  # fmt: skip
        assert "sk-SECRET" not in str(card)
    assert advisor_count("advised") - advised == 2
    assert tokens("input") - tokens_in >= 2 * 50  # (two cards of at least 200 characters)


async def _of(bot: BotHarness, kind: str, count: int) -> list[dict[str, str]] | None:
    found = await entries(bot, kind)
    return found if len(found) >= count else None


def failing(card: dict[str, Any]) -> dict[str, Any]:
    raise RuntimeError("the advisor's model service is down")


@pytest.mark.parametrize(
    ("answer", "outcome", "said"),
    [
        (failing, "failed", "the advisor failed"),
        (lambda card: "Looks fine to me!", "out_of_shape", "the advisor's answer was not advice"),
        (lambda card: {"risk": "none at all", "rationale": "?"}, "out_of_shape",
         "the advisor's answer was not advice"),
    ],
    ids=["fails", "answers_text", "answers_another_shape"],
)  # fmt: skip
async def test_no_advice_approves_nothing(
    redis_url: str, answer: Any, outcome: str, said: str
) -> None:
    """An advisor that fails or answers out of shape: the card says there is no advice, the
    rule that approves low-risk restarts does not apply, and a person decides."""
    ledger = Ledger()
    steps = [[function_call("restart_service", {"service": "web"}, call_id="r1")],
             [assistant_message("done")]]  # fmt: skip
    agent, _ = ops_agent(steps, ledger)
    before = advisor_count(outcome)
    async with BotHarness(redis_url, agent, POLICY, advisor=scripted_advisor(answer)) as bot:
        card = await bot.start_and_wait("restart web", user="U1")
        await card_saying(bot, card, f"No advice ({said})")
        advised = await wait_until(lambda: _of(bot, "advised", 1), what="the advice audited")
        assert advised[0]["decision"] == "none"
        assert said in advised[0]["detail"]
        assert await entries(bot, "decided") == []
        assert ledger.names() == []
        # Undecidable: it waits for a person, under the strictest rule that could apply.
        for user in ("U7", "U8"):
            await bot.click(card, APPROVE, user=user)
        await bot.wait_for_status("finished")
        assert ledger.names() == ["restart_service"]
        assert [e["decision"] for e in await entries(bot, "decided")] == ["approve"]
    assert advisor_count(outcome) - before == 1


async def test_an_advisor_that_never_answers_blocks_nothing_and_times_out(
    redis_url: str,
) -> None:
    """The advisor hangs: a person decides the first call meanwhile; once its timeout (on the
    bot's clock, skipped here) has passed, the second call's card says there is no advice."""
    ledger = Ledger()
    agent, _ = ops_agent(two_calls(), ledger)
    never = asyncio.Event()

    async def hangs(card: dict[str, Any]) -> dict[str, Any]:
        await never.wait()
        return {"risk": "low", "rationale": "too late", "concerns": []}

    advisor = scripted_advisor(hangs)
    model = advisor.model
    assert isinstance(model, AdvisorModel)
    clock = SkippingClock()
    settings = {"advisor_timeout_seconds": 600}
    before = advisor_count("timed_out")
    policy = POLICY.replace("required_approvals: 2", "required_approvals: 1")
    async with BotHarness(
        redis_url, agent, policy, advisor=advisor, clock=clock, settings=settings
    ) as bot:
        await bot.slack.command("clean up", user="U1", channel="C1")
        # (the harness's waits for cards wait for the bot to be idle: never, while it hangs)
        delete, restart = await wait_until(
            lambda: [m for m in bot.slack_api.approval_messages() if m.action_ids()][1:] and
            [m for m in bot.slack_api.approval_messages() if m.action_ids()],
            what="both cards",
        )  # fmt: skip
        await wait_until(lambda: len(model.cards) == 2, what="the advisor asked twice")
        # Until advice comes, advice.risk is undecidable: the strictest rule (U7) decides.
        sent = await bot.click(delete, APPROVE, user="U7")
        assert sent.status == 200
        await wait_until(lambda: _of(bot, "decided", 1), what="the delete decided")
        assert ledger.names() == []  # (the pause waits for the restart)
        clock.advance(600)
        text = await card_saying(bot, restart, "No advice (the advisor did not answer in time)")
        assert "Second opinion" not in text
        timed_out = await wait_until(lambda: _of(bot, "advised", 2), what="both audited")
        assert {e["decision"] for e in timed_out} == {"none"}
        assert ledger.names() == []  # no advice: the restart is not approved by the rule
        await bot.click(restart, APPROVE, user="U7")
        await bot.wait_for_status("finished")
        assert sorted(ledger.names()) == ["delete_logs", "restart_service"]
    assert advisor_count("timed_out") - before == 2


async def test_without_an_advisor_a_rule_on_advice_never_approves(redis_url: str) -> None:
    """No advisor at all: a condition on advice is never decided, and a person decides."""
    ledger = Ledger()
    steps = [[function_call("restart_service", {"service": "web"}, call_id="r1")],
             [assistant_message("done")]]  # fmt: skip
    agent, _ = ops_agent(steps, ledger)
    policy = POLICY.replace("required_approvals: 2", "required_approvals: 1")
    async with BotHarness(redis_url, agent, policy) as bot:
        card = await bot.start_and_wait("restart web", user="U1")
        await bot.idle()
        assert "Second opinion" not in now_of(bot, card)
        assert "No advice" not in now_of(bot, card)
        undecidable = await entries(bot, "undecidable")
        assert "advice.risk: no advice (yet)" in undecidable[0]["detail"]
        await bot.click(card, APPROVE, user="U7")
        await bot.wait_for_status("finished")
        assert [e["decision"] for e in await entries(bot, "decided")] == ["approve"]


def test_a_condition_on_advice_names_a_risk_the_advisor_gives() -> None:
    wrong = POLICY.replace("advice.risk: high", "advice.risk: [high, extreme]")
    with pytest.raises(PolicyError, match="'extreme' is not a risk the advisor gives"):
        parse_policy(wrong)
    with pytest.raises(PolicyError, match="or advice\\.risk"):
        parse_policy(POLICY.replace("advice.risk: high", "advice.score: 3"))
