"""The policy judges what the tool will receive (issue #29, cases 1 and 2): the arguments are
read as the tool's parameter model reads them before any rule sees them; NaN and the
infinities, which JSON has not, are refused where they enter; a condition that cannot be
evaluated never approves, and no later automatic rule takes the call. Signed HTTP into the
real bot, a real Redis, the Slack stand-in."""

from __future__ import annotations

from typing import Any

from agents import Agent, function_tool
from agents.testing import ScriptedModel
from pydantic import BaseModel

from bot.slack.blocks import APPROVE
from bot.store.records import CallStatus
from bot.testing.harness import BotHarness, edit_values
from tests.agents_for_tests import Ledger, assistant_message, function_call, tool_outputs
from tests.test_authorization import no_server_errors

# The CFO (U9) approves large payments; everything else is approved automatically.
CFO_THEN_AUTO = """
defaults:
  allow_self_approval: false
channels:
  C1:
    approvers: [U2, U3]
tools:
  - name: large-payments
    match: "pay*"
    when: {args.amount: "> 10000"}
    approvers: [U9]
  - name: small-payments
    match: "pay*"
    auto: approve
"""
# Large payments to the CFO; the rest to the channel's approvers (who may edit them).
CFO_ONLY = CFO_THEN_AUTO.split("  - name: small-payments")[0]


class Memo(BaseModel):
    text: str = ""


def payments(ledger: Ledger, calls: list[Any]) -> tuple[Agent[Any], ScriptedModel]:
    """`pay` takes a float (its model is plain: the SDK validates it without user code);
    `pay_with_memo` has a model of the application's among its parameters (the SDK does not
    validate it for the bot: its arguments are read as the JSON they are)."""

    @function_tool(needs_approval=True)
    def pay(amount: float, to: str) -> str:
        """Pay someone."""
        ledger.executed.append(("pay", {"amount": amount, "to": to}))
        return f"paid {amount}"

    @function_tool(needs_approval=True)
    def pay_with_memo(amount: float, to: str, memo: Memo) -> str:
        """Pay someone, with a memo."""
        ledger.executed.append(("pay_with_memo", {"amount": amount, "to": to}))
        return f"paid {amount}"

    model = ScriptedModel([calls, [assistant_message("done")]])
    return Agent(name="payer", model=model, tools=[pay, pay_with_memo]), model


def pay(amount: str, call_id: str, tool: str = "pay") -> Any:
    """A call whose `amount` is written exactly as `amount` (JSON text)."""
    memo = ', "memo": {"text": "rent"}' if tool == "pay_with_memo" else ""
    return function_call(tool, f'{{"amount": {amount}, "to": "acme"{memo}}}', call_id=call_id)


async def test_numbers_the_rule_could_not_read_are_judged_as_the_tool_reads_them(
    redis_url: str,
) -> None:
    """Case 1: `"50000"` and `"5e4"` are the 50000.0 the tool gets: the CFO's rule applies,
    not the automatic one after it. NaN, Infinity, -Infinity and 1e999 are refused (the agent
    is told why); a string where the tool's own model is not validated by the bot cannot be
    compared, so it goes to a person, never to the automatic rule."""
    ledger = Ledger()
    calls = [
        pay('"50000"', "text"),
        pay('"5e4"', "exponent"),
        pay("50000", "number"),
        pay("5", "small"),
        pay("Infinity", "infinity"),
        pay("-Infinity", "minus"),
        pay("NaN", "nan"),
        pay("1e999", "huge"),
        pay('"inf"', "inf_text"),
        pay('"50000"', "memo_text", tool="pay_with_memo"),
    ]
    agent, model = payments(ledger, calls)
    async with BotHarness(redis_url, agent, CFO_THEN_AUTO) as bot:
        await bot.slack.command("pay acme", user="U1", channel="C1")
        cards = await bot.wait_for_approvals(4)
        audit = await bot.audit()
        run_id = cards[0].button_value(APPROVE).partition(".")[0]
        by_call = {c.call_id: c for c in await bot.runtime.service.store.pause_calls(run_id)}
        for card in cards:  # the CFO approves the large ones
            await bot.click(card, APPROVE, user="U9")
        await bot.wait_for_status("finished")
        await bot.idle()
        no_server_errors(bot)
    waiting = {k: c.rule for k, c in by_call.items() if c.status == CallStatus.PENDING}
    assert waiting == {
        "text": "large-payments", "exponent": "large-payments", "number": "large-payments",
        "memo_text": "large-payments",
    }  # fmt: skip
    # The others were decided inside the run (#32): no call record, no card.
    assert set(by_call) == set(waiting)
    assert "NaN or an infinity" in tool_outputs(model)["infinity"]
    assert "args.amount" in tool_outputs(model)["inf_text"]
    # The tool ran with the numbers it reads, the large ones only once the CFO approved.
    assert sorted(a["amount"] for _, a in ledger.executed) == [5.0, 50000.0, 50000.0, 50000.0,
                                                               50000.0]  # fmt: skip
    [undecidable] = [e for e in audit if e["kind"] == "undecidable"]
    assert undecidable["approval_id"] == by_call["memo_text"].approval_id
    assert "args.amount: is text, not a number" in undecidable["detail"]
    assert "large-payments" in undecidable["detail"]
    auto = sorted(e["decision"] for e in audit if e["kind"] == "decided" and not e.get("user"))
    assert auto == ["auto_approve", *["auto_reject"] * 5]  # small; the five refused
    for refused in ("infinity", "minus", "nan", "huge"):
        assert "NaN or an infinity" in tool_outputs(model)[refused], refused


async def test_an_edit_to_a_number_json_cannot_hold_is_refused_with_a_sentence(
    redis_url: str,
) -> None:
    """Case 2: an approver edits `amount` 5 to Infinity (per field) or NaN (as JSON text):
    the form says why, nothing is recorded, and the call still waits."""
    ledger = Ledger()
    agent, _ = payments(ledger, [pay("5", "small"), pay("5", "memo", tool="pay_with_memo")])
    async with BotHarness(redis_url, agent, CFO_ONLY) as bot:
        await bot.slack.command("pay acme", user="U1", channel="C1")
        cards = await bot.wait_for_approvals(2)
        flat = next(c for c in cards if "pay_with_memo" not in c.all_text())
        nested = next(c for c in cards if "pay_with_memo" in c.all_text())
        run_id = flat.button_value(APPROVE).partition(".")[0]
        answers = []
        view = await bot.open_edit(flat, user="U2")
        for value in ("Infinity", "-Infinity", "NaN", "1e999"):
            sent = await bot.slack.submit(view, edit_values(view, {"field:amount": value}),
                                          user="U2")  # fmt: skip
            answers.append(sent.json())
        view = await bot.open_edit(nested, user="U2")
        text = '{"amount": NaN, "to": "acme", "memo": {"text": "rent"}}'
        sent = await bot.slack.submit(view, edit_values(view, json_text=text), user="U2")
        answers.append(sent.json())
        await bot.idle()
        calls = await bot.runtime.service.store.pause_calls(run_id)
        audit = await bot.audit()
        no_server_errors(bot)
    for answer in answers:
        assert answer is not None and answer["response_action"] == "errors", answer
        [said] = answer["errors"].values()
        assert "JSON has no NaN or Infinity" in said, said
    assert [c.status for c in calls] == [CallStatus.PENDING, CallStatus.PENDING]
    assert not any(c.edited_arguments for c in calls)
    assert not [e for e in audit if e["kind"] in ("edited", "decided", "approval_vote")]
    assert ledger.executed == []


def test_the_tools_own_parameter_model_reads_the_arguments() -> None:
    """The reading itself: what a plain parameter model gives (coerced, defaults filled), the
    JSON as sent for a model of the application's, and what is refused."""
    from bot.engine.arguments import NotFinite, Received, Unknown, loads_json, receive

    @function_tool
    def plain(amount: float, to: str, note: str = "", *, urgent: bool = False) -> str:
        """x"""
        return ""

    @function_tool
    def nested(amount: float, memo: Memo) -> str:
        """x"""
        return ""

    assert receive(plain, '{"amount": "5e4", "to": "a"}') == Received(
        {"amount": 50000.0, "to": "a", "note": "", "urgent": False}
    )
    assert receive(plain, '{"amount": "inf", "to": "a"}') == NotFinite("args.amount")
    assert receive(plain, '{"amount": 1e999, "to": "a"}') == NotFinite("args.amount")
    assert receive(plain, '{"amount": "abc", "to": "a"}') == Received({"amount": "abc", "to": "a"})
    assert receive(nested, '{"amount": "5", "memo": {}}') == Received({"amount": "5", "memo": {}})
    assert receive(None, '{"a": [1, {"b": NaN}]}') == NotFinite("args.a.1.b")
    assert receive(None, "[1]") == Unknown("the arguments are not a JSON object")
    assert receive(None, '{"a": ') == Unknown("the arguments are not valid JSON")
    assert loads_json("{}") == {}
