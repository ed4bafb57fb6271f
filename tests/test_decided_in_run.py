"""A call the policy decides by itself is decided inside its run (#32 part 1): a rule's
automatic approval, or a channel grant, lets the run go on without a pause (no snapshot, no
resume job, no card), and leaves what a decision leaves: its audit entry, its webhook event,
its metric, a grant's note in the thread. A turn with calls for a person pauses on those only
(the others decided in its state). Through signed requests, the real bot, real Redis and the
Slack stand-in."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents import Agent, AgentHooks, ApplyPatchTool, HostedMCPTool, ShellTool
from agents.testing import ScriptedModel
from openai.types.responses import ResponseApplyPatchToolCall, ResponseFunctionShellToolCall
from openai.types.responses.response_output_item import McpApprovalRequest

from bot import metrics
from bot.service.policy.source import PolicySource
from bot.slack.blocks import ALWAYS_APPROVE, APPROVE
from bot.store.records import RunRecord
from bot.testing.harness import BotHarness, edit_values, wait_until
from bot.testing.slack_api import Message
from tests.agents_for_tests import (
    Ledger,
    assistant_message,
    function_call,
    ops_agent,
    slow_check,
)
from tests.test_authorization import no_server_errors
from tests.test_edit import edited_then
from tests.test_grants import GRANTING, grant_in_first_run, two_runs
from tests.test_tool_kinds import Editor, done, run_shell
from tests.test_webhooks import Receiver, delivered_all, webhook_settings

# C1's approvers; each policy adds its rules after `tools:`.
CHANNEL = """
defaults:
  allow_self_approval: false
channels:
  C1:
    approvers: [U2, U3]
tools:
"""
AUTO = CHANNEL + (
    "  - name: routine-restarts\n    match: restart_service\n"
    "    when: {args.service: web}\n    auto: approve\n"
)


class Starts(AgentHooks[Any]):
    """Counts the SDK runs an agent takes part in: each `Runner.run` (a start, or a resume of
    a state the run stopped in) starts its agent once. A call decided at its approval hook
    leaves the run one SDK run; one decided where the run stops on it, two."""

    def __init__(self) -> None:
        self.count = 0

    async def on_start(self, context: Any, agent: Any) -> None:
        self.count += 1


@dataclass
class Seen:
    """What the bot showed and recorded, read once it was quiet: its audit trail, the approval
    cards in Slack, the notes in the latest run's thread, and the latest run's record."""

    audit: list[dict[str, Any]]
    cards: list[Message]
    notes: list[str]
    run: RunRecord | None

    def kinds(self) -> list[str]:
        return [e["kind"] for e in self.audit]

    def decided(self) -> list[dict[str, Any]]:
        return [e for e in self.audit if e["kind"] == "decided"]

    def by_rule(self) -> list[tuple[str, str]]:
        """(rule, decision) of each decision, sorted."""
        return sorted((e.get("rule") or "", e["decision"]) for e in self.decided())

    def by_person(self) -> list[tuple[str, str]]:
        """(who, decision) of each decision in order; a rule's: no one ("")."""
        return [(e.get("user") or "", e["decision"]) for e in self.decided()]

    def never_paused(self) -> bool:
        """No card, no pause: no snapshot, no resume job, no `paused` entry."""
        return (
            self.cards == []
            and self.run is not None
            and self.run.pause == 0
            and "paused" not in self.kinds()
        )


async def quiet(bot: BotHarness) -> Seen:
    """What the bot showed and recorded, once it is quiet (and no request got a 5xx)."""
    await bot.idle()
    audit = await bot.audit()
    started = [e["run_id"] for e in audit if e["kind"] == "run_started"]
    run = await bot.runtime.service.store.get_run(started[-1]) if started else None
    notes = [m.text for m in bot.run_thread()] if started else []
    no_server_errors(bot)
    return Seen(audit, bot.slack_api.approval_messages(), notes, run)


async def finished(bot: BotHarness) -> Seen:
    """`quiet`, once the latest run finished."""
    await bot.wait_for_status("finished")
    return await quiet(bot)


async def one_pause(bot: BotHarness) -> tuple[Message, Seen, Seen]:
    """A run started; it pauses on one card (what is seen then); U2 approves it (what is seen
    once the run finished)."""
    await bot.slack.command("go", user="U1", channel="C1")
    [card] = await bot.wait_for_approvals(1)
    paused = await quiet(bot)
    await bot.click(card, APPROVE, user="U2")
    return card, paused, await finished(bot)


def decided_total(outcome: str) -> float:
    value = metrics.REGISTRY.get_sample_value("approval_bot_decisions_total", {"outcome": outcome})
    return value or 0.0


def a_call_a_turn(ledger: Ledger, tool: str, argument: str, *values: str) -> Any:
    """An ops agent that calls `tool` once a turn, with each of `values` as `argument`, then
    says it is done; and its model."""
    turns = [[function_call(tool, {argument: v}, call_id=f"c{i}")] for i, v in enumerate(values, 1)]
    return ops_agent([*turns, [assistant_message("done")]], ledger)


def shell_call(call_id: str, command: str) -> ResponseFunctionShellToolCall:
    return ResponseFunctionShellToolCall(
        id=call_id, call_id=call_id, type="shell_call", status="completed",
        action={"commands": [command], "timeout_ms": 1000},
    )  # fmt: skip


def patch_call(call_id: str, **operation: str) -> ResponseApplyPatchToolCall:
    return ResponseApplyPatchToolCall(
        id=call_id, call_id=call_id, type="apply_patch_call", status="completed",
        operation=operation,
    )  # fmt: skip


def coder(model: ScriptedModel, hooks: Starts | None = None) -> Agent[Any]:
    """An agent with a shell and a patch tool, each gated."""
    return Agent(
        name="coder",
        model=model,
        hooks=hooks,
        tools=[ShellTool(executor=run_shell, needs_approval=True),
               ApplyPatchTool(editor=Editor(), needs_approval=True)],
    )  # fmt: skip


GITHUB = HostedMCPTool(
    tool_config={
        "type": "mcp", "server_label": "github",
        "server_url": "https://mcp.invalid/", "require_approval": "always",
    }
)  # fmt: skip


def mcp_request(request_id: str, name: str, arguments: dict[str, Any]) -> McpApprovalRequest:
    return McpApprovalRequest(
        id=request_id, type="mcp_approval_request", server_label="github", name=name,
        arguments=json.dumps(arguments),
    )  # fmt: skip


def mcp_responses(model: ScriptedModel) -> list[dict[str, Any]]:
    """The hosted MCP approval responses the model was given last."""
    assert model.last_call is not None
    return [
        i for i in model.last_call.input
        if isinstance(i, dict) and i.get("type") == "mcp_approval_response"
    ]  # fmt: skip


async def test_a_call_a_rule_approves_runs_without_a_pause_and_is_audited(
    redis_url: str,
) -> None:
    ledger = Ledger()
    agent, _ = a_call_a_turn(ledger, "restart_service", "service", "web")
    before = decided_total("auto_approve")
    async with (
        Receiver() as receiver,
        BotHarness(redis_url, agent, AUTO, settings=webhook_settings(receiver.url)) as bot,
    ):
        await bot.slack.command("restart web", user="U1", channel="C1")
        seen = await finished(bot)
        audit = await delivered_all(bot, receiver)
    assert ledger.names() == ["restart_service"]
    assert seen.never_paused()  # no card, no snapshot, no resume job
    kinds = [e["kind"] for e in audit]
    assert "paused" not in kinds and "resumed" not in kinds, kinds
    [decided] = [e for e in audit if e["kind"] == "decided"]
    assert decided["decision"] == "auto_approve" and decided["rule"] == "routine-restarts"
    assert seen.run is not None
    assert decided["tool"] == "restart_service" and decided["run_id"] == seen.run.run_id
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
    agent, model = a_call_a_turn(ledger, "restart_service", "service", "cache")
    agent.hooks = starts
    before = decided_total("auto_reject")
    async with BotHarness(redis_url, agent, REFUSING) as bot:
        await bot.slack.command("restart cache", user="U1", channel="C1")
        seen = await finished(bot)
    assert ledger.executed == []
    assert seen.never_paused()
    assert starts.count == 1  # refused at its check: one SDK run
    assert model.last_call is not None
    [output] = [
        i for i in model.last_call.input
        if isinstance(i, dict) and i.get("type") == "function_call_output"
    ]  # fmt: skip
    assert output["call_id"] == "c1"
    assert output["output"] == "Caches are not restarted by agents."
    assert seen.by_rule() == [("no-cache-restarts", "auto_reject")]
    assert seen.kinds().index("decided") < seen.kinds().index("run_finished")
    assert decided_total("auto_reject") == before + 1
    assert any("was rejected automatically by policy rule" in n for n in seen.notes), seen.notes


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
    starts = Starts()
    agent = Agent(name="triager", model=model, tools=[GITHUB], hooks=starts)
    async with BotHarness(redis_url, agent, policy) as bot:
        await bot.slack.command("go", user="U1", channel="C1")
        seen = await finished(bot)
    assert seen.never_paused()
    assert starts.count == 1
    responses = {r["approval_request_id"]: r for r in mcp_responses(model)}
    assert responses["mcpr_a"]["approve"] is True
    assert responses["mcpr_b"]["approve"] is False
    assert responses["mcpr_b"]["reason"] == "Repositories are not deleted by agents."
    assert seen.by_rule() == [("no-deletes", "auto_reject"), ("reads", "auto_approve")]


async def test_a_turn_pauses_only_for_the_calls_a_person_decides(redis_url: str) -> None:
    """web is routine (approved by a rule), cache is refused by a rule, db needs a person: web
    runs at once and cache is refused inside the run; the run pauses with one card, db's, and
    once it is approved the run goes on without judging web or cache again (#32)."""
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
    async with BotHarness(redis_url, agent, REFUSING) as bot:
        await bot.slack.command("restart all three", user="U1", channel="C1")
        [card] = await bot.wait_for_approvals(1)
        paused = await quiet(bot)
        ran_while_paused = list(ledger.executed)
        await bot.click(card, APPROVE, user="U2")
        seen = await finished(bot)
    assert "db" in card.all_text() and "cache" not in card.all_text()
    assert len(paused.cards) == 1  # none for the calls the rules decided
    assert ran_while_paused == [("restart_service", {"service": "web"})]
    assert paused.by_rule() == [
        ("no-cache-restarts", "auto_reject"), ("routine-restarts", "auto_approve")
    ]  # fmt: skip
    assert paused.kinds().index("decided") < paused.kinds().index("paused")
    # after the click: db runs, cache never does, and nothing is judged twice
    assert ledger.executed == [
        ("restart_service", {"service": "web"}), ("restart_service", {"service": "db"})
    ]  # fmt: skip
    assert sorted(e["decision"] for e in seen.decided()) == [
        "approve", "auto_approve", "auto_reject"
    ]  # fmt: skip
    assert model.last_call is not None
    assert "Caches are not restarted by agents." in str(model.last_call.input)


async def test_a_call_a_grant_covers_runs_without_a_pause(redis_url: str) -> None:
    ledger = Ledger()
    async with BotHarness(redis_url, two_runs(ledger), GRANTING) as bot:
        await grant_in_first_run(bot)
        await bot.slack.command("clean b", user="U1", channel="C1")
        seen = await finished(bot)
    assert ledger.names() == ["delete_logs", "delete_logs"]
    assert len(seen.cards) == 1  # the first run's card only
    assert seen.run is not None and seen.run.pause == 0
    second = seen.run.run_id
    assert not [e for e in seen.audit if e["kind"] == "paused" and e["run_id"] == second]
    [used] = [e for e in seen.audit if e["kind"] == "grant_used"]
    assert used["run_id"] == second and used["user"] == "U2"
    assert any("was approved by the grant of" in n for n in seen.notes), seen.notes


LISTING = (
    AUTO + "  - name: listing\n    match: shell\n    when: {command: 'ls *'}\n    auto: approve\n"
)


async def test_shell_and_patch_calls_a_rule_decides_are_decided_in_their_run(
    redis_url: str,
) -> None:
    """Every kind of call goes the same way: a shell command a rule approves runs, a patch a
    rule rejects is refused with the rule's reason, in one turn, without a pause."""
    policy = LISTING + (
        "  - name: no-source-deletes\n    match: apply_patch\n"
        "    when: {operation: delete_file, path: 'src/*'}\n"
        "    auto: reject\n    reason: Source files are not deleted by agents.\n"
    )
    shell = shell_call("ls", "ls -la /srv/in-run")
    delete = patch_call("dp", type="delete_file", path="src/in-run.py")
    model = ScriptedModel([[shell, delete], [assistant_message("ok")]])
    starts = Starts()
    async with BotHarness(redis_url, coder(model, starts), policy) as bot:
        await bot.slack.command("go", user="U1", channel="C1")
        seen = await finished(bot)
    assert seen.never_paused()  # no card, no snapshot, no resume job
    assert "ls -la /srv/in-run" in done and "delete src/in-run.py" not in done
    assert starts.count == 1  # decided at their on_approval: the run never stopped on them
    assert model.last_call is not None
    told = json.dumps(model.last_call.input)
    assert "Source files are not deleted by agents." in told
    assert '"output": "ok"' in told or "ok" in told
    assert seen.by_rule() == [("listing", "auto_approve"), ("no-source-deletes", "auto_reject")]


async def test_a_shell_call_a_rule_approves_waits_in_the_state_beside_a_call_for_a_person(
    redis_url: str,
) -> None:
    """Calls decided where the run stops on them go the same way: the shell command a rule
    approves is approved in the paused state (no card for it), the patch waits for a person,
    and after the click both run, the command judged once."""
    shell = shell_call("lm", "ls -la /srv/mixed")
    create = patch_call("cm", type="create_file", path="docs/mixed.md", diff="+hello\n")
    model = ScriptedModel([[shell, create], [assistant_message("ok")]])
    async with BotHarness(redis_url, coder(model), LISTING) as bot:
        card, paused, seen = await one_pause(bot)
    assert "docs/mixed.md" in card.all_text() and "ls -la" not in card.all_text()
    assert len(paused.cards) == 1
    assert "ls -la /srv/mixed" in done and "create docs/mixed.md" in done
    assert sorted(e["decision"] for e in seen.decided()) == ["approve", "auto_approve"]
    assert ("listing", "auto_approve") in seen.by_rule()


TMP_DELETES = CHANNEL + (
    "  - name: tmp-deletes\n    match: delete_logs\n"
    '    when: {args.path: "/tmp/*"}\n    auto: approve\n'
)


async def test_after_an_always_a_call_the_rule_approves_is_decided_in_the_run(
    redis_url: str,
) -> None:
    """An earlier Always on the tool does not bring back a pause for a call the policy decides
    by itself: the rule decides it inside the run (as it came first at a pause), no card."""
    ledger = Ledger()
    agent, _ = a_call_a_turn(ledger, "delete_logs", "path", "/srv/a", "/tmp/x")
    async with BotHarness(redis_url, agent, TMP_DELETES) as bot:
        first = await bot.start_and_wait("clean", user="U1")
        await bot.click(first, ALWAYS_APPROVE, user="U2")
        seen = await finished(bot)
    assert ledger.executed == [
        ("delete_logs", {"path": "/srv/a"}), ("delete_logs", {"path": "/tmp/x"})
    ]  # fmt: skip
    assert len(seen.cards) == 1  # the first call's card only
    assert seen.by_person() == [("U2", "always_approve"), ("", "auto_approve")]
    assert seen.kinds().count("paused") == 1


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
        seen = await finished(bot)
    assert ledger.executed == [("delete_logs", {"path": "/tmp/a"})]
    assert len(seen.cards) == 1
    assert seen.by_person() == [("U2", "approve_edited"), ("", "auto_approve")]
    assert seen.kinds().count("paused") == 1


async def test_an_earlier_always_settles_a_later_call_inside_the_run(redis_url: str) -> None:
    """A later call of the tool an Always approve covers, under a rule that asks a person, is
    settled by that decision inside the run (re-judged: Way.EARLIER_ALWAYS): no second pause,
    no card, the note and the audit entry the pause gave it."""
    ledger = Ledger()
    agent, _ = a_call_a_turn(ledger, "delete_logs", "path", "/srv/a", "/srv/b")
    async with BotHarness(redis_url, agent, TMP_DELETES) as bot:
        first = await bot.start_and_wait("clean", user="U1")
        await bot.click(first, ALWAYS_APPROVE, user="U2")
        seen = await finished(bot)
    assert [a["path"] for _, a in ledger.executed] == ["/srv/a", "/srv/b"]
    assert len(seen.cards) == 1
    assert seen.by_person() == [("U2", "always_approve"), ("U2", "always_approve")]
    assert seen.kinds().count("paused") == 1
    assert any("by the Always approve decision of <@U2>" in n for n in seen.notes), seen.notes


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
        seen = await finished(bot)
        assert seen.run is not None
        edits = await bot.runtime.service.store.edits(seen.run.run_id)
    assert ledger.executed == [("delete_logs", {"path": "/srv/b"})]
    assert len(seen.cards) == 1  # the edited call's card only
    assert seen.kinds().count("paused") == 1
    assert seen.run.pause == 1  # the edited call's pause only
    assert starts.count == 2  # the start, and the resume after the edit: nothing more
    assert seen.by_person() == [("U2", "approve_edited"), ("U2", "approve_edited")]
    again = seen.decided()[1]
    assert again["tool"] == "delete_logs" and "one-shot approval of the edit" in again["detail"]
    [edit] = edits
    assert edit.used  # used up: it approves no other call
    assert any("runs with them (approved by that edit" in n for n in seen.notes), seen.notes
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
        seen = await quiet(bot)
    assert ledger.names() == ["slow_check"]
    assert seen.kinds().count("paused") == 2
    assert any("no longer holds" in n and "no longer offers Edit" in n for n in seen.notes), (
        seen.notes
    )


async def test_a_hosted_mcp_request_a_rule_approves_waits_in_the_state_beside_a_call_for_a_person(
    redis_url: str,
) -> None:
    """A hosted MCP request a rule approves, in a response whose function call needs a person:
    no card for the request, the run pauses for the call only, and after the click the model
    gets the request's approval once, and the call's output."""
    ledger = Ledger()
    policy = AUTO + "  - name: reads\n    match: github/get_issue\n    auto: approve\n"
    agent, model = ops_agent(
        [
            [mcp_request("mcpr_m", "get_issue", {"n": 2}),
             function_call("restart_service", {"service": "db"}, call_id="r1")],
            [assistant_message("done")],
        ],
        ledger,
        extra_tools=[GITHUB],
    )  # fmt: skip
    async with BotHarness(redis_url, agent, policy) as bot:
        card, paused, seen = await one_pause(bot)
    assert "restart_service" in card.all_text() and "get_issue" not in card.all_text()
    assert len(paused.cards) == 1
    assert ledger.executed == [("restart_service", {"service": "db"})]
    responses = mcp_responses(model)
    assert [(r["approval_request_id"], r["approve"]) for r in responses] == [("mcpr_m", True)]
    assert sorted(e["decision"] for e in seen.decided()) == ["approve", "auto_approve"]
    assert ("reads", "auto_approve") in seen.by_rule()
