"""Edit, then approve: signed clicks and modal submissions, real Redis, the Slack stand-in.

The edited call is the original rejected (its message names the edited arguments) plus a
one-shot approval of exactly the edited call; the tool runs with the edited arguments only."""

from __future__ import annotations

import json
from typing import Annotated, Any

from agents import function_tool
from pydantic import Field

from bot.service.decisions.edits import edit_message
from bot.slack.blocks import APPROVE, EDIT, EDIT_MODAL
from bot.store.records import CallStatus
from bot.testing.harness import BotHarness, edit_values, wait_until
from tests.agents_for_tests import (
    POLICY,
    Ledger,
    assistant_message,
    function_call,
    ops_agent,
    tool_outputs,
)

QUORUM = (
    POLICY.replace("approvers: [U2, U3]", "approvers: [U2, U3, U4]")
    + """
tools:
  - match: delete_logs
    required_approvals: 2
"""
)
NO_EDIT = (
    POLICY
    + """
tools:
  - match: delete_logs
    allow_edit: false
"""
)


def scale_tool(ledger: Ledger) -> Any:
    @function_tool(needs_approval=True)
    def scale(service: str, replicas: Annotated[int, Field(ge=1, le=10)]) -> str:
        """Scale a service."""
        ledger.executed.append(("scale", {"service": service, "replicas": replicas}))
        return f"scaled {service} to {replicas}"

    return scale


def edited_then(original: dict[str, Any], again: dict[str, Any]) -> list[Any]:
    """The model proposes `original`; told of the edit, it proposes `again`; then it ends."""
    return [
        [function_call("delete_logs", original, call_id="c1")],
        [function_call("delete_logs", again, call_id="c2")],
        [assistant_message("Done.")],
    ]


async def pending(bot: BotHarness, approval_id: str) -> CallStatus:
    call = await bot.runtime.service.store.get_call(approval_id)
    assert call is not None
    return call.status


async def test_edit_rejected_by_the_schema_shows_errors_and_decides_nothing(
    redis_url: str,
) -> None:
    ledger = Ledger()
    steps = [[function_call("scale", {"service": "web", "replicas": 3}, call_id="c1")]]
    agent, _ = ops_agent(steps, ledger, extra_tools=[scale_tool(ledger)])
    async with BotHarness(redis_url, agent, POLICY) as bot:
        card = await bot.start_and_wait("scale web", user="U1")
        assert EDIT in card.action_ids()
        view = await bot.open_edit(card, user="U2")
        blocks = {b["block_id"]: b for b in view["blocks"] if b["type"] == "input"}
        assert set(blocks) == {"field:service", "field:replicas"}  # a flat schema: per field
        assert blocks["field:replicas"]["element"]["initial_value"] == "3"
        for bad, words in (("abc", "whole number"), ("50", "maximum of 10")):
            sent = await bot.slack.submit(
                view, edit_values(view, {"field:replicas": bad}), user="U2"
            )
            answer = sent.json()
            assert answer["response_action"] == "errors", answer
            assert list(answer["errors"]) == ["field:replicas"]
            assert words in answer["errors"]["field:replicas"]
        await bot.idle()
        approval_id = card.button_value(APPROVE)
        assert await pending(bot, approval_id) == CallStatus.PENDING
        assert ledger.executed == []
        kinds = [e["kind"] for e in await bot.audit()]
        assert "edited" not in kinds and "decided" not in kinds


async def test_edit_approved_runs_the_tool_with_the_edited_arguments_only(redis_url: str) -> None:
    ledger = Ledger()
    agent, model = ops_agent(edited_then({"path": "/"}, {"path": "/var/log/app"}), ledger)
    async with BotHarness(redis_url, agent, POLICY) as bot:
        card = await bot.start_and_wait("clean", user="U1")
        approval_id = card.button_value(APPROVE)
        view = await bot.open_edit(card, user="U2")
        assert json.loads(view["private_metadata"]) == {"approval_id": approval_id, "version": "0"}
        sent = await bot.slack.submit(
            view, edit_values(view, {"field:path": "/var/log/app"}), user="U2"
        )
        assert sent.status == 200 and sent.text == "", sent  # the modal closes
        await bot.wait_for_status("finished")
        await bot.idle()
        call = await bot.runtime.service.store.get_call(approval_id)
        audit = await bot.audit()
    # The tool ran once, with exactly the edited arguments; the original never ran.
    assert ledger.executed == [("delete_logs", {"path": "/var/log/app"})]
    # The model was told its call was not run and what the reviewer changed it to.
    assert call is not None
    told = [json.dumps(c.input) for c in model.calls]
    assert "/var/log/app" in told[1] and "edited the arguments" in told[1]
    assert tool_outputs(model)["c1"] == edit_message(call)
    # One card only: the re-proposed call was settled by the edit, without a new request.
    assert len(bot.slack_api.approval_messages()) == 1
    shown = bot.slack_api.messages[(card.channel, card.ts)].all_text()
    assert "Edited by <@U2>" in shown and '-  "path": "/"' in shown
    assert '+  "path": "/var/log/app"' in shown and "Approved by <@U2>" in shown
    [edited] = [e for e in audit if e["kind"] == "edited"]
    assert edited["user"] == "U2" and call.original_digest in edited["detail"]
    assert call.digest in edited["detail"] and call.original_digest != call.digest
    decided = [e for e in audit if e["kind"] == "decided" and e.get("decision") == "approve_edited"]
    assert len(decided) == 2  # the edited call (by its edit), the re-proposed one (by its approval)


async def test_the_model_not_complying_gets_a_new_card_not_a_silent_run(redis_url: str) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(edited_then({"path": "/"}, {"path": "/tmp"}), ledger)
    async with BotHarness(redis_url, agent, POLICY) as bot:
        card = await bot.start_and_wait("clean", user="U1")
        view = await bot.open_edit(card, user="U2")
        await bot.slack.submit(view, edit_values(view, {"field:path": "/var/log/app"}), user="U2")
        await wait_until(lambda: len(bot.slack_api.approval_messages()) == 2, what="a new card")
        [second] = await bot.wait_for_approvals(1)
        assert second.ts != card.ts and "/tmp" in second.all_text()
        assert ledger.executed == []  # nothing ran: the other call waits for a person
        assert await pending(bot, second.button_value(APPROVE)) == CallStatus.PENDING
        await bot.click(second, APPROVE, user="U3")
        await bot.wait_for_status("finished")
        await bot.idle()
    assert ledger.executed == [("delete_logs", {"path": "/tmp"})]


async def test_an_edit_under_a_quorum_of_two_resets_the_votes(redis_url: str) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(edited_then({"path": "/"}, {"path": "/var/log/app"}), ledger)
    async with BotHarness(redis_url, agent, QUORUM) as bot:
        card = await bot.start_and_wait("clean", user="U1")
        approval_id = card.button_value(APPROVE)
        await bot.click(card, APPROVE, user="U2")  # a vote for the original arguments
        await bot.idle()
        view = await bot.open_edit(card, user="U3")
        sent = await bot.slack.submit(
            view, edit_values(view, {"field:path": "/var/log/app"}), user="U3"
        )
        assert sent.text == "", sent
        await bot.idle()
        call = await bot.runtime.service.store.get_call(approval_id)
        assert call is not None and call.status == CallStatus.PENDING
        assert call.voter_ids() == ["U3"]  # U2's vote was for other arguments
        shown = bot.slack_api.messages[(card.channel, card.ts)].all_text()
        assert "1 of 2 approvals" in shown and "Edited by <@U3>" in shown
        assert ledger.executed == []
        await bot.click(card, APPROVE, user="U3")  # the editor again: counted once
        await bot.idle()
        assert ledger.executed == []
        await bot.click(card, APPROVE, user="U2")  # the second approver of the edited call
        await bot.wait_for_status("finished")
        await bot.idle()
    assert ledger.executed == [("delete_logs", {"path": "/var/log/app"})]
    assert len(bot.slack_api.approval_messages()) == 1


async def test_an_outsiders_forged_edit_submission_is_refused(redis_url: str) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(edited_then({"path": "/"}, {"path": "/var/log/app"}), ledger)
    async with BotHarness(redis_url, agent, POLICY) as bot:
        card = await bot.start_and_wait("clean", user="U1")
        view = await bot.open_edit(card, user="U2")  # an approver's modal, with its id
        values = edit_values(view, {"field:path": "/var/log/app"})
        for outsider in ("U9", "U1"):  # not an approver; the starter (no self-approval)
            sent = await bot.slack.submit(view, values, user=outsider)
            answer = sent.json()
            assert answer["response_action"] == "errors", answer
            assert "field:path" in answer["errors"]
        other_team = await bot.slack.submit(view, values, user="U2", team="T0OTHER")
        assert other_team.json()["response_action"] == "errors"
        opened = len(bot.slack_api.views)
        await bot.click(card, EDIT, user="U9")  # the button itself opens nothing for them
        await bot.idle()
        assert len(bot.slack_api.views) == opened
        assert any("not among the approvers" in t for t in bot.slack_api.ephemeral_to("U9"))
        await bot.idle()
        assert await pending(bot, card.button_value(APPROVE)) == CallStatus.PENDING
        call = await bot.runtime.service.store.get_call(card.button_value(APPROVE))
        assert call is not None and call.edited_sha == ""
        refused = [e for e in await bot.audit() if e["kind"] == "refused"]
        assert {e["user"] for e in refused} >= {"U9", "U1"}
        assert all(e.get("decision") == "edit" for e in refused)
    assert ledger.executed == []


async def test_allow_edit_false_offers_no_edit_and_refuses_a_forged_one(redis_url: str) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(edited_then({"path": "/"}, {"path": "/var/log/app"}), ledger)
    async with BotHarness(redis_url, agent, NO_EDIT) as bot:
        card = await bot.start_and_wait("clean", user="U1")
        assert EDIT not in card.action_ids()
        approval_id = card.button_value(APPROVE)
        forged = {
            "callback_id": EDIT_MODAL,
            "private_metadata": json.dumps({"approval_id": approval_id}),
        }
        values = {"field:path": {"value": {"type": "plain_text_input", "value": "/var/log/app"}}}
        sent = await bot.slack.submit(forged, values, user="U2")
        answer = sent.json()
        assert answer["response_action"] == "errors", answer
        assert "not allowed" in answer["errors"]["field:path"]
        await bot.slack.click(EDIT, approval_id, user="U2", channel="C1", message_ts=card.ts)
        await bot.idle()
        assert bot.slack_api.views == []
        assert await pending(bot, approval_id) == CallStatus.PENDING
    assert ledger.executed == []


async def test_a_nested_schema_is_edited_as_json_checked_and_run_as_edited(redis_url: str) -> None:
    ledger = Ledger()

    @function_tool(needs_approval=True)
    def purge(paths: list[str], dry_run: bool) -> str:
        """Purge paths."""
        ledger.executed.append(("purge", {"paths": paths, "dry_run": dry_run}))
        return "purged"

    edited = {"paths": ["/tmp/a"], "dry_run": True}
    steps = [
        [function_call("purge", {"paths": ["/", "/etc"], "dry_run": False}, call_id="c1")],
        [function_call("purge", edited, call_id="c2")],
        [assistant_message("Done.")],
    ]
    agent, _ = ops_agent(steps, ledger, extra_tools=[purge])
    async with BotHarness(redis_url, agent, POLICY) as bot:
        card = await bot.start_and_wait("purge", user="U1")
        view = await bot.open_edit(card, user="U2")
        [block] = [b for b in view["blocks"] if b["type"] == "input"]
        assert block["block_id"] == "edit_json"
        assert json.loads(block["element"]["initial_value"])["paths"] == ["/", "/etc"]
        for bad, words in (("{not json", "Not valid JSON"), ('{"paths": "/tmp"}', "paths")):
            sent = await bot.slack.submit(view, edit_values(view, json_text=bad), user="U2")
            answer = sent.json()
            assert answer["response_action"] == "errors" and words in answer["errors"]["edit_json"]
        assert ledger.executed == []
        sent = await bot.slack.submit(
            view, edit_values(view, json_text=json.dumps(edited)), user="U2"
        )
        assert sent.text == "", sent
        await bot.wait_for_status("finished")
        await bot.idle()
    assert ledger.executed == [("purge", edited)]
