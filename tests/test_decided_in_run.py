"""A call the policy decides by itself is decided inside its run (#32 part 1): a rule's
automatic approval, or a channel grant, lets the run go on without a pause (no snapshot, no
resume job, no card), and leaves what a decision leaves: its audit entry, its webhook event,
its metric, a grant's note in the thread. A run that needs a person for any call it stopped on
pauses as before. Through signed requests, the real bot, real Redis and the Slack stand-in."""

from __future__ import annotations

from agents import Agent, ApplyPatchTool, ShellTool
from agents.testing import ScriptedModel
from openai.types.responses import ResponseApplyPatchToolCall, ResponseFunctionShellToolCall

from bot import metrics
from bot.testing.harness import BotHarness
from tests.agents_for_tests import Ledger, assistant_message, function_call, ops_agent
from tests.test_authorization import no_server_errors
from tests.test_grants import GRANTING, cards, grant_in_first_run, two_runs
from tests.test_tool_kinds import Editor, done, run_shell
from tests.test_webhooks import Receiver, delivered_all, webhook_settings

AUTO = """
defaults:
  allow_self_approval: false
channels:
  C1:
    approvers: [U2, U3]
tools:
  - name: routine-restarts
    match: restart_service
    when: {args.service: web}
    auto: approve
"""


def decided_total(outcome: str) -> float:
    value = metrics.REGISTRY.get_sample_value("approval_bot_decisions_total", {"outcome": outcome})
    return value or 0.0


def restarts(ledger: Ledger, *services: str) -> object:
    agent, _ = ops_agent(
        [
            *(
                [function_call("restart_service", {"service": s}, call_id=f"r{i}")]
                for i, s in enumerate(services)
            ),
            [assistant_message("done")],
        ],
        ledger,
    )
    return agent


async def test_a_call_a_rule_approves_runs_without_a_pause_and_is_audited(
    redis_url: str,
) -> None:
    ledger = Ledger()
    before = decided_total("auto_approve")
    async with (
        Receiver() as receiver,
        BotHarness(
            redis_url, restarts(ledger, "web"), AUTO, settings=webhook_settings(receiver.url)
        ) as bot,
    ):
        await bot.slack.command("restart web", user="U1", channel="C1")
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await delivered_all(bot, receiver)
        [started] = [e for e in audit if e["kind"] == "run_started"]
        run = await bot.runtime.service.store.get_run(started["run_id"])
        shown = bot.slack_api.approval_messages()
        no_server_errors(bot)
    assert ledger.names() == ["restart_service"]
    assert shown == []  # no card
    assert run is not None and run.pause == 0  # never paused: no snapshot, no resume job
    kinds = [e["kind"] for e in audit]
    assert "paused" not in kinds and "resumed" not in kinds, kinds
    [decided] = [e for e in audit if e["kind"] == "decided"]
    assert decided["decision"] == "auto_approve" and decided["rule"] == "routine-restarts"
    assert decided["tool"] == "restart_service" and decided["run_id"] == started["run_id"]
    assert kinds.index("decided") < kinds.index("run_finished")
    # its webhook event (every audit entry reached the receiver), and its metric
    assert decided["id"] in receiver.ids()
    assert decided_total("auto_approve") == before + 1


async def test_a_call_a_rule_does_not_decide_still_pauses_the_whole_turn(
    redis_url: str,
) -> None:
    """web is routine, db is not: both calls of that turn wait (the rule's approval is
    applied at the pause, as before), and only a person's click lets the run go on."""
    ledger = Ledger()
    agent, _ = ops_agent(
        [
            [
                function_call("restart_service", {"service": "web"}, call_id="r1"),
                function_call("restart_service", {"service": "db"}, call_id="r2"),
            ],
            [assistant_message("done")],
        ],
        ledger,
    )
    async with BotHarness(redis_url, agent, AUTO) as bot:
        await bot.slack.command("restart both", user="U1", channel="C1")
        [card] = await bot.wait_for_approvals(1)
        assert ledger.names() == []
        audit = await bot.audit()
        no_server_errors(bot)
    assert "db" in card.all_text()
    assert [e["decision"] for e in audit if e["kind"] == "decided"] == ["auto_approve"]
    assert "paused" in [e["kind"] for e in audit]


async def test_a_call_a_grant_covers_runs_without_a_pause(redis_url: str) -> None:
    ledger = Ledger()
    async with BotHarness(redis_url, two_runs(ledger), GRANTING) as bot:
        await grant_in_first_run(bot)
        await bot.slack.command("clean b", user="U1", channel="C1")
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await bot.audit()
        notes = [m.text for m in bot.run_thread()]
        shown = cards(bot)
        second = [e for e in audit if e["kind"] == "run_started"][-1]["run_id"]
        run = await bot.runtime.service.store.get_run(second)
        no_server_errors(bot)
    assert ledger.names() == ["delete_logs", "delete_logs"]
    assert len(shown) == 1  # the first run's card only
    assert run is not None and run.pause == 0
    assert not [e for e in audit if e["kind"] == "paused" and e["run_id"] == second]
    [used] = [e for e in audit if e["kind"] == "grant_used"]
    assert used["run_id"] == second and used["user"] == "U2"
    assert any("was approved by the grant of" in n for n in notes), notes


async def test_shell_and_patch_calls_a_rule_decides_are_decided_in_their_run(
    redis_url: str,
) -> None:
    """Every kind of call goes the same way: a shell command a rule approves runs, a patch a
    rule rejects is refused with the rule's reason, in one turn, without a pause."""
    policy = AUTO + (
        "  - name: listing\n    match: shell\n    when: {command: 'ls *'}\n    auto: approve\n"
        "  - name: no-source-deletes\n    match: apply_patch\n"
        "    when: {operation: delete_file, path: 'src/*'}\n"
        "    auto: reject\n    reason: Source files are not deleted by agents.\n"
    )
    shell = ResponseFunctionShellToolCall(
        id="ls", call_id="ls", type="shell_call", status="completed",
        action={"commands": ["ls -la /srv/in-run"], "timeout_ms": 1000},
    )  # fmt: skip
    delete = ResponseApplyPatchToolCall(
        id="dp", call_id="dp", type="apply_patch_call", status="completed",
        operation={"type": "delete_file", "path": "src/in-run.py"},
    )  # fmt: skip
    model = ScriptedModel([[shell, delete], [assistant_message("ok")]])
    agent = Agent(
        name="coder",
        model=model,
        tools=[ShellTool(executor=run_shell, needs_approval=True),
               ApplyPatchTool(editor=Editor(), needs_approval=True)],
    )  # fmt: skip
    async with BotHarness(redis_url, agent, policy) as bot:
        await bot.slack.command("go", user="U1", channel="C1")
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await bot.audit()
        shown = bot.slack_api.approval_messages()
        no_server_errors(bot)
    assert shown == []
    assert "ls -la /srv/in-run" in done and "delete src/in-run.py" not in done
    assert model.last_call is not None
    assert "Source files are not deleted by agents." in str(model.last_call.input)
    assert "paused" not in [e["kind"] for e in audit]
    decided = sorted((e["rule"], e["decision"]) for e in audit if e["kind"] == "decided")
    assert decided == [("listing", "auto_approve"), ("no-source-deletes", "auto_reject")]
