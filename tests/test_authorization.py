"""Authorization a security team would sign off: groups, per-tool rules, quorums, Always,
automatic decisions, the served workspace, hot reload, digests and the audit trail.

Every test ends by checking what was (not) decided, what the audit trail says, and that no
request got a 5xx.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest

from bot.service.policy.source import PolicySource, policy_version
from bot.slack.blocks import ALWAYS_APPROVE, ALWAYS_REJECT, APPROVE, EDIT, REJECT, SHOW_CONVERSATION
from bot.store import keys
from bot.testing.cluster import redis_for
from bot.testing.harness import BotHarness, wait_until
from bot.testing.slack_api import FakeSlackAPI, Message
from tests.agents_for_tests import (
    Ledger,
    assistant_message,
    delete_then_say,
    function_call,
    ops_agent,
    tool_outputs,
)
from tests.forkserver import run_bot

ROOT = Path(__file__).resolve().parents[1]

BASE = """
defaults:
  allow_self_approval: false
channels:
  C1:
    approvers: [U2, U3, U4, U5, U6, "@sre-oncall"]
"""


def delete_then_done(ledger: Ledger, **kwargs: Any) -> Any:
    agent, model = ops_agent(
        delete_then_say(),
        ledger,
        **kwargs,
    )
    return agent, model


def kinds(audit: list[dict[str, str]]) -> list[str]:
    return [e["kind"] for e in audit]


def no_server_errors(bot: BotHarness) -> None:
    assert bot.slack.statuses and max(bot.slack.statuses) < 500, bot.slack.statuses


async def status_of(redis_url: str, approval_id: str) -> str:
    client = await redis_for(redis_url)
    try:
        return (await client.hget(keys.call_key(approval_id), "status") or b"").decode()
    finally:
        await client.aclose()


async def started(bot: BotHarness, user: str = "U1") -> Message:
    return await bot.start_and_wait("clean", user=user)


# User groups ----------------------------------------------------------------------------------


async def test_user_groups_by_handle_and_id(redis_url: str) -> None:
    slack = FakeSlackAPI()
    slack.usergroups = {"S0SRE": ("sre-oncall", ["U7"]), "S0DBA": ("dba", ["U8"])}
    policy = BASE + "tools:\n  - match: delete_*\n    approvers: [S0DBA, '@sre-oncall']\n"
    ledger = Ledger()
    async with (
        slack,
        BotHarness(redis_url, delete_then_done(ledger)[0], policy, slack=slack) as bot,
    ):
        approval = await started(bot)
        approval_id = approval.button_value(APPROVE)
        await bot.click(approval, APPROVE, user="U2")  # a channel approver, not in the groups
        await bot.idle()
        assert await status_of(redis_url, approval_id) == "pending"
        assert "not among the approvers of tool `delete_logs`" in slack.ephemeral_to("U2")[-1]
        await bot.click(approval, APPROVE, user="U8")  # in S0DBA
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await bot.audit()
        no_server_errors(bot)
    assert ledger.names() == ["delete_logs"]
    assert kinds(audit).count("refused") == 1 and kinds(audit).count("decided") == 1
    decided = next(e for e in audit if e["kind"] == "decided")
    assert (decided["user"], decided["decision"], decided["tool"]) == (
        "U8",
        "approve",
        "delete_logs",
    )


async def test_a_group_that_cannot_be_resolved_allows_nobody(redis_url: str) -> None:
    slack = FakeSlackAPI()
    slack.usergroups = {"S0SRE": ("sre-oncall", ["U7"])}
    policy = BASE + "tools:\n  - match: delete_*\n    approvers: ['@sre-oncall', '@ghosts']\n"
    ledger = Ledger()
    async with (
        slack,
        BotHarness(redis_url, delete_then_done(ledger)[0], policy, slack=slack) as bot,
    ):
        approval = await started(bot)
        approval_id = approval.button_value(APPROVE)
        await bot.click(approval, APPROVE, user="U9")  # in no group; @ghosts does not exist
        await bot.idle()  # the click is answered at once and worked on in the background
        slack.fail_methods.add("usergroups.list")
        bot.runtime.service.authorizer.groups.forget()  # type: ignore[attr-defined]
        await bot.click(approval, APPROVE, user="U7")  # a member, but Slack cannot say so now
        await bot.idle()
        assert await status_of(redis_url, approval_id) == "pending"
        assert "`@ghosts` (no such user group" in slack.ephemeral_to("U9")[-1]
        assert "could not check your membership" in slack.ephemeral_to("U7")[-1]
        assert "fatal_error" in slack.ephemeral_to("U7")[-1]
        slack.fail_methods.clear()
        bot.runtime.service.authorizer.groups.forget()  # type: ignore[attr-defined]
        await bot.click(approval, APPROVE, user="U7")
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await bot.audit()
        no_server_errors(bot)
    assert ledger.names() == ["delete_logs"]
    refusals = [e for e in audit if e["kind"] == "refused"]
    assert [e["user"] for e in refusals] == ["U9", "U7"]
    assert "could not check" in refusals[1]["detail"]


# Per-tool rules ---------------------------------------------------------------------------------


async def test_a_tool_rule_has_its_own_approvers_and_self_approval(redis_url: str) -> None:
    policy = BASE + (
        "tools:\n  - match: 'delete_*'\n    agent: 'o*'\n    channel: C1\n"
        "    approvers: [U3, U1]\n    allow_self_approval: true\n"
    )
    ledger = Ledger()
    async with BotHarness(redis_url, delete_then_done(ledger)[0], policy) as bot:
        approval = await started(bot, user="U1")
        await bot.click(approval, APPROVE, user="U2")
        await bot.idle()
        assert "approvers: <@U3>, <@U1>" in bot.slack_api.ephemeral_to("U2")[-1]
        await bot.click(approval, APPROVE, user="U1")  # the starter, allowed by this rule
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await bot.audit()
        no_server_errors(bot)
    assert ledger.names() == ["delete_logs"]
    assert "rule `tools[0] (delete_*)`" in approval.all_text()
    assert [e["user"] for e in audit if e["kind"] == "decided"] == ["U1"]


@pytest.mark.cluster_too
async def test_quorum_needs_distinct_people_and_one_rejection_settles_it(redis_url: str) -> None:
    policy = BASE + "tools:\n  - match: delete_logs\n    required_approvals: 2\n"
    ledger = Ledger()
    async with BotHarness(redis_url, delete_then_done(ledger)[0], policy) as bot:
        approval = await started(bot)
        approval_id = approval.button_value(APPROVE)
        assert (
            ALWAYS_APPROVE not in approval.action_ids()
        )  # one person cannot wave later calls through
        assert "*0 of 2 approvals*" in approval.all_text()
        await bot.click(approval, APPROVE, user="U2")
        await bot.click(approval, APPROVE, user="U2")  # the same person twice counts once
        await bot.idle()
        text = bot.slack_api.messages[(approval.channel, approval.ts)].all_text()
        assert "*1 of 2 approvals*: approved by <@U2>; waiting for 1 more from" in text
        assert await status_of(redis_url, approval_id) == "pending"
        assert "You already approved this call" in bot.slack_api.ephemeral_to("U2")[-1]
        await bot.reject(approval, user="U3", reason="two heads, one no")
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await bot.audit()
        no_server_errors(bot)
    assert ledger.executed == []
    assert kinds(audit).count("approval_vote") == 1
    assert [e["decision"] for e in audit if e["kind"] == "decided"] == ["reject"]
    assert "You already approved" in next(e for e in audit if e["kind"] == "refused")["detail"]


@pytest.mark.cluster_too
async def test_quorum_reached_by_concurrent_clicks_runs_the_tool_once(redis_url: str) -> None:
    policy = BASE + "tools:\n  - match: delete_logs\n    required_approvals: 3\n"
    ledger = Ledger()
    async with BotHarness(redis_url, delete_then_done(ledger)[0], policy) as bot:
        approval = await started(bot)
        people = ["U2", "U3", "U4", "U5", "U6"]
        await asyncio.gather(*(bot.click(approval, APPROVE, user=people[i % 5]) for i in range(50)))
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await bot.audit()
        no_server_errors(bot)
        text = bot.slack_api.messages[(approval.channel, approval.ts)].all_text()
    assert ledger.names() == ["delete_logs"]
    assert kinds(audit).count("approval_vote") == 2 and kinds(audit).count("decided") == 1
    assert text.count("<@U") >= 3 and "Approved by" in text


async def test_always_buttons_hidden_and_forged_always_refused(redis_url: str) -> None:
    policy = BASE + "tools:\n  - match: delete_logs\n    allow_always: false\n"
    ledger = Ledger()
    async with BotHarness(redis_url, delete_then_done(ledger)[0], policy) as bot:
        approval = await started(bot)
        approval_id = approval.button_value(APPROVE)
        assert approval.action_ids() == [APPROVE, REJECT, EDIT, SHOW_CONVERSATION]

        def refusals() -> int:
            said = bot.slack_api.ephemeral_to("U2")
            return sum("Always decisions are not allowed" in text for text in said)

        # A click is answered in the background: each forged click's refusal is waited for
        # before the next, so their audit entries come in the order clicked.
        for count, forged in enumerate((ALWAYS_APPROVE, ALWAYS_REJECT), start=1):
            await bot.slack.click(forged, approval_id, user="U2", channel="C1")
            await wait_until(lambda n=count: refusals() == n, what=f"refusal {count}")
        await bot.idle()
        assert bot.slack_api.views == []
        assert await status_of(redis_url, approval_id) == "pending"
        # A forged Always-reject modal submission is refused inside the modal.
        view = {
            "callback_id": "approval_reject_modal",
            "private_metadata": json.dumps({"approval_id": approval_id, "always": True}),
        }
        sent = await bot.slack.submit(view, {}, user="U2")
        assert "Always decisions are not allowed" in sent.json()["errors"]["reason"]
        assert await status_of(redis_url, approval_id) == "pending"
        audit = await bot.audit()
        no_server_errors(bot)
    assert ledger.executed == []
    assert [e["decision"] for e in audit if e["kind"] == "refused"] == [
        "always_approve", "always_reject", "always_reject",
    ]  # fmt: skip


async def test_automatic_decisions_are_recorded_and_told(redis_url: str) -> None:
    """Decided inside the run (#32): no card; the approved call shows as the run's step,
    the rejection as a note in its thread with the rule; both are audited."""
    policy = BASE + (
        "tools:\n  - match: restart_service\n    auto: approve\n"
        "  - match: delete_logs\n    auto: reject\n"
    )
    ledger = Ledger()
    agent, model = ops_agent(
        [
            [
                function_call("restart_service", {"service": "web"}, call_id="r1"),
                function_call("delete_logs", {"path": "/"}, call_id="d1"),
            ],
            [assistant_message("done")],
        ],
        ledger,
    )
    async with BotHarness(redis_url, agent, policy) as bot:
        await bot.slack.command("fix", user="U1", channel="C1")
        await bot.wait_for_status("finished")
        await bot.idle()
        shown = [m.all_text() for m in bot.slack_api.approval_messages()]
        steps = bot.run_message().all_text()
        notes = [m.text for m in bot.run_thread()]
        audit = await bot.audit()
        no_server_errors(bot)
    assert ledger.names() == ["restart_service"]
    assert tool_outputs(model)["d1"].startswith("automatic decision of policy rule tools[1]")
    assert shown == []
    assert "called restart_service" in steps, steps
    [note] = [n for n in notes if "delete_logs" in n]
    assert "rejected automatically by policy rule `tools[1] (delete_logs)`." in note, note
    autos = sorted(e["decision"] for e in audit if e["kind"] == "decided")
    assert autos == ["auto_approve", "auto_reject"]


# Who may start, and which workspace -----------------------------------------------------------


async def test_agents_per_channel_and_served_workspace(redis_url: str) -> None:
    ledger = Ledger()
    ops, _ = ops_agent([[assistant_message("ops")]], ledger, name="ops")
    db, _ = ops_agent([[assistant_message("db")]], ledger, name="db")
    policy = "workspace:\n  team_id: T0TEST\n" + BASE + "    agents: [db]\n"
    async with BotHarness(redis_url, {"ops": ops, "db": db}, policy) as bot:
        refused = (await bot.slack.command("run ops hi", user="U1", channel="C1")).json()
        assert "may not be started in this channel (allowed: `db`)" in refused["text"]
        foreign = (
            await bot.slack.command("run db hi", user="U1", channel="C1", team="T0EVIL")
        ).json()
        assert foreign["text"] == "This workspace is not served by this bot."
        await bot.slack.command("run db hi", user="U1", channel="C1")
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await bot.audit()
        no_server_errors(bot)
    refused = [e for e in audit if e["kind"] == "start_refused"]
    assert sorted(e["team"] for e in refused) == ["T0EVIL", "T0TEST"]
    assert any("not served" in e["detail"] for e in refused)
    assert "run_started" in kinds(audit) and "run_finished" in kinds(audit)


async def test_decisions_from_an_unserved_workspace_are_refused(redis_url: str) -> None:
    policy = "workspace:\n  team_id: T0TEST\n" + BASE
    ledger = Ledger()
    async with BotHarness(redis_url, delete_then_done(ledger)[0], policy) as bot:
        approval = await started(bot)
        await bot.slack.click(
            APPROVE, approval.button_value(APPROVE), user="U2", channel="C1", team="T0EVIL"
        )
        await bot.idle()
        assert bot.slack_api.ephemeral_to("U2") == ["This workspace is not served by this bot."]
        assert await status_of(redis_url, approval.button_value(APPROVE)) == "pending"
        audit = await bot.audit()
        no_server_errors(bot)
    assert ledger.executed == []
    assert audit[-1]["kind"] == "refused" and audit[-1]["team"] == "T0EVIL"


# Policy reload ----------------------------------------------------------------------------------


async def test_policy_changes_apply_without_restart_and_bad_files_are_ignored(
    redis_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "policy.yml"
    path.write_text(BASE)
    ledger = Ledger()
    source = PolicySource.from_file(path, check_every=0.05)  # (production: once a second)
    async with BotHarness(redis_url, delete_then_done(ledger)[0], source) as bot:
        approval = await started(bot)
        tightened = BASE.replace('[U2, U3, U4, U5, U6, "@sre-oncall"]', "[U3]")
        path.write_text(tightened)
        # The file's next look takes the new policy (the bot's requests look the same way).
        await wait_until(
            lambda: source.current().version == policy_version(tightened), what="the reload"
        )
        await bot.click(approval, APPROVE, user="U2")  # no longer an approver
        await bot.idle()
        assert "not among the approvers" in bot.slack_api.ephemeral_to("U2")[-1]
        with caplog.at_level(logging.ERROR):
            path.write_text("channels: [oops")
            await wait_until(
                lambda: source.current() and "keeping the last good policy" in caplog.text,
                what="the bad file to be read and refused",
            )
            await bot.click(approval, APPROVE, user="U3")  # the last good policy still applies
            await bot.wait_for_status("finished")
            await bot.idle()
        assert "keeping the last good policy" in caplog.text
        audit = await bot.audit()
        no_server_errors(bot)
    assert ledger.names() == ["delete_logs"]
    assert [e["user"] for e in audit if e["kind"] == "decided"] == ["U3"]


# Bound to the exact call ------------------------------------------------------------------------


async def test_a_call_changed_after_posting_cannot_be_decided(redis_url: str) -> None:
    ledger = Ledger()
    async with BotHarness(redis_url, delete_then_done(ledger)[0], BASE) as bot:
        approval = await started(bot)
        approval_id = approval.button_value(APPROVE)
        client = await redis_for(redis_url)
        digest = (await client.hget(keys.call_key(approval_id), "digest") or b"").decode()
        assert f"Call digest `{digest[:10]}`" in await bot.details(approval, user="U2")
        await client.hset(keys.call_key(approval_id), "arguments", '{"path": "/etc"}')
        await client.aclose()
        await bot.click(approval, APPROVE, user="U2")
        await bot.idle()
        assert "changed since it was posted" in bot.slack_api.ephemeral_to("U2")[-1]
        assert await status_of(redis_url, approval_id) == "pending"
        audit = await bot.audit()
        no_server_errors(bot)
    assert ledger.executed == []
    refused = audit[-1]
    assert refused["kind"] == "refused" and refused["digest"] == digest


# Replays of every interaction type --------------------------------------------------------------


async def test_replays_of_every_interaction_change_nothing(redis_url: str) -> None:
    ledger = Ledger()
    async with BotHarness(redis_url, delete_then_done(ledger)[0], BASE) as bot:
        approval = await started(bot)
        approval_id = approval.button_value(APPROVE)
        await bot.slack.thread_reply("a comment", user="U3", channel="C1", thread_ts=approval.ts)
        await bot.click(approval, REJECT, user="U2")
        await bot.idle()
        view = bot.slack_api.views[-1]["view"]
        values = {"reason": {"reason_input": {"type": "plain_text_input", "value": "no"}}}
        submission = bot.slack.submit_payload(view, values, user="U2")
        first = await bot.slack.send_interaction(submission)
        replay = await bot.slack.send_interaction(submission)
        assert first.text == "" and "already rejected by <@U2>" in replay.json()["errors"]["reason"]
        reply = bot.slack.event_payload(
            {"type": "message", "channel": "C1", "user": "U3", "text": "reject: again",
             "ts": "1.2", "thread_ts": approval.ts},
        )  # fmt: skip
        await bot.slack.send_json(reply)
        await bot.slack.send_json(reply)  # the same delivery again
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await bot.audit()
        no_server_errors(bot)
    assert await status_of(redis_url, approval_id) == "rejected"
    assert [e["kind"] for e in audit].count("decided") == 1
    assert [e["user"] for e in audit if e["kind"] == "refused"] == ["U2", "U3"]


# Hostile names and arguments --------------------------------------------------------------------


async def test_hostile_tool_names_and_arguments(redis_url: str) -> None:
    from agents import Agent, HostedMCPTool
    from agents.testing import ScriptedModel
    from openai.types.responses.response_output_item import McpApprovalRequest

    # (A lone surrogate in a tool *name* makes the SDK itself fail the run; in arguments it
    # reaches the approval message, where it is replaced.)
    hostile_name = "<!channel> `x` <@U2> <https://evil.example|y> " + "z" * 300
    requests = [
        McpApprovalRequest(
            id="mcpr_1", type="mcp_approval_request", server_label="<!here>",
            name=hostile_name, arguments='["not", "an", "object"]',
        ),
    ]  # fmt: skip
    hosted = HostedMCPTool(
        tool_config={"type": "mcp", "server_label": "<!here>", "server_url": "https://x.invalid/",
                     "require_approval": "always"}
    )  # fmt: skip
    agent = Agent(name="<!everyone>", model=ScriptedModel([requests, [assistant_message("k")]]),
                  tools=[hosted])  # fmt: skip
    async with BotHarness(redis_url, agent, BASE) as bot:
        approval = await started(bot)
        await bot.click(approval, APPROVE, user="U2")
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await bot.audit()
        no_server_errors(bot)
    for call in bot.slack_api.calls:
        sent = json.dumps(call.params)
        for raw in ("<!channel>", "<!here>", "<!everyone>", "<https://evil"):
            assert raw not in sent, (call.method, raw)
    text = bot.slack_api.messages[(approval.channel, approval.ts)].all_text()
    assert "&lt;!here&gt;/&lt;!channel&gt;" in text and "&lt;@U2&gt;" in text
    assert '"not"' in text  # JSON that is not an object is shown as it is
    assert "decided" in kinds(audit)


# Export -------------------------------------------------------------------------------------------


async def test_audit_export_as_jsonl_and_csv(redis_url: str, tmp_path: Path) -> None:
    ledger = Ledger()
    async with BotHarness(redis_url, delete_then_done(ledger)[0], BASE) as bot:
        approval = await started(bot)
        await bot.click(approval, APPROVE, user="U2")
        await bot.wait_for_status("finished")
        await bot.idle()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("APPROVAL_BOT_", "REDIS"))}
    env.update(REDIS_URL=redis_url, PYTHONPATH=str(ROOT))

    def export(*args: str) -> str:
        return run_bot(["audit", *args], env=env, cwd=tmp_path, check=True).stdout

    lines = [json.loads(line) for line in export("--since", "1h").splitlines()]
    # (the card's own entry, card_shown, is written when it is posted: #33)
    assert [e["kind"] for e in lines if e["kind"] != "card_shown"] == [
        "run_started", "paused", "decided", "resumed", "run_finished",
    ]  # fmt: skip
    [decided] = [e for e in lines if e["kind"] == "decided"]
    assert decided["user"] == "U2" and len(decided["digest"]) == 64
    csv_text = export("--since", time.strftime("%Y-%m-%d", time.gmtime()), "--format", "csv")
    assert csv_text.splitlines()[0].startswith("id,time,kind,team")
    assert len(csv_text.splitlines()) == len(lines) + 1 == 7
    assert export("--since", "2999-01-01") == ""
    await wait_until(lambda: True)


async def test_lone_surrogates_in_arguments_fail_the_run_cleanly(redis_url: str) -> None:
    """openai-agents 0.24 cannot fingerprint a call whose JSON arguments decode to a lone
    surrogate: the run fails before any approval, and the bot says so in plain words."""
    ledger = Ledger()
    agent, _ = ops_agent(
        [[function_call("delete_logs", '{"path": "/tmp/\\ud800x"}', call_id="c1")]], ledger
    )
    async with BotHarness(redis_url, agent, BASE) as bot:
        await bot.slack.command("clean", user="U1", channel="C1")
        await bot.wait_for_status("failed")
        await bot.idle()
        audit = await bot.audit()
        no_server_errors(bot)
    assert ledger.executed == []
    assert bot.slack_api.approval_messages() == []
    assert any("UnicodeEncodeError" in m.text for m in bot.run_thread())
    assert kinds(audit) == ["run_started", "run_failed"]
