"""A hostile review of undecidable conditions (#34 part 4): an agent that makes a condition
undecidable (text where a number is compared) must not lower the bar the rules set. The call
goes to the first rule that could apply and a person decides, with the highest quorum of the
rules that could apply (and of the one that applies if none does), typed confirmation if any
asks for it, and self-approval only if all allow it. Through signed requests against the real
bot."""

from __future__ import annotations

from bot.service.policy.rules import parse_policy
from bot.slack.blocks import APPROVE
from bot.store.records import CallStatus
from bot.testing.harness import BotHarness
from tests.agents_for_tests import Ledger, delete_then_say, ops_agent

# The rules in the "wrong" order: the lenient rule first (self-approval), then the rest (two
# approvals). Its condition compares a number; the agent sends text.
POLICY = """
defaults:
  allow_self_approval: false
channels:
  C1:
    approvers: [U1, U2, U3]
tools:
  - name: small
    match: delete_logs
    when: {args.path: "< 100"}
    allow_self_approval: true
  - name: large
    match: delete_logs
    required_approvals: 2
"""


def test_the_rule_of_an_undecidable_call_asks_what_any_candidate_asks() -> None:
    policy = parse_policy(POLICY + "    confirm: type\n")
    decided = policy.rule_for(channel="C1", agent="ops", tool="delete_logs",
                              subject={"args": {"path": 5}})  # fmt: skip
    assert decided is not None and decided.source == "small" and decided.allow_self
    rule = policy.rule_for(channel="C1", agent="ops", tool="delete_logs",
                           subject={"args": {"path": "/a"}})  # fmt: skip
    assert rule is not None and rule.undecidable and rule.source == "small"
    assert (rule.required, rule.allow_self, rule.confirm) == (2, False, True)


async def test_text_where_a_number_is_compared_does_not_let_the_requester_approve_alone(
    redis_url: str,
) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(delete_then_say("/a", "done"), ledger)  # fmt: skip
    async with BotHarness(redis_url, agent, POLICY) as bot:
        await bot.slack.command("clean", user="U1", channel="C1")
        [card] = await bot.wait_for_approvals(1)
        approval_id = card.button_value(APPROVE)
        await bot.click(card, APPROVE, user="U1")  # the requester
        await bot.click(card, APPROVE, user="U2")  # one approval of two
        await bot.idle()
        call = await bot.runtime.service.store.get_call(approval_id)
        assert call is not None and call.status == CallStatus.PENDING, call.status
        assert call.voter_ids() == ["U2"]
        assert any("self-approval" in t for t in bot.slack_api.ephemeral_to("U1"))
        await bot.click(card, APPROVE, user="U3")
        await bot.wait_for_status("finished")
    assert ledger.names() == ["delete_logs"]
