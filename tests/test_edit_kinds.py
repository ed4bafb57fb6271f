"""Edit for shell, apply_patch and hosted MCP calls, where a rule sets `allow_edit: true`
(issue #18, part 2): the commands, the diff, the JSON arguments edited in the modal, checked
for what can be checked without a schema, the model told truthfully, and the tool run with the
edited call only. Signed HTTP into the real Bolt app, real Redis, the Slack stand-in."""

from __future__ import annotations

import json
from typing import Any

from agents import Agent, ApplyPatchTool, HostedMCPTool, ShellTool
from agents.editor import ApplyPatchResult
from agents.testing import ScriptedModel, assistant_message
from openai.types.responses import ResponseApplyPatchToolCall, ResponseFunctionShellToolCall
from openai.types.responses.response_output_item import McpApprovalRequest

from bot.checks import edit_problems
from bot.engine.registry import AgentRegistry
from bot.service.policy.rules import parse_policy
from bot.slack.blocks import APPROVE, EDIT, EDIT_JSON_BLOCK
from bot.testing.harness import BotHarness, edit_values
from tests.agents_for_tests import POLICY
from tests.test_tool_kinds import done, run_shell

EDITABLE = (
    POLICY
    + """
tools:
  - match: shell
    allow_edit: true
  - match: apply_patch
    allow_edit: true
  - match: github/*
    allow_edit: true
"""
)


def inputs_of(model: ScriptedModel) -> list[list[dict[str, Any]]]:
    """Every model call's input items, as dicts."""
    return [
        [i if isinstance(i, dict) else i.model_dump() for i in c.input]
        for c in model.calls
        if isinstance(c.input, list)
    ]


def shell_call(call_id: str, commands: list[str]) -> ResponseFunctionShellToolCall:
    return ResponseFunctionShellToolCall(
        id=call_id, call_id=call_id, type="shell_call", status="completed",
        action={"commands": commands, "timeout_ms": 1000},
    )  # fmt: skip


async def submit_text(bot: BotHarness, view: dict[str, Any], text: str, user: str) -> Any:
    sent = await bot.slack.submit(view, edit_values(view, json_text=text), user=user)
    return sent.json() if sent.text else {}


async def test_shell_commands_are_edited_and_only_the_edited_ones_run(redis_url: str) -> None:
    done.clear()
    model = ScriptedModel(
        [
            [shell_call("sh1", ["rm -rf /srv"])],
            [shell_call("sh2", ["rm -rf /srv/build/tmp"])],
            [assistant_message("cleaned")],
        ]
    )
    tool = ShellTool(executor=run_shell, needs_approval=True)
    agent = Agent(name="sh", model=model, tools=[tool])
    async with BotHarness(redis_url, agent, POLICY) as bot:  # no allow_edit: no Edit
        await bot.slack.command("go", user="U1", channel="C1")
        [card] = await bot.wait_for_approvals(1)
        assert EDIT not in card.action_ids()
    done.clear()
    model = ScriptedModel(
        [
            [shell_call("sh1", ["rm -rf /srv"])],
            [shell_call("sh2", ["rm -rf /srv/build/tmp"])],
            [assistant_message("cleaned")],
        ]
    )
    agent = Agent(name="sh", model=model, tools=[tool])
    async with BotHarness(redis_url, agent, EDITABLE) as bot:
        await bot.slack.command("go", user="U1", channel="C1")
        [card] = await bot.wait_for_approvals(1)
        view = await bot.open_edit(card, user="U2")
        [block] = [b for b in view["blocks"] if b["type"] == "input"]
        assert block["block_id"] == EDIT_JSON_BLOCK
        assert block["label"]["text"] == "Commands (one a line)"
        assert block["element"]["initial_value"] == "rm -rf /srv"
        answer = await submit_text(bot, view, "   \n", "U2")
        assert answer["response_action"] == "errors" and "at least one command" in str(answer)
        assert await submit_text(bot, view, "rm -rf /srv/build/tmp\n", "U2") == {}
        await bot.wait_for_status("finished")
        await bot.idle()
        shown = bot.slack_api.messages[(card.channel, card.ts)].all_text()
    assert done == ["rm -rf /srv/build/tmp"]  # the edited command, once; the original never
    assert len(bot.slack_api.approval_messages()) == 1
    assert "Edited by <@U2>" in shown and "+rm -rf /srv/build/tmp" in shown
    # The model was told, as the rejected call's output, what the reviewer changed it to.
    told = json.dumps(inputs_of(model)[1])
    assert "edited the commands" in told and "rm -rf /srv/build/tmp" in told


class PatchEditor:
    def __init__(self) -> None:
        self.applied: list[tuple[str, str]] = []

    def create_file(self, op: Any) -> ApplyPatchResult:
        self.applied.append((op.path, op.diff))
        return ApplyPatchResult(status="completed", output="created")

    def update_file(self, op: Any) -> ApplyPatchResult:
        self.applied.append((op.path, op.diff))
        return ApplyPatchResult(status="completed", output="updated")

    def delete_file(self, op: Any) -> ApplyPatchResult:
        self.applied.append((op.path, ""))
        return ApplyPatchResult(status="completed", output="deleted")


def patch_call(call_id: str, diff: str) -> ResponseApplyPatchToolCall:
    return ResponseApplyPatchToolCall(
        id=call_id, call_id=call_id, type="apply_patch_call", status="completed",
        operation={"type": "update_file", "path": "src/app.py", "diff": diff},
    )  # fmt: skip


async def test_a_patch_diff_is_edited_and_only_the_edited_patch_is_applied(
    redis_url: str,
) -> None:
    original = "@@\n-debug = True\n+debug = False\n"
    edited = "@@\n-debug = True\n+debug = False  # reviewed\n"
    editor = PatchEditor()
    model = ScriptedModel(
        [[patch_call("ap1", original)], [patch_call("ap2", edited)], [assistant_message("ok")]]
    )
    agent = Agent(
        name="coder", model=model, tools=[ApplyPatchTool(editor=editor, needs_approval=True)]
    )
    async with BotHarness(redis_url, agent, EDITABLE) as bot:
        await bot.slack.command("go", user="U1", channel="C1")
        [card] = await bot.wait_for_approvals(1)
        view = await bot.open_edit(card, user="U2")
        [block] = [b for b in view["blocks"] if b["type"] == "input"]
        assert block["element"]["initial_value"] == original  # the diff, without its header
        answer = await submit_text(bot, view, "\n", "U2")
        assert answer["response_action"] == "errors" and "Enter the diff" in str(answer)
        # Slack drops a text's last newline: the edit ends as the original diff did.
        assert await submit_text(bot, view, edited.rstrip("\n"), "U2") == {}
        await bot.wait_for_status("finished")
        await bot.idle()
    assert editor.applied == [("src/app.py", edited)]
    assert len(bot.slack_api.approval_messages()) == 1
    told = json.dumps(inputs_of(model)[1])
    assert "edited this patch" in told and "update_file src/app.py" in told


async def test_hosted_mcp_arguments_are_edited_as_a_json_object(redis_url: str) -> None:
    def request(request_id: str, arguments: dict[str, Any]) -> McpApprovalRequest:
        return McpApprovalRequest(
            id=request_id, type="mcp_approval_request", server_label="github",
            name="create_issue", arguments=json.dumps(arguments),
        )  # fmt: skip

    edited = {"title": "Login fails", "labels": ["bug"]}
    model = ScriptedModel(
        [
            [request("mcpr_1", {"title": "bug"})],
            [request("mcpr_2", edited)],
            [assistant_message("filed")],
        ]
    )
    hosted = HostedMCPTool(
        tool_config={
            "type": "mcp", "server_label": "github",
            "server_url": "https://mcp.invalid/", "require_approval": "always",
        }
    )  # fmt: skip
    agent = Agent(name="triager", model=model, tools=[hosted])
    async with BotHarness(redis_url, agent, EDITABLE) as bot:
        await bot.slack.command("go", user="U1", channel="C1")
        [card] = await bot.wait_for_approvals(1)
        approval_id = card.button_value(APPROVE)
        view = await bot.open_edit(card, user="U2")
        [block] = [b for b in view["blocks"] if b["type"] == "input"]
        assert json.loads(block["element"]["initial_value"]) == {"title": "bug"}
        for bad, words in (("{nope", "Not valid JSON"), ("[1]", "must be a JSON object")):
            answer = await submit_text(bot, view, bad, "U2")
            assert answer["response_action"] == "errors" and words in str(answer), answer
        assert await submit_text(bot, view, json.dumps(edited), "U2") == {}
        await bot.wait_for_status("finished")
        await bot.idle()
        call = await bot.runtime.service.store.get_call(approval_id)
    assert call is not None and call.edited_sha
    assert len(bot.slack_api.approval_messages()) == 1
    responses = [
        [i for i in items if i.get("type") == "mcp_approval_response"] for items in inputs_of(model)
    ]
    # The original request was refused with the edit as its reason; the edited one approved.
    [first] = responses[1]
    assert first["approval_request_id"] == "mcpr_1" and first["approve"] is False
    assert "edited the arguments" in first["reason"] and "Login fails" in first["reason"]
    assert [(r["approval_request_id"], r["approve"]) for r in responses[2]][-1] == (
        "mcpr_2",
        True,
    )


def test_check_accepts_allow_edit_for_shell_patch_and_hosted_mcp_rules() -> None:
    hosted = HostedMCPTool(
        tool_config={"type": "mcp", "server_label": "github", "server_url": "https://x.invalid/"}
    )
    agent = Agent(
        name="all",
        tools=[
            ShellTool(executor=run_shell, needs_approval=True),
            ApplyPatchTool(editor=PatchEditor(), needs_approval=True),
            hosted,
        ],
    )
    registry = AgentRegistry.from_value({"all": agent})
    policy = parse_policy(
        EDITABLE
        + "  - match: vault/*\n    allow_edit: true\n  - match: deploy\n    allow_edit: true\n"
    )
    problems = edit_problems(policy, registry)
    assert [p.split(":")[1].strip() for p in problems] == [
        "tools[3] (vault/*)",
        "tools[4] (deploy)",
    ]
