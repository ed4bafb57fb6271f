"""A call the policy decides by itself is decided inside its run (#32 part 1): a rule's
automatic approval, or a channel grant, lets the run go on without a pause (no snapshot, no
resume job, no card), and leaves what a decision leaves: its audit entry, its webhook event,
its metric, a grant's note in the thread. A turn with calls for a person pauses on those only
(the others decided in its state). Through signed requests, the real bot, real Redis and the
Slack stand-in."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agents import Agent, AgentHooks, ApplyPatchTool, HostedMCPTool, ShellTool
from agents.testing import ScriptedModel
from openai.types.responses import ResponseApplyPatchToolCall, ResponseFunctionShellToolCall
from openai.types.responses.response_output_item import McpApprovalRequest

from bot import metrics
from bot.service.policy.source import PolicySource
from bot.slack.blocks import ALWAYS_APPROVE, APPROVE
from bot.testing.harness import BotHarness, edit_values, wait_until
from tests.agents_for_tests import (
    Ledger,
    assistant_message,
    function_call,
    ops_agent,
    slow_check,
)
from tests.test_authorization import no_server_errors
from tests.test_edit import edited_then
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


class Starts(AgentHooks[Any]):
    """Counts the SDK runs an agent takes part in: each `Runner.run` (a start, or a resume of
    a state the run stopped in) starts its agent once. A call decided at its approval hook
    leaves the run one SDK run; one decided where the run stops on it, two."""

    def __init__(self) -> None:
        self.count = 0

    async def on_start(self, context: Any, agent: Any) -> None:
        self.count += 1


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


REFUSING = AUTO + (
    "  - name: no-cache-restarts\n    match: restart_service\n"
    "    when: {args.service: cache}\n    auto: reject\n"
    "    reason: Caches are not restarted by agents.\n"
)


async def test_a_call_a_rule_rejects_is_refused_at_its_check(redis_url: str) -> None:
    """A rule's automatic rejection of a function call is given at the SDK's approval check
    (recorded in the run's context, which the SDK reads right after `needs_approval`): the tool
    never runs, the model is told the rule's reason, as a rejection at a pause told it, and the
    run never stops on the call."""
    ledger = Ledger()
    starts = Starts()
    agent, model = ops_agent(
        [
            [function_call("restart_service", {"service": "cache"}, call_id="c1")],
            [assistant_message("done")],
        ],
        ledger,
    )
    agent.hooks = starts
    before = decided_total("auto_reject")
    async with BotHarness(redis_url, agent, REFUSING) as bot:
        await bot.slack.command("restart cache", user="U1", channel="C1")
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await bot.audit()
        shown = bot.slack_api.approval_messages()
        [started] = [e for e in audit if e["kind"] == "run_started"]
        run = await bot.runtime.service.store.get_run(started["run_id"])
        notes = [m.text for m in bot.run_thread()]
        no_server_errors(bot)
    assert ledger.executed == []
    assert shown == [] and run is not None and run.pause == 0
    assert starts.count == 1  # refused at its check: one SDK run
    assert model.last_call is not None
    [output] = [
        i for i in model.last_call.input
        if isinstance(i, dict) and i.get("type") == "function_call_output"
    ]  # fmt: skip
    assert output["call_id"] == "c1"
    assert output["output"] == "Caches are not restarted by agents."
    kinds = [e["kind"] for e in audit]
    assert "paused" not in kinds
    [decided] = [e for e in audit if e["kind"] == "decided"]
    assert (decided["decision"], decided["rule"]) == ("auto_reject", "no-cache-restarts")
    assert kinds.index("decided") < kinds.index("run_finished")
    assert decided_total("auto_reject") == before + 1
    assert any("was rejected automatically by policy rule" in n for n in notes), notes


def mcp_request(request_id: str, name: str, arguments: dict[str, Any]) -> McpApprovalRequest:
    return McpApprovalRequest(
        id=request_id, type="mcp_approval_request", server_label="github", name=name,
        arguments=json.dumps(arguments),
    )  # fmt: skip


async def test_hosted_mcp_requests_a_rule_decides_are_answered_in_the_run(
    redis_url: str,
) -> None:
    """Hosted MCP approval requests a rule decides are answered as the model's response
    arrives: the approval response the model gets is the one a person's decision gives (the
    rejection with the rule's reason), with no pause, no card, and their audit entries."""
    policy = AUTO + (
        "  - name: reads\n    match: github/get_issue\n    auto: approve\n"
        "  - name: no-deletes\n    match: github/delete_repo\n    auto: reject\n"
        "    reason: Repositories are not deleted by agents.\n"
    )
    model = ScriptedModel(
        [
            [mcp_request("mcpr_a", "get_issue", {"n": 1}),
             mcp_request("mcpr_b", "delete_repo", {"repo": "x"})],
            [assistant_message("ok")],
        ]
    )  # fmt: skip
    hosted = HostedMCPTool(
        tool_config={
            "type": "mcp", "server_label": "github",
            "server_url": "https://mcp.invalid/", "require_approval": "always",
        }
    )  # fmt: skip
    starts = Starts()
    agent = Agent(name="triager", model=model, tools=[hosted], hooks=starts)
    async with BotHarness(redis_url, agent, policy) as bot:
        await bot.slack.command("go", user="U1", channel="C1")
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await bot.audit()
        shown = bot.slack_api.approval_messages()
        [started] = [e for e in audit if e["kind"] == "run_started"]
        run = await bot.runtime.service.store.get_run(started["run_id"])
        no_server_errors(bot)
    assert shown == [] and run is not None and run.pause == 0
    assert starts.count == 1
    assert model.last_call is not None
    responses = {
        i["approval_request_id"]: i for i in model.last_call.input
        if isinstance(i, dict) and i.get("type") == "mcp_approval_response"
    }  # fmt: skip
    assert responses["mcpr_a"]["approve"] is True
    assert responses["mcpr_b"]["approve"] is False
    assert responses["mcpr_b"]["reason"] == "Repositories are not deleted by agents."
    assert "paused" not in [e["kind"] for e in audit]
    decided = sorted((e["rule"], e["decision"]) for e in audit if e["kind"] == "decided")
    assert decided == [("no-deletes", "auto_reject"), ("reads", "auto_approve")]


async def test_a_turn_pauses_only_for_the_calls_a_person_decides(redis_url: str) -> None:
    """web is routine (approved by a rule), cache is refused by a rule, db needs a person: web
    runs at once and cache is refused inside the run; the run pauses with one card, db's, and
    once it is approved the run goes on without judging web or cache again (#32)."""
    policy = AUTO + (
        "  - name: no-cache-restarts\n    match: restart_service\n"
        "    when: {args.service: cache}\n    auto: reject\n"
        "    reason: Caches are not restarted by agents.\n"
    )
    ledger = Ledger()
    agent, model = ops_agent(
        [
            [
                function_call("restart_service", {"service": "web"}, call_id="r1"),
                function_call("restart_service", {"service": "cache"}, call_id="r2"),
                function_call("restart_service", {"service": "db"}, call_id="r3"),
            ],
            [assistant_message("done")],
        ],
        ledger,
    )
    async with BotHarness(redis_url, agent, policy) as bot:
        await bot.slack.command("restart all three", user="U1", channel="C1")
        [card] = await bot.wait_for_approvals(1)
        await bot.idle()
        paused = await bot.audit()
        cards_while_paused = bot.slack_api.approval_messages()
        ran_while_paused = list(ledger.executed)
        await bot.click(card, APPROVE, user="U2")
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await bot.audit()
        no_server_errors(bot)
    assert "db" in card.all_text() and "cache" not in card.all_text()
    assert len(cards_while_paused) == 1  # none for the calls the rules decided
    assert ran_while_paused == [("restart_service", {"service": "web"})]
    decided = [(e["decision"], e.get("rule")) for e in paused if e["kind"] == "decided"]
    assert sorted(decided) == [
        ("auto_approve", "routine-restarts"), ("auto_reject", "no-cache-restarts")
    ]  # fmt: skip
    kinds = [e["kind"] for e in paused]
    assert kinds.index("decided") < kinds.index("paused")
    # after the click: db runs, cache never does, and nothing is judged twice
    assert ledger.executed == [
        ("restart_service", {"service": "web"}), ("restart_service", {"service": "db"})
    ]  # fmt: skip
    assert sorted(e["decision"] for e in audit if e["kind"] == "decided") == [
        "approve", "auto_approve", "auto_reject"
    ]  # fmt: skip
    assert model.last_call is not None
    assert "Caches are not restarted by agents." in str(model.last_call.input)


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
    starts = Starts()
    agent = Agent(
        name="coder",
        model=model,
        hooks=starts,
        tools=[ShellTool(executor=run_shell, needs_approval=True),
               ApplyPatchTool(editor=Editor(), needs_approval=True)],
    )  # fmt: skip
    async with BotHarness(redis_url, agent, policy) as bot:
        await bot.slack.command("go", user="U1", channel="C1")
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await bot.audit()
        shown = bot.slack_api.approval_messages()
        [started] = [e for e in audit if e["kind"] == "run_started"]
        run = await bot.runtime.service.store.get_run(started["run_id"])
        no_server_errors(bot)
    assert shown == []
    assert run is not None and run.pause == 0  # no snapshot, no resume job
    assert "ls -la /srv/in-run" in done and "delete src/in-run.py" not in done
    assert starts.count == 1  # decided at their on_approval: the run never stopped on them
    assert model.last_call is not None
    told = json.dumps(model.last_call.input)
    assert "Source files are not deleted by agents." in told
    assert '"output": "ok"' in told or "ok" in told
    assert "paused" not in [e["kind"] for e in audit]
    decided = sorted((e["rule"], e["decision"]) for e in audit if e["kind"] == "decided")
    assert decided == [("listing", "auto_approve"), ("no-source-deletes", "auto_reject")]


async def test_a_shell_call_a_rule_approves_waits_in_the_state_beside_a_call_for_a_person(
    redis_url: str,
) -> None:
    """Calls decided where the run stops on them go the same way: the shell command a rule
    approves is approved in the paused state (no card for it), the patch waits for a person,
    and after the click both run, the command judged once."""
    policy = (
        AUTO
        + "  - name: listing\n    match: shell\n    when: {command: 'ls *'}\n    auto: approve\n"
    )
    shell = ResponseFunctionShellToolCall(
        id="lm", call_id="lm", type="shell_call", status="completed",
        action={"commands": ["ls -la /srv/mixed"], "timeout_ms": 1000},
    )  # fmt: skip
    create = ResponseApplyPatchToolCall(
        id="cm", call_id="cm", type="apply_patch_call", status="completed",
        operation={"type": "create_file", "path": "docs/mixed.md", "diff": "+hello\n"},
    )  # fmt: skip
    model = ScriptedModel([[shell, create], [assistant_message("ok")]])
    agent = Agent(
        name="coder",
        model=model,
        tools=[ShellTool(executor=run_shell, needs_approval=True),
               ApplyPatchTool(editor=Editor(), needs_approval=True)],
    )  # fmt: skip
    async with BotHarness(redis_url, agent, policy) as bot:
        await bot.slack.command("go", user="U1", channel="C1")
        [card] = await bot.wait_for_approvals(1)
        await bot.idle()
        cards_while_paused = bot.slack_api.approval_messages()
        await bot.click(card, APPROVE, user="U2")
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await bot.audit()
        no_server_errors(bot)
    assert "docs/mixed.md" in card.all_text() and "ls -la" not in card.all_text()
    assert len(cards_while_paused) == 1
    assert "ls -la /srv/mixed" in done and "create docs/mixed.md" in done
    decided = sorted((e["decision"], e.get("rule")) for e in audit if e["kind"] == "decided")
    assert decided == [("approve", decided[0][1]), ("auto_approve", "listing")]


TMP_DELETES = """
defaults:
  allow_self_approval: false
channels:
  C1:
    approvers: [U2, U3]
tools:
  - name: tmp-deletes
    match: delete_logs
    when: {args.path: "/tmp/*"}
    auto: approve
"""


def decided_by(audit: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e.get("user") or "", e["decision"]) for e in audit if e["kind"] == "decided"]


async def test_after_an_always_a_call_the_rule_approves_is_decided_in_the_run(
    redis_url: str,
) -> None:
    """An earlier Always on the tool does not bring back a pause for a call the policy decides
    by itself: the rule decides it inside the run (as it came first at a pause), no card."""
    ledger = Ledger()
    agent, _ = ops_agent(
        [
            [function_call("delete_logs", {"path": "/srv/a"}, call_id="d1")],
            [function_call("delete_logs", {"path": "/tmp/x"}, call_id="d2")],
            [assistant_message("done")],
        ],
        ledger,
    )
    async with BotHarness(redis_url, agent, TMP_DELETES) as bot:
        first = await bot.start_and_wait("clean", user="U1")
        await bot.click(first, ALWAYS_APPROVE, user="U2")
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await bot.audit()
        shown = bot.slack_api.approval_messages()
        no_server_errors(bot)
    assert ledger.executed == [
        ("delete_logs", {"path": "/srv/a"}), ("delete_logs", {"path": "/tmp/x"})
    ]  # fmt: skip
    assert len(shown) == 1  # the first call's card only
    assert decided_by(audit) == [("U2", "always_approve"), ("", "auto_approve")]
    assert [e["kind"] for e in audit].count("paused") == 1


async def test_an_edits_call_the_rule_approves_is_decided_in_the_run(redis_url: str) -> None:
    """The call an agent re-proposes after an edit, when the policy decides it by itself: the
    rule decides it inside the run (the edit's one-shot approval is not needed), no pause."""
    ledger = Ledger()
    agent, _ = ops_agent(edited_then({"path": "/srv/a"}, {"path": "/tmp/a"}), ledger)
    async with BotHarness(redis_url, agent, TMP_DELETES) as bot:
        card = await bot.start_and_wait("clean", user="U1")
        view = await bot.open_edit(card, user="U2")
        sent = await bot.slack.submit(view, edit_values(view, {"field:path": "/tmp/a"}), user="U2")
        assert sent.status == 200, sent
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await bot.audit()
        shown = bot.slack_api.approval_messages()
        no_server_errors(bot)
    assert ledger.executed == [("delete_logs", {"path": "/tmp/a"})]
    assert len(shown) == 1
    assert decided_by(audit) == [("U2", "approve_edited"), ("", "auto_approve")]
    assert [e["kind"] for e in audit].count("paused") == 1


async def test_an_earlier_always_settles_a_later_call_inside_the_run(redis_url: str) -> None:
    """A later call of the tool an Always approve covers, under a rule that asks a person, is
    settled by that decision inside the run (re-judged: Way.EARLIER_ALWAYS): no second pause,
    no card, the note and the audit entry the pause gave it."""
    ledger = Ledger()
    agent, _ = ops_agent(
        [
            [function_call("delete_logs", {"path": "/srv/a"}, call_id="d1")],
            [function_call("delete_logs", {"path": "/srv/b"}, call_id="d2")],
            [assistant_message("done")],
        ],
        ledger,
    )
    async with BotHarness(redis_url, agent, TMP_DELETES) as bot:
        first = await bot.start_and_wait("clean", user="U1")
        await bot.click(first, ALWAYS_APPROVE, user="U2")
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await bot.audit()
        shown = bot.slack_api.approval_messages()
        notes = [m.text for m in bot.run_thread()]
        no_server_errors(bot)
    assert [a["path"] for _, a in ledger.executed] == ["/srv/a", "/srv/b"]
    assert len(shown) == 1
    assert decided_by(audit) == [("U2", "always_approve"), ("U2", "always_approve")]
    assert [e["kind"] for e in audit].count("paused") == 1
    assert any("by the Always approve decision of <@U2>" in n for n in notes), notes


async def test_an_edits_call_a_person_would_decide_runs_on_the_edit_without_a_pause(
    redis_url: str,
) -> None:
    """The call the agent re-proposes after an edit, under a rule that asks a person: the edit
    was that person's decision on exactly these arguments, so the call runs on it inside the
    run (the editor judged under the policy in force for what the tool will receive, the
    one-shot approval used up there): no second pause, no second card, its audit entry and
    note as when a pause applied it."""
    ledger = Ledger()
    starts = Starts()
    agent, model = ops_agent(edited_then({"path": "/srv/a"}, {"path": "/srv/b"}), ledger)
    agent.hooks = starts
    async with BotHarness(redis_url, agent, TMP_DELETES) as bot:
        card = await bot.start_and_wait("clean", user="U1")
        view = await bot.open_edit(card, user="U2")
        sent = await bot.slack.submit(view, edit_values(view, {"field:path": "/srv/b"}), user="U2")
        assert sent.status == 200, sent
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await bot.audit()
        shown = bot.slack_api.approval_messages()
        notes = [m.text for m in bot.run_thread()]
        [started] = [e for e in audit if e["kind"] == "run_started"]
        run = await bot.runtime.service.store.get_run(started["run_id"])
        edits = await bot.runtime.service.store.edits(started["run_id"])
        no_server_errors(bot)
    assert ledger.executed == [("delete_logs", {"path": "/srv/b"})]
    assert len(shown) == 1  # the edited call's card only
    assert [e["kind"] for e in audit].count("paused") == 1
    assert run is not None and run.pause == 1  # the edited call's pause only
    assert starts.count == 2  # the start, and the resume after the edit: nothing more
    assert decided_by(audit) == [("U2", "approve_edited"), ("U2", "approve_edited")]
    [again] = [e for e in audit if e["kind"] == "decided"][1:]
    assert again["tool"] == "delete_logs" and "one-shot approval of the edit" in again["detail"]
    [edit] = edits
    assert edit.used  # used up: it approves no other call
    assert any("runs with them (approved by that edit" in n for n in notes), notes
    assert model.last_call is not None and "deleted /srv/b" in str(model.last_call.input)


async def test_an_edit_the_policy_no_longer_lets_settle_brings_its_call_to_a_person(
    redis_url: str, tmp_path: Path
) -> None:
    """The editor is judged for the re-proposed call under the policy in force when it comes:
    once the rule for those arguments no longer offers Edit, the edit does not settle the call:
    it pauses on its own card, and the thread says why."""
    ledger = Ledger()
    started, release = asyncio.Event(), asyncio.Event()
    agent, _ = ops_agent(
        [
            [function_call("delete_logs", {"path": "/srv/a"}, call_id="c1")],
            [function_call("slow_check", {"host": "h"}, call_id="s1")],
            [function_call("delete_logs", {"path": "/srv/b"}, call_id="c2")],
            [assistant_message("Done.")],
        ],
        ledger,
        extra_tools=[slow_check(ledger, started, release)],
    )
    path = tmp_path / "policy.yml"
    path.write_text(TMP_DELETES)
    source = PolicySource.from_file(path)
    async with BotHarness(redis_url, agent, source) as bot:
        card = await bot.start_and_wait("clean", user="U1")
        view = await bot.open_edit(card, user="U2")
        sent = await bot.slack.submit(view, edit_values(view, {"field:path": "/srv/b"}), user="U2")
        assert sent.status == 200 and sent.text == "", sent
        await started.wait()  # resumed on the edit; the re-proposed call comes next
        path.write_text(
            TMP_DELETES + "  - name: srv-b-as-is\n    match: delete_logs\n"
            "    when: {args.path: /srv/b}\n    allow_edit: false\n"
        )
        assert source.reload()
        release.set()
        await wait_until(lambda: len(bot.slack_api.approval_messages()) == 2, what="a new card")
        await bot.idle()
        notes = [m.text for m in bot.run_thread()]
        audit = await bot.audit()
        no_server_errors(bot)
    assert ledger.names() == ["slow_check"]
    assert [e["kind"] for e in audit].count("paused") == 2
    assert any("no longer holds" in n and "no longer offers Edit" in n for n in notes), notes


async def test_a_hosted_mcp_request_a_rule_approves_waits_in_the_state_beside_a_call_for_a_person(
    redis_url: str,
) -> None:
    """A hosted MCP request a rule approves, in a response whose function call needs a person:
    no card for the request, the run pauses for the call only, and after the click the model
    gets the request's approval once, and the call's output."""
    ledger = Ledger()
    policy = AUTO + "  - name: reads\n    match: github/get_issue\n    auto: approve\n"
    hosted = HostedMCPTool(
        tool_config={
            "type": "mcp", "server_label": "github",
            "server_url": "https://mcp.invalid/", "require_approval": "always",
        }
    )  # fmt: skip
    agent, model = ops_agent(
        [
            [mcp_request("mcpr_m", "get_issue", {"n": 2}),
             function_call("restart_service", {"service": "db"}, call_id="r1")],
            [assistant_message("done")],
        ],
        ledger,
        extra_tools=[hosted],
    )  # fmt: skip
    async with BotHarness(redis_url, agent, policy) as bot:
        await bot.slack.command("go", user="U1", channel="C1")
        [card] = await bot.wait_for_approvals(1)
        await bot.idle()
        cards_while_paused = bot.slack_api.approval_messages()
        await bot.click(card, APPROVE, user="U2")
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await bot.audit()
        no_server_errors(bot)
    assert "restart_service" in card.all_text() and "get_issue" not in card.all_text()
    assert len(cards_while_paused) == 1
    assert ledger.executed == [("restart_service", {"service": "db"})]
    assert model.last_call is not None
    responses = [
        i for i in model.last_call.input
        if isinstance(i, dict) and i.get("type") == "mcp_approval_response"
    ]  # fmt: skip
    assert [(r["approval_request_id"], r["approve"]) for r in responses] == [("mcpr_m", True)]
    decided = sorted((e["decision"], e.get("rule")) for e in audit if e["kind"] == "decided")
    assert decided == [("approve", decided[0][1]), ("auto_approve", "reads")]
