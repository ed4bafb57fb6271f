"""Every kind of approval the SDK raises is shown for what it is, and decided like the others."""

from __future__ import annotations

from typing import Any

from agents import Agent, ApplyPatchTool, HostedMCPTool, ShellCommandOutput, ShellResult, ShellTool
from agents.editor import ApplyPatchResult
from agents.mcp import MCPServer
from agents.testing import ScriptedModel, assistant_message, function_call
from mcp.types import CallToolResult, ListPromptsResult, TextContent
from mcp.types import Tool as MCPTool
from openai.types.responses import ResponseApplyPatchToolCall, ResponseFunctionShellToolCall
from openai.types.responses.response_output_item import McpApprovalRequest

from bot.slack.blocks import ALWAYS_APPROVE, APPROVE
from bot.store import keys
from bot.testing.harness import BotHarness
from tests.agents_for_tests import POLICY

done: list[str] = []


async def run_shell(request: Any) -> ShellResult:
    commands = list(request.data.action.commands)
    done.extend(commands)
    return ShellResult(output=[ShellCommandOutput(stdout="ok", command=c) for c in commands])


class Editor:
    def create_file(self, op: Any) -> ApplyPatchResult:
        done.append(f"create {op.path}")
        return ApplyPatchResult(status="completed", output="created")

    def update_file(self, op: Any) -> ApplyPatchResult:
        done.append(f"update {op.path}")
        return ApplyPatchResult(status="completed", output="updated")

    def delete_file(self, op: Any) -> ApplyPatchResult:
        done.append(f"delete {op.path}")
        return ApplyPatchResult(status="completed", output="deleted")


class VaultMCP(MCPServer):
    """A local MCP server whose tools all require approval."""

    def __init__(self) -> None:
        super().__init__(require_approval="always")

    @property
    def name(self) -> str:
        return "vault"

    async def connect(self) -> None:
        pass

    async def cleanup(self) -> None:
        pass

    async def list_tools(self, run_context: Any = None, agent: Any = None) -> list[MCPTool]:
        schema = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}
        return [MCPTool(name="read_secret", description="Read a secret", inputSchema=schema)]

    async def call_tool(
        self, tool_name: str, arguments: dict[str, Any] | None, meta: Any = None
    ) -> CallToolResult:
        done.append(f"mcp {tool_name} {arguments}")
        return CallToolResult(content=[TextContent(type="text", text="s3cr3t")])

    async def list_prompts(self) -> ListPromptsResult:
        return ListPromptsResult(prompts=[])

    async def get_prompt(self, name: str, arguments: Any = None) -> Any:
        raise NotImplementedError


journal: dict[str, dict[str, Any]] = {}


async def decide_one(redis_url: str, agent: Agent[Any], action: str = APPROVE) -> str:
    """Start a run, approve its single pending call, wait for the end; return the approval text
    (and leave the run's call journal in `journal`)."""
    async with BotHarness(redis_url, agent, POLICY) as bot:
        await bot.slack.command("go", user="U1", channel="C1")
        [approval] = await bot.wait_for_approvals(1)
        text = approval.all_text()
        run_id = keys.run_of(approval.button_value(APPROVE))
        await bot.click(approval, action, user="U2")
        await bot.wait_for_status("finished")
        await bot.idle()
        assert run_id is not None
        journal.clear()
        journal.update(await bot.runtime.service.journal.entries(run_id))
    return text


def journaled(tool: str) -> list[str]:
    """Statuses of the journal entries of `tool`: every execution is recorded, at most once."""
    return [e["status"] for e in journal.values() if e["tool"] == tool]


async def test_shell_commands_are_shown_as_commands(redis_url: str) -> None:
    done.clear()
    call = ResponseFunctionShellToolCall(
        id="sh1", call_id="sh1", type="shell_call", status="completed",
        action={"commands": ["ls -la /srv", "rm -rf /srv/build"], "timeout_ms": 1000},
    )  # fmt: skip
    again = call.model_copy(update={"id": "sh2", "call_id": "sh2"})
    agent = Agent(
        name="sh",
        model=ScriptedModel([[call], [again], [assistant_message("built")]]),
        tools=[ShellTool(executor=run_shell, needs_approval=True)],
    )
    text = await decide_one(redis_url, agent, ALWAYS_APPROVE)
    assert "*Commands:*" in text and "ls -la /srv\nrm -rf /srv/build" in text
    assert "shell `ls -la /srv`" in text
    # Always approve covered the second shell call: it ran without a second message.
    assert done == ["ls -la /srv", "rm -rf /srv/build", "ls -la /srv", "rm -rf /srv/build"]
    assert sorted(journal) == ["sh1", "sh2"] and journaled("shell") == ["executed", "executed"]


DIFF = "@@\n-debug = True\n+debug = False\n"


async def test_patches_are_shown_as_a_diff(redis_url: str) -> None:
    done.clear()
    patch = ResponseApplyPatchToolCall(
        id="ap1", call_id="ap1", type="apply_patch_call", status="completed",
        operation={"type": "update_file", "path": "src/app.py", "diff": DIFF},
    )  # fmt: skip
    agent = Agent(
        name="coder",
        model=ScriptedModel([[patch], [assistant_message("patched")]]),
        tools=[ApplyPatchTool(editor=Editor(), needs_approval=True)],
    )
    text = await decide_one(redis_url, agent)
    assert "*Patch:* update_file `src/app.py`" in text
    assert "-debug = True\n+debug = False" in text
    assert done == ["update src/app.py"]
    assert journaled("apply_patch") == ["executed"]


async def test_local_mcp_tools_name_their_server(redis_url: str) -> None:
    done.clear()
    agent = Agent(
        name="keeper",
        model=ScriptedModel(
            [[function_call("read_secret", {"key": "db"}, call_id="m1")], [assistant_message("ok")]]
        ),
        mcp_servers=[VaultMCP()],
    )
    text = await decide_one(redis_url, agent)
    assert "MCP tool `vault/read_secret`" in text and "```key: db```" in text
    assert done == ["mcp read_secret {'key': 'db'}"]
    assert journaled("vault/read_secret") == ["executed"]


async def test_hosted_mcp_requests_show_server_label_and_tool(redis_url: str) -> None:
    request = McpApprovalRequest(
        id="mcpr_1", type="mcp_approval_request", server_label="github",
        name="create_issue", arguments='{"title": "bug"}',
    )  # fmt: skip
    model = ScriptedModel([[request], [assistant_message("filed")]])
    hosted = HostedMCPTool(
        tool_config={
            "type": "mcp", "server_label": "github",
            "server_url": "https://mcp.invalid/", "require_approval": "always",
        }
    )  # fmt: skip
    agent = Agent(name="triager", model=model, tools=[hosted])
    text = await decide_one(redis_url, agent)
    assert "hosted MCP tool `github/create_issue`" in text and '"title": "bug"' in text
    # The model was told the request was approved.
    last = model.last_call
    assert last is not None
    responses = [
        i for i in last.input if isinstance(i, dict) and i.get("type") == "mcp_approval_response"
    ]
    assert responses and responses[0]["approve"] is True


async def test_identical_mcp_calls_approved_in_two_pauses_both_run(redis_url: str) -> None:
    done.clear()
    read = {"key": "db"}
    agent = Agent(
        name="keeper",
        model=ScriptedModel(
            [
                [function_call("read_secret", read, call_id="m1")],
                [function_call("read_secret", read, call_id="m2")],
                [assistant_message("ok")],
            ]
        ),
        mcp_servers=[VaultMCP()],
    )
    async with BotHarness(redis_url, agent, POLICY) as bot:
        await bot.slack.command("go", user="U1", channel="C1")
        for _ in range(2):
            [approval] = await bot.wait_for_approvals(1)
            await bot.click(approval, APPROVE, user="U2")
            await bot.idle()
        await bot.wait_for_status("finished")
    # Each approved call ran; the second was not mistaken for a replay of the first.
    assert done == ["mcp read_secret {'key': 'db'}", "mcp read_secret {'key': 'db'}"]
