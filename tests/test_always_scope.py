"""Always decisions reach only what their decider may decide alone, and only while the policy
in force still says so: signed requests, real Redis, the Slack stand-in, scripted models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agents import Agent, ShellCommandOutput, ShellResult, ShellTool
from agents.testing import ScriptedModel, assistant_message, function_call
from openai.types.responses import ResponseFunctionShellToolCall

from bot.service.policy.source import PolicySource
from bot.slack.blocks import ALWAYS_APPROVE, APPROVE
from bot.store import keys
from bot.testing.harness import BotHarness
from bot.testing.slack_api import Message
from tests.agents_for_tests import Ledger, delete_then_say, ops_agent
from tests.test_security import audited, call_status

TWO_AGENTS = """
defaults:
  allow_self_approval: false
channels:
  C1:
    approvers: [U2, U3]
tools:
  - match: shell
    agent: prod
    approvers: [U4, U5]
    required_approvals: 2
    allow_always: false
"""


def shell_call(call_id: str, command: str) -> ResponseFunctionShellToolCall:
    return ResponseFunctionShellToolCall(
        id=call_id, call_id=call_id, type="shell_call", status="completed",
        action={"commands": [command], "timeout_ms": 1000},
    )  # fmt: skip


def lead_and_prod(ran: list[str]) -> Agent[Any]:
    """`lead` calls its shell and, in the same turn, the `prod` agent (as a tool), which calls
    its own shell: one pause with a shell call of each agent."""

    async def execute(request: Any) -> ShellResult:
        commands = list(request.data.action.commands)
        ran.extend(commands)
        return ShellResult(output=[ShellCommandOutput(stdout="ok", command=c) for c in commands])

    prod = Agent(
        name="prod",
        model=ScriptedModel(
            [[shell_call("p1", "systemctl restart prod-db")], [assistant_message("prod done")]]
        ),
        tools=[ShellTool(executor=execute, needs_approval=True)],
    )
    return Agent(
        name="lead",
        model=ScriptedModel(
            [
                [
                    shell_call("l1", "ls /tmp"),
                    function_call("prod_ops", {"input": "restart the database"}, call_id="t1"),
                ],
                [assistant_message("all done")],
            ]
        ),
        tools=[
            ShellTool(executor=execute, needs_approval=True),
            prod.as_tool(tool_name="prod_ops", tool_description="Operates production"),
        ],
    )


def card_of(cards: list[Message], agent: str) -> Message:
    [card] = [c for c in cards if f"agent *{agent}*" in c.all_text()]
    return card


async def test_always_on_one_agents_shell_leaves_another_agents_shell_pending(
    redis_url: str,
) -> None:
    ran: list[str] = []
    async with BotHarness(redis_url, lead_and_prod(ran), TWO_AGENTS) as bot:
        await bot.slack.command("tidy up", user="U1", channel="C1")
        cards = await bot.wait_for_approvals(2)
        lead, prod = card_of(cards, "lead"), card_of(cards, "prod")
        lead_id, prod_id = lead.button_value(APPROVE), prod.button_value(APPROVE)
        assert ALWAYS_APPROVE not in prod.action_ids()  # its rule allows no Always
        await bot.click(lead, ALWAYS_APPROVE, user="U2")
        await bot.idle()
        # lead's call is approved; prod's is still waiting for two of U4, U5, on its own card.
        assert await call_status(redis_url, lead_id) == "approved"
        assert await call_status(redis_url, prod_id) == "pending"
        assert bot.slack_api.messages[(prod.channel, prod.ts)].action_ids()
        assert ran == []
        audit = await audited(bot)
        assert audit["decided"] == ["U2"]
        await bot.click(prod, APPROVE, user="U4")
        await bot.idle()  # clicks are worked on in the background: U4's vote comes first
        await bot.click(prod, APPROVE, user="U5")
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await audited(bot)
    assert sorted(ran) == ["ls /tmp", "systemctl restart prod-db"]
    assert audit["decided"] == ["U2", "U5"] and audit["approval_vote"] == ["U4"]


async def test_always_reject_on_one_agents_shell_does_not_deny_another_agents(
    redis_url: str,
) -> None:
    ran: list[str] = []
    policy = TWO_AGENTS.replace("required_approvals: 2", "required_approvals: 1").replace(
        "allow_always: false", "allow_always: true"
    )
    async with BotHarness(redis_url, lead_and_prod(ran), policy) as bot:
        await bot.slack.command("tidy up", user="U1", channel="C1")
        cards = await bot.wait_for_approvals(2)
        lead, prod = card_of(cards, "lead"), card_of(cards, "prod")
        lead_id, prod_id = lead.button_value(APPROVE), prod.button_value(APPROVE)
        # U2 may not decide prod's shell at all (its approvers are U4, U5): it stays pending.
        await bot.reject(lead, user="U2", reason="not today", always=True)
        await bot.idle()
        assert await call_status(redis_url, lead_id) == "rejected"
        assert await call_status(redis_url, prod_id) == "pending"
        await bot.click(prod, APPROVE, user="U4")
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await audited(bot)
    assert ran == ["systemctl restart prod-db"]
    assert audit["decided"] == ["U2", "U4"]


async def test_always_settles_same_pause_calls_its_decider_may_decide_alone(
    redis_url: str,
) -> None:
    """Two parallel calls of one agent's tool under one rule: one Always click settles both."""
    ledger = Ledger()
    agent, _ = ops_agent(
        delete_then_say(["/a", "/b"], "done"),
        ledger,
    )
    async with BotHarness(redis_url, agent, TWO_AGENTS) as bot:
        await bot.slack.command("clean", user="U1", channel="C1")
        first, second = await bot.wait_for_approvals(2)
        await bot.click(first, ALWAYS_APPROVE, user="U2")
        await bot.wait_for_status("finished")
        await bot.idle()
        assert (
            "through an *Always* decision"
            in bot.slack_api.messages[(second.channel, second.ts)].all_text()
        )
        audit = await audited(bot)
    assert sorted(ledger.names()) == ["delete_logs", "delete_logs"]
    assert audit["decided"] == ["U2", "U2"]


STICKY = """
defaults:
  allow_self_approval: false
channels:
  C1:
    approvers: [U2, U3]
"""
TIGHTENED = (
    STICKY
    + """tools:
  - match: delete_logs
    approvers: [U3, U4]
    required_approvals: 2
    allow_always: false
"""
)


def delete_restart_delete(ledger: Ledger) -> Agent[Any]:
    agent, _ = ops_agent(
        [
            [function_call("delete_logs", {"path": "/a"}, call_id="c1")],
            [function_call("restart_service", {"service": "web"}, call_id="c2")],
            [function_call("delete_logs", {"path": "/b"}, call_id="c3")],
            [assistant_message("done")],
        ],
        ledger,
    )
    return agent


async def test_an_always_decision_is_rejudged_when_the_policy_tightens(
    redis_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "policy.yml"
    path.write_text(STICKY)
    source = PolicySource.from_file(path)
    ledger = Ledger()
    async with BotHarness(redis_url, delete_restart_delete(ledger), source) as bot:
        first = await bot.start_and_wait("clean", user="U1")
        run_id = keys.run_of(first.button_value(APPROVE))
        await bot.click(first, ALWAYS_APPROVE, user="U2")
        [restart] = [m for m in await bot.wait_for_approvals(1) if "restart_service" in m.text]
        # The policy tightens delete_logs (2 of U3, U4, no Always) and drops U2 from it.
        path.write_text(TIGHTENED)
        assert source.reload()
        await bot.click(restart, APPROVE, user="U3")
        await bot.idle()
        # The second delete_logs call does not ride on U2's Always: it waits on its own card.
        pending = [m for m in bot.slack_api.approval_messages() if m.action_ids()]
        assert len(pending) == 1 and "/b" in pending[0].all_text()
        assert ledger.names() == ["delete_logs", "restart_service"]
        assert ALWAYS_APPROVE not in pending[0].action_ids()
        notes = [m.text for m in bot.run_thread()]
        assert any("no longer holds" in n and "Always approve" in n for n in notes), notes
        assert run_id is not None
        assert await bot.runtime.service.store.sticky_decisions(run_id) == {}
        await bot.click(pending[0], APPROVE, user="U2")  # no longer an approver of it
        await bot.click(pending[0], APPROVE, user="U3")
        await bot.idle()  # clicks are worked on in the background: U3's vote comes first
        await bot.click(pending[0], APPROVE, user="U4")
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await audited(bot)
        entries = await bot.audit()
    assert ledger.names() == ["delete_logs", "restart_service", "delete_logs"]
    dropped = [e for e in entries if e["kind"] == "always_dropped"]
    assert len(dropped) == 1 and "no longer allows Always" in dropped[0]["detail"]
    assert audit["decided"] == ["U2", "U3", "U4"] and "U2" in audit["refused"]


async def test_an_always_decision_still_allowed_settles_a_later_pause_without_a_card(
    redis_url: str,
) -> None:
    ledger = Ledger()
    async with BotHarness(redis_url, delete_restart_delete(ledger), STICKY) as bot:
        first = await bot.start_and_wait("clean", user="U1")
        await bot.click(first, ALWAYS_APPROVE, user="U2")
        [restart] = [m for m in await bot.wait_for_approvals(1) if "restart_service" in m.text]
        await bot.click(restart, APPROVE, user="U3")
        await bot.wait_for_status("finished")
        await bot.idle()
        assert len(bot.slack_api.approval_messages()) == 2  # no card for the third call
        notes = [m.text for m in bot.run_thread()]
        assert any("by the Always approve decision of <@U2>" in n for n in notes), notes
        entries = await bot.audit()
        await audited(bot)
    assert ledger.names() == ["delete_logs", "restart_service", "delete_logs"]
    decided = [(e["user"], e["decision"]) for e in entries if e["kind"] == "decided"]
    assert decided == [("U2", "always_approve"), ("U3", "approve"), ("U2", "always_approve")]
