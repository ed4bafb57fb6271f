"""The approval loop end to end: signed Slack requests in, real Redis, fake Slack Web API out."""

from __future__ import annotations

import json
import zlib
from typing import Any

import pytest
from agents import Agent, function_tool
from agents.testing import ScriptedModel

from bot.slack.blocks import ALWAYS_APPROVE, APPROVE, REJECT
from bot.store import keys
from bot.store.records import Snapshot
from bot.store.runs import decode_snapshot, encode_snapshot
from bot.testing.cluster import redis_for
from bot.testing.harness import BotHarness, status_line, wait_until
from bot.testing.slack_api import FakeSlackAPI, Message
from tests.agents_for_tests import (
    POLICY,
    Ledger,
    assistant_message,
    delete_then_say,
    function_call,
    ops_agent,
    tool_outputs,
)


@pytest.mark.cluster_too
async def test_approve_runs_the_tool_and_posts_the_output(redis_url: str) -> None:
    ledger = Ledger()
    agent, model = ops_agent(delete_then_say("/var/log/app", "Deleted the app logs."), ledger)
    async with BotHarness(redis_url, agent, POLICY) as bot:
        sent = await bot.slack.command("clean up &amp; tidy the logs", user="U1", channel="C1")
        assert sent.status == 200
        [approval] = await bot.wait_for_approvals(1)
        assert ledger.executed == []
        assert approval.action_ids() == [
            "approval_approve",
            "approval_reject",
            "approval_edit",
            "approval_always_approve",
            "approval_always_reject",
            "approval_show_conversation",
        ]
        # Three buttons in sight; the rarer choices in the More menu.
        [actions] = [b for b in approval.blocks if b["type"] == "actions"]
        labels = [e["text"]["text"] for e in actions["elements"] if e["type"] == "button"]
        assert labels == ["Approve", "Reject", "Edit"]
        [menu] = [e for e in actions["elements"] if e["type"] == "overflow"]
        assert [o["text"]["text"] for o in menu["options"]] == [
            "Always approve",
            "Always reject",
            "Details and conversation",
        ]
        text = approval.all_text()
        assert "delete_logs" in text and "/var/log/app" in text and "<@U1>" in text
        assert "waiting for 1 approval" in status_line(bot.run_message())

        clicked = await bot.slack.click(
            APPROVE, approval.button_value(APPROVE), user="U2", channel="C1"
        )
        assert clicked.status == 200
        await bot.wait_for_status("finished")
        await bot.idle()

    assert ledger.executed == [("delete_logs", {"path": "/var/log/app"})]
    # The task reached the agent exactly as typed (Slack's &amp; decoded).
    first_input = model.calls[0].input
    assert "clean up & tidy the logs" in json.dumps(first_input)
    thread = [m.text for m in bot.run_thread()]
    assert "Deleted the app logs." in thread
    decided = bot.slack_api.messages[(approval.channel, approval.ts)]
    assert decided.action_ids() == []
    assert "Approved by <@U2>" in decided.all_text()
    # The tool saw who asked.
    [ctx] = ledger.contexts
    assert (ctx.user_id, ctx.channel_id, ctx.team_id) == ("U1", "C1", "T0TEST")
    assert ctx.thread_ts == bot.run_message().ts  # the run starts once its message is shown


def two_step(call: object, final: str = "ok") -> list[object]:
    return [[call], [assistant_message(final)]]


@pytest.mark.cluster_too
async def test_reject_with_modal_reason_reaches_the_model_exactly(redis_url: str) -> None:
    ledger = Ledger()
    agent, model = ops_agent(
        two_step(function_call("delete_logs", {"path": "/"}, call_id="c1"), "Understood."), ledger
    )
    reason = "Not the root directory!\nUse /var/log/app <only> & nothing else."
    async with BotHarness(redis_url, agent, POLICY) as bot:
        approval = await bot.start_and_wait("clean", user="U1")
        sent = await bot.reject(approval, user="U2", reason=reason)
        assert sent.status == 200 and sent.text == ""  # the modal closes
        await bot.wait_for_status("finished")
        await bot.idle()
    assert ledger.executed == []
    assert tool_outputs(model) == {"c1": reason}
    decided = bot.slack_api.messages[(approval.channel, approval.ts)]
    text = decided.all_text()
    assert "Rejected by <@U2>" in text
    assert "&lt;only&gt; &amp; nothing else" in text
    assert decided.action_ids() == []


async def test_empty_reason_falls_back_to_the_configured_text(redis_url: str) -> None:
    ledger = Ledger()
    agent, model = ops_agent(
        two_step(function_call("delete_logs", {"path": "/"}, call_id="c1")), ledger
    )
    async with BotHarness(
        redis_url, agent, POLICY, rejection_text="Denied by the on-call human."
    ) as bot:
        approval = await bot.start_and_wait("clean", user="U1")
        await bot.reject(approval, user="U2", reason="")
        await bot.wait_for_status("finished")
        await bot.idle()
    assert tool_outputs(model) == {"c1": "Denied by the on-call human."}


@pytest.mark.cluster_too
async def test_thread_reply_rejects_with_the_rest_as_reason(redis_url: str) -> None:
    ledger = Ledger()
    agent, model = ops_agent(
        two_step(function_call("delete_logs", {"path": "/"}, call_id="c1")), ledger
    )
    async with BotHarness(redis_url, agent, POLICY) as bot:
        approval = await bot.start_and_wait("clean", user="U1")
        # Slack encodes & < > in message text; the reason is decoded back.
        sent = await bot.slack.thread_reply(
            "DENY: wrong host &amp; wrong day", user="U3", channel="C1", thread_ts=approval.ts
        )
        assert sent.status == 200
        await bot.wait_for_status("finished")
        await bot.idle()
    assert ledger.executed == []
    assert tool_outputs(model) == {"c1": "wrong host & wrong day"}
    assert "Rejected by <@U3>" in bot.slack_api.messages[(approval.channel, approval.ts)].all_text()


async def _count(found: Any, expected: int) -> bool:
    return len(await found) == expected


async def test_thread_comments_prefill_the_reject_modal(redis_url: str) -> None:
    ledger = Ledger()
    agent, model = ops_agent(
        two_step(function_call("delete_logs", {"path": "/"}, call_id="c1")), ledger
    )
    async with BotHarness(redis_url, agent, POLICY) as bot:
        approval = await bot.start_and_wait("clean", user="U1")
        await bot.slack.thread_reply(
            "rejecting is wise here", user="U3", channel="C1", thread_ts=approval.ts
        )
        await bot.slack.thread_reply(
            "Check the backups first", user="U2", channel="C1", thread_ts=approval.ts
        )
        # Replies are handled after their ack: the click must not overtake them.
        store = bot.runtime.service.store
        aid = approval.button_value(REJECT)
        await wait_until(lambda: _count(store.comments(aid), 2), what="both comments kept")
        await bot.click(approval, REJECT, user="U2")
        await bot.idle()
        [opened] = bot.slack_api.views
        element = opened["view"]["blocks"][1]["element"]
        assert element["initial_value"] == "rejecting is wise here\nCheck the backups first"
        assert element["multiline"] is True
        # Comments changed nothing: the call is still pending, the tool has not run.
        assert bot.slack_api.messages[(approval.channel, approval.ts)].action_ids()
        await bot.slack.submit(
            opened["view"],
            {
                "reason": {
                    "reason_input": {"type": "plain_text_input", "value": element["initial_value"]}
                }
            },
            user="U2",
        )
        await bot.wait_for_status("finished")
        await bot.idle()
    assert tool_outputs(model) == {"c1": "rejecting is wise here\nCheck the backups first"}


@pytest.mark.cluster_too
async def test_always_approve_lets_later_calls_of_that_tool_through(redis_url: str) -> None:
    ledger = Ledger()
    agent, _model = ops_agent(
        [
            [function_call("delete_logs", {"path": "/a"}, call_id="c1")],
            [function_call("delete_logs", {"path": "/b"}, call_id="c2")],
            [function_call("restart_service", {"service": "web"}, call_id="c3")],
            [assistant_message("done")],
        ],
        ledger,
    )
    async with BotHarness(redis_url, agent, POLICY) as bot:
        await bot.slack.command("clean", user="U1", channel="C1")
        [first] = await bot.wait_for_approvals(1)
        await bot.click(first, ALWAYS_APPROVE, user="U2")
        # The second delete_logs call needs no click; restart_service still does.
        await bot.idle()
        pending = await bot.wait_for_approvals(1)
        assert len(pending) == 1 and "restart_service" in pending[0].all_text()
        assert len(bot.slack_api.approval_messages()) == 2
        assert ledger.names() == ["delete_logs", "delete_logs"]
        await bot.click(pending[0], APPROVE, user="U3")
        await bot.wait_for_status("finished")
        await bot.idle()
    assert ledger.names() == ["delete_logs", "delete_logs", "restart_service"]
    assert "always" in bot.slack_api.messages[(first.channel, first.ts)].all_text()


@pytest.mark.cluster_too
async def test_two_parallel_calls_are_decided_separately_and_resume_once(redis_url: str) -> None:
    ledger = Ledger()
    agent, model = ops_agent(
        [
            [
                function_call("delete_logs", {"path": "/a"}, call_id="c1"),
                function_call("restart_service", {"service": "db"}, call_id="c2"),
            ],
            [assistant_message("done")],
        ],
        ledger,
    )
    async with BotHarness(redis_url, agent, POLICY) as bot:
        await bot.slack.command("clean", user="U1", channel="C1")
        approvals = await bot.wait_for_approvals(2)
        assert "waiting for 2 approvals" in status_line(bot.run_message())
        by_tool = {
            ("delete_logs" if "delete_logs" in m.all_text() else "restart"): m for m in approvals
        }
        await bot.click(by_tool["delete_logs"], APPROVE, user="U2")
        await bot.idle()
        # One decision of two: nothing runs yet, the run still waits.
        assert ledger.executed == []
        assert len(model.calls) == 1
        assert "waiting for 1 approval" in status_line(bot.run_message())
        await bot.reject(by_tool["restart"], user="U3", reason="not now")
        await bot.wait_for_status("finished")
        await bot.idle()
    assert ledger.executed == [("delete_logs", {"path": "/a"})]
    assert tool_outputs(model) == {"c1": "deleted /a", "c2": "not now"}
    assert len(model.calls) == 2  # exactly one resume


@pytest.mark.cluster_too
async def test_approval_inside_a_handoff(redis_url: str) -> None:
    ledger = Ledger()
    specialist, _specialist_model = ops_agent(
        two_step(function_call("restart_service", {"service": "api"}, call_id="s1"), "restarted"),
        ledger,
        name="specialist",
    )
    triage = Agent(
        name="triage",
        model=ScriptedModel([[function_call("transfer_to_specialist", {}, call_id="h1")]]),
        handoffs=[specialist],
    )
    async with BotHarness(redis_url, {"triage": triage}, POLICY) as bot:
        await bot.slack.command("restart the api", user="U1", channel="C1")
        [approval] = await bot.wait_for_approvals(1)
        text = approval.all_text()
        assert "*specialist*" in text and "restart_service" in text
        await bot.click(approval, APPROVE, user="U2")
        await bot.wait_for_status("finished")
        await bot.idle()
    assert ledger.executed == [("restart_service", {"service": "api"})]
    assert "restarted" in [m.text for m in bot.run_thread()]
    # Progress lines are shown in the run message, updated in place with its status.
    assert "handed off to specialist" in bot.run_message().all_text()


@pytest.mark.cluster_too
async def test_approval_inside_a_nested_agent_tool(redis_url: str) -> None:
    ledger = Ledger()
    inner, _ = ops_agent(
        two_step(function_call("delete_logs", {"path": "/tmp/x"}, call_id="i1"), "inner done"),
        ledger,
        name="janitor",
    )
    outer = Agent(
        name="lead",
        model=ScriptedModel(
            [
                [function_call("janitor", {"input": "clean /tmp/x"}, call_id="o1")],
                [assistant_message("all clean")],
            ]
        ),
        tools=[inner.as_tool(tool_name="janitor", tool_description="Cleans things")],
    )
    async with BotHarness(redis_url, outer, POLICY) as bot:
        await bot.slack.command("clean tmp", user="U1", channel="C1")
        [approval] = await bot.wait_for_approvals(1)
        assert "*janitor*" in approval.all_text() and "delete_logs" in approval.all_text()
        await bot.click(approval, APPROVE, user="U3")
        await bot.wait_for_status("finished")
        await bot.idle()
    assert ledger.executed == [("delete_logs", {"path": "/tmp/x"})]
    assert "all clean" in [m.text for m in bot.run_thread()]


async def paused_then_stopped(redis_url: str, slack: FakeSlackAPI, ledger: Ledger) -> Message:
    """ops asked to delete /a (call c1) and paused for it; then its bot stopped (the test's next
    harness is a new process: new agent objects, nothing in memory but what Redis kept). The
    call's card."""
    agent, _ = ops_agent(
        two_step(function_call("delete_logs", {"path": "/a"}, call_id="c1")), ledger
    )
    async with BotHarness(redis_url, agent, POLICY, slack=slack) as bot:
        return await bot.start_and_wait("clean", user="U1")


@pytest.mark.cluster_too
async def test_resume_after_the_bot_restarts_while_waiting(redis_url: str) -> None:
    async with FakeSlackAPI() as slack:
        first_ledger = Ledger()
        approval = await paused_then_stopped(redis_url, slack, first_ledger)
        ledger = Ledger()
        agent, model = ops_agent([[assistant_message("finished after restart")]], ledger)
        async with BotHarness(redis_url, agent, POLICY, slack=slack) as bot:
            await bot.click(approval, APPROVE, user="U2")
            await bot.wait_for_status("finished")
            await bot.idle()
        assert first_ledger.executed == []
        assert ledger.executed == [("delete_logs", {"path": "/a"})]
        assert tool_outputs(model) == {"c1": "deleted /a"}
        assert "finished after restart" in [m.text for m in bot.run_thread()]


async def test_a_changed_approval_setting_of_a_pending_tool_refuses_the_resume(
    redis_url: str,
) -> None:
    async with FakeSlackAPI() as slack:
        ledger = Ledger()
        approval = await paused_then_stopped(redis_url, slack, ledger)

        @function_tool(needs_approval=False)
        def delete_logs(path: str) -> str:
            """The same tool, now without an approval: the decision was about another thing."""
            ledger.executed.append(("delete_logs", {"path": path}))
            return "deleted"

        model = ScriptedModel([[assistant_message("never")]])
        changed = Agent(name="ops", instructions="You operate servers.", model=model,
                        tools=[delete_logs])  # fmt: skip
        async with BotHarness(redis_url, changed, POLICY, slack=slack) as bot:
            sent = await bot.click(approval, APPROVE, user="U2")
            assert sent.status == 200
            await bot.wait_for_status("failed")
            await bot.idle()
        assert ledger.executed == []
        assert model.calls == ()
        thread = " ".join(m.text for m in bot.run_thread())
        assert "definitions this run needs changed" in thread
        assert "the approval setting of `ops/delete_logs` changed" in thread


async def test_a_run_paused_before_an_unrelated_agent_edit_resumes(redis_url: str) -> None:
    """An upgrade that adds a tool to the agent, a new agent beside it, and a new SDK release
    that still reads the snapshot keeps paused runs."""
    async with FakeSlackAPI() as slack:
        ledger = Ledger()
        approval = await paused_then_stopped(redis_url, slack, ledger)

        @function_tool(needs_approval=True)
        def wipe_disk(device: str) -> str:
            """A tool that did not exist when the run paused."""
            return "wiped"

        changed, _ = ops_agent([[assistant_message("done after the upgrade")]], ledger,
                               extra_tools=[wipe_disk])  # fmt: skip
        # ...and the SDK was upgraded too: the snapshot says another version wrote it.
        run_id = keys.run_of(approval.button_value(APPROVE))
        assert run_id is not None
        client = await redis_for(redis_url)
        stored = decode_snapshot(await client.get(keys.state_key(run_id)))
        older = Snapshot(stored.state, "0.24.0rc1", stored.fingerprint)
        await client.set(keys.state_key(run_id), encode_snapshot(older))
        await client.aclose()
        helper, _ = ops_agent([[assistant_message("new")]], Ledger(), name="helper")
        async with BotHarness(
            redis_url, {"ops": changed, "helper": helper}, POLICY, slack=slack
        ) as bot:
            await bot.click(approval, APPROVE, user="U2")
            await bot.wait_for_status("finished")
            await bot.idle()
        assert ledger.executed == [("delete_logs", {"path": "/a"})]
        assert "done after the upgrade" in [m.text for m in bot.run_thread()]


async def test_a_failing_model_marks_the_run_failed_in_plain_words(redis_url: str) -> None:
    ledger = Ledger()
    agent, _ = ops_agent([RuntimeError("the model provider is down")], ledger)
    async with BotHarness(redis_url, agent, POLICY) as bot:
        await bot.slack.command("clean", user="U1", channel="C1")
        await bot.wait_for_status("failed")
        await bot.idle()
    thread = " ".join(m.text for m in bot.run_thread())
    assert "RuntimeError: the model provider is down" in thread


async def test_a_raising_needs_approval_check_fails_closed(redis_url: str) -> None:
    ledger = Ledger()

    async def broken_policy(ctx: Any, params: Any, call_id: str) -> bool:
        raise ConnectionError("policy service unreachable")

    @function_tool(needs_approval=broken_policy)
    def transfer_money(amount: int) -> str:
        """Move money."""
        ledger.executed.append(("transfer_money", {"amount": amount}))
        return "sent"

    agent, _ = ops_agent(
        two_step(function_call("transfer_money", {"amount": 5}, call_id="m1")),
        ledger,
        extra_tools=[transfer_money],
    )
    async with BotHarness(redis_url, agent, POLICY) as bot:
        await bot.slack.command("pay", user="U1", channel="C1")
        [approval] = await bot.wait_for_approvals(1)
        assert ledger.executed == []
        await bot.click(approval, APPROVE, user="U2")
        await bot.wait_for_status("finished")
        await bot.idle()
    assert ledger.executed == [("transfer_money", {"amount": 5})]


async def test_a_tool_exception_that_propagates_fails_the_run(redis_url: str) -> None:
    @function_tool(needs_approval=True, failure_error_function=None)
    def flaky_migration(name: str) -> str:
        """Run a migration; raises instead of reporting errors to the model."""
        raise OSError(f"migration {name} lost its database connection")

    ledger = Ledger()
    agent, model = ops_agent(
        two_step(function_call("flaky_migration", {"name": "m42"}, call_id="c1")),
        ledger,
        extra_tools=[flaky_migration],
    )
    async with BotHarness(redis_url, agent, POLICY) as bot:
        await bot.slack.command("migrate", user="U1", channel="C1")
        [approval] = await bot.wait_for_approvals(1)
        await bot.click(approval, APPROVE, user="U2")
        await bot.wait_for_status("failed")
        await bot.idle()
    thread = " ".join(m.text for m in bot.run_thread())
    assert "migration m42 lost its database connection" in thread
    assert len(model.calls) == 1  # the model was not called again after the failure


async def test_an_unreadable_snapshot_fails_the_run_and_runs_nothing(redis_url: str) -> None:
    ledger = Ledger()
    agent, model = ops_agent(
        two_step(function_call("delete_logs", {"path": "/"}, call_id="c1")), ledger
    )
    async with BotHarness(redis_url, agent, POLICY) as bot:
        approval = await bot.start_and_wait("clean", user="U1")
        run_id = keys.run_of(approval.button_value(APPROVE))
        assert run_id is not None
        client = await redis_for(redis_url)
        stored = decode_snapshot(await client.get(keys.state_key(run_id)))
        unreadable = zlib.compress(b'{"$schemaVersion": "1.21"}')
        await client.set(
            keys.state_key(run_id),
            encode_snapshot(Snapshot(unreadable, stored.sdk_version, stored.fingerprint)),
        )
        await client.aclose()
        await bot.click(approval, APPROVE, user="U2")
        await bot.wait_for_status("failed")
        await bot.idle()
    assert ledger.executed == []
    assert len(model.calls) == 1
    assert any("could not be read" in m.text for m in bot.run_thread())
