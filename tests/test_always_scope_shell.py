"""An Always approve on a shell tool is re-judged when the policy tightens (issue #7, item 2).

Complements tests/test_always_scope.py (function tools) with the shell tool, whose SDK sticky
record is shared by name: the decider is removed from the approvers and the tool gets a quorum
of two with Always off between two pauses. Signed HTTP, real Redis, the Slack stand-in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agents import Agent, ShellCommandOutput, ShellResult, ShellTool, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from openai.types.responses import ResponseFunctionShellToolCall

from bot.service.policy.source import PolicySource, policy_version
from bot.slack.blocks import ALWAYS_APPROVE, APPROVE
from bot.testing.harness import BotHarness, wait_until
from tests.test_security import audited

ran: list[str] = []


async def run_shell(request: Any) -> ShellResult:
    commands = list(request.data.action.commands)
    ran.extend(commands)
    return ShellResult(output=[ShellCommandOutput(stdout="ok", command=c) for c in commands])


def shell(call_id: str, command: str) -> ResponseFunctionShellToolCall:
    return ResponseFunctionShellToolCall(
        id=call_id, call_id=call_id, type="shell_call", status="completed",
        action={"commands": [command], "timeout_ms": 1000},
    )  # fmt: skip


async def test_a_sticky_decision_is_rejudged_when_the_policy_tightens(
    redis_url: str, tmp_path: Path
) -> None:
    ran.clear()
    path = tmp_path / "policy.yml"
    loose = (
        "defaults:\n  allow_self_approval: false\nchannels:\n  C1:\n    approvers: [U2, U3, U4]\n"
    )
    path.write_text(loose)
    agent = Agent(
        name="lead",
        model=ScriptedModel(
            [
                [shell("s1", "ls /srv")],
                [function_call("gate", {}, call_id="g1")],
                [shell("s2", "rm -rf /srv")],
                [assistant_message("done")],
            ]
        ),
        tools=[ShellTool(executor=run_shell, needs_approval=True), gate_tool()],
    )
    source = PolicySource.from_file(path, check_every=0.05)  # (production: once a second)
    async with BotHarness(redis_url, agent, source) as bot:
        first = await bot.start_and_wait("clean", user="U1")
        await bot.click(first, ALWAYS_APPROVE, user="U2")
        # The run pauses on the gate; meanwhile shell is tightened and U2 is no longer an approver.
        gate = await wait_until(
            lambda: next(
                (m for m in bot.slack_api.approval_messages() if "gate" in m.all_text()), None
            ),
            what="the gate's approval message",
        )
        tightened = (
            loose.replace("[U2, U3, U4]", "[U3, U4]")
            + "tools:\n  - match: shell\n    required_approvals: 2\n    allow_always: false\n"
        )
        path.write_text(tightened)
        await wait_until(
            lambda: source.current().version == policy_version(tightened), what="the reload"
        )
        await bot.click(gate, APPROVE, user="U3")
        cards = await bot.wait_for_approvals(1)
        # The later shell call paused like any other instead of running on U2's old Always.
        assert ran == ["ls /srv"]
        [again] = [m for m in cards if "rm -rf /srv" in m.all_text()]
        await bot.click(again, APPROVE, user="U3")
        await bot.idle()  # clicks are worked on in the background: U3's vote comes first
        await bot.click(again, APPROVE, user="U4")
        await bot.wait_for_status("finished")
        await bot.idle()
        thread = [m.text for m in bot.run_thread()]
        audit = await audited(bot)
        entries = await bot.audit()
    assert ran == ["ls /srv", "rm -rf /srv"]
    assert any("no longer holds" in t and "shell" in t for t in thread), thread
    [dropped] = [e for e in entries if e["kind"] == "always_dropped"]
    assert dropped["decision"] == "approved" and dropped["tool"] == "shell"
    assert audit["decided"] == ["U2", "U3", "U4"]


def gate_tool() -> Any:
    @function_tool(needs_approval=True)
    def gate() -> str:
        """A step that needs approval."""
        return "open"

    return gate


HANDOFF_POLICY = """
defaults:
  allow_self_approval: false
channels:
  C1:
    approvers: [U2, U3, U4]
tools:
  - match: shell
    agent: prod
    approvers: [U3, U4]
    allow_always: false
"""


async def test_always_on_shell_does_not_follow_a_handoff_to_another_agent(redis_url: str) -> None:
    """In the SDK a shell Always record is shared by name: after lead hands off to prod, prod's
    shell call would run on lead's Always. It must pause under prod's own rule instead."""
    ran.clear()
    prod = Agent(
        name="prod",
        model=ScriptedModel([[shell("p1", "rm -rf /prod")], [assistant_message("prod done")]]),
        tools=[ShellTool(executor=run_shell, needs_approval=True)],
    )
    lead = Agent(
        name="lead",
        model=ScriptedModel(
            [[shell("l1", "ls /srv")], [function_call("transfer_to_prod", {}, call_id="h1")]]
        ),
        tools=[ShellTool(executor=run_shell, needs_approval=True)],
        handoffs=[prod],
    )
    async with BotHarness(redis_url, lead, HANDOFF_POLICY) as bot:
        first = await bot.start_and_wait("tidy", user="U1")
        await bot.click(first, ALWAYS_APPROVE, user="U2")
        card = await wait_until(
            lambda: next(
                (
                    m
                    for m in bot.slack_api.approval_messages()
                    if "rm -rf /prod" in m.all_text() and m.action_ids()
                ),
                None,
            ),
            what="prod's shell call to pause",
        )
        assert ran == ["ls /srv"]
        assert card.action_ids() == [APPROVE, "approval_reject", "approval_show_conversation"]
        await bot.reject(card, user="U3", reason="not on prod")
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await audited(bot)
        entries = await bot.audit()
    assert ran == ["ls /srv"]
    decided = [(e["agent"], e["decision"], e["user"]) for e in entries if e["kind"] == "decided"]
    assert decided == [("lead", "always_approve", "U2"), ("prod", "reject", "U3")]
    assert audit["decided"] == ["U2", "U3"]
