"""A reviewer decides from the card alone (#18, part 1): the agent's own words, the tool's
description, the call rendered for its kind, the whole call and the run's conversation one click
away (for people who may see the card, and nobody else), everything escaped."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agents import Agent, ApplyPatchTool, HostedMCPTool, ShellTool, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from openai.types.responses import (
    ResponseApplyPatchToolCall,
    ResponseFunctionShellToolCall,
    ResponseReasoningItem,
)
from openai.types.responses.response_output_item import McpApprovalRequest
from openai.types.responses.response_reasoning_item import Summary

from bot.slack.blocks import APPROVE, SHOW_ALL, SHOW_CONVERSATION
from bot.testing.harness import BotHarness, wait_until
from bot.testing.slack_api import Message
from tests.agents_for_tests import POLICY
from tests.test_tool_kinds import DIFF, Editor, run_shell

written: list[dict[str, Any]] = []


@pytest.fixture(autouse=True)
def nothing_written() -> None:
    """Each test starts with nothing written: the tool's record is shared by the module's tests,
    which a worker may run in any order."""
    written.clear()


@function_tool(needs_approval=True)
def write_file(path: str, content: str) -> str:
    """Write a file on the web servers, replacing what it holds.

    Args:
        path: Where the file goes, under /srv.
        content: The file's new content.
    """
    written.append({"path": path, "content": content})
    return f"wrote {len(content)} characters to {path}"


def writer(steps: list[Any]) -> Agent[Any]:
    return Agent(name="writer", model=ScriptedModel(steps), tools=[write_file])


def sections(message: Message) -> list[str]:
    return [b["text"]["text"] for b in message.blocks if b.get("type") == "section"]


def view_text(view: dict[str, Any]) -> str:
    """Every text of a modal as Slack received it (views.open), in order."""
    return Message("V", "0", "", view["blocks"]).all_text()


def check_modal_limits(view: dict[str, Any]) -> None:
    assert len(view["blocks"]) <= 100 and len(view["title"]["text"]) <= 24
    for block in view["blocks"]:
        texts = [block.get("text", {}).get("text", "")]
        texts += [e.get("text", "") for e in block.get("elements", [])]
        assert all(len(t) <= 3000 for t in texts)


async def open_modal(bot: BotHarness, card: Message, action_id: str, user: str) -> dict[str, Any]:
    """`user` clicks Show all or Show conversation on `card`: the modal as Slack received it."""
    opened = len(bot.slack_api.views)
    sent = await bot.slack.click(
        action_id, card.button_value(APPROVE), user=user, channel=card.channel,
        message_ts=card.ts,
    )  # fmt: skip
    assert sent.status == 200
    await wait_until(lambda: len(bot.slack_api.views) > opened, what="the modal")
    view: dict[str, Any] = bot.slack_api.views[-1]["view"]
    check_modal_limits(view)
    return view


REASON = "The config still has debug on in production; I will write the fixed file."


async def test_the_card_shows_the_agents_words_and_the_tools_description(redis_url: str) -> None:
    thought = ResponseReasoningItem(
        id="rs1", type="reasoning", summary=[Summary(text="Debug leaks data", type="summary_text")]
    )
    said = assistant_message(REASON)
    call = function_call("write_file", {"path": "/srv/app.cfg", "content": "debug=0"}, call_id="w1")
    agent = writer([[thought, said, call], [assistant_message("done")]])
    async with BotHarness(redis_url, agent, POLICY) as bot:
        card = await bot.start_and_wait("fix the config", user="U1")
        text = card.all_text()
        assert "*write_file* on `/srv/app.cfg` · asked by <@U1>" in text
        assert f"*Why* (agent *writer*):\n>{REASON}" in text
        assert "_Its reasoning summary:_\n>Debug leaks data" in text
        assert "```path: /srv/app.cfg\ncontent: debug=0```" in text
        # Nothing is cut: no Show all; the details (the tool's description among them) are
        # in the More menu.
        assert "approval_show_all" not in json.dumps(card.blocks)
        assert SHOW_CONVERSATION in card.action_ids()
        details = view_text(await open_modal(bot, card, SHOW_CONVERSATION, user="U2"))
        assert "`write_file`: Write a file on the web servers, replacing what it holds." in details
        assert "_path_: Where the file goes, under /srv." in details
        assert "Call digest `" in details and "rule `channels.C1`" in details
        await bot.click(card, APPROVE, user="U2")
        await bot.wait_for_status("finished")
        await bot.idle()
        decided = bot.slack_api.messages[(card.channel, card.ts)]
        # The decided card keeps the words, loses every button.
        assert REASON in decided.all_text() and "accessory" not in json.dumps(decided.blocks)
    assert written == [{"path": "/srv/app.cfg", "content": "debug=0"}]


async def test_a_call_without_words_says_the_agent_gave_no_reason(redis_url: str) -> None:
    call = function_call("write_file", {"path": "/srv/a", "content": "x"}, call_id="w1")
    async with BotHarness(redis_url, writer([[call], [assistant_message("ok")]]), POLICY) as bot:
        card = await bot.start_and_wait("write", user="U1")
        assert "*Why* (agent *writer*): _the agent gave no reason_" in card.all_text()


async def test_each_kind_is_rendered_for_what_it_is(redis_url: str) -> None:
    """A patch as a unified diff; shell commands with their directory and timeout; a hosted MCP
    call with its server's label and URL."""
    patch = ResponseApplyPatchToolCall(
        id="ap1", call_id="ap1", type="apply_patch_call", status="completed",
        operation={"type": "update_file", "path": "src/app.py", "diff": DIFF},
    )  # fmt: skip
    shell = ResponseFunctionShellToolCall(
        id="sh1", call_id="sh1", type="shell_call", status="completed",
        action={"commands": ["make deploy"], "timeout_ms": 90000},
    )  # fmt: skip
    mcp = McpApprovalRequest(
        id="mcpr_1", type="mcp_approval_request", server_label="github",
        name="create_issue", arguments='{"title": "bug"}',
    )  # fmt: skip
    hosted = HostedMCPTool(
        tool_config={
            "type": "mcp", "server_label": "github",
            "server_url": "https://mcp.example/github", "require_approval": "always",
        }
    )  # fmt: skip
    agent = Agent(
        name="coder",
        model=ScriptedModel([[patch, shell, mcp], [assistant_message("done")]]),
        tools=[
            ApplyPatchTool(editor=Editor(), needs_approval=True),
            ShellTool(executor=run_shell, needs_approval=True),
            hosted,
        ],
    )
    async with BotHarness(redis_url, agent, POLICY) as bot:
        await bot.slack.command("ship it", user="U1", channel="C1")
        cards = await bot.wait_for_approvals(3)
        text = "\n".join(c.all_text() for c in cards)
    assert (
        "*Patch:* update_file `src/app.py`\n```--- a/src/app.py\n+++ b/src/app.py\n@@\n"
        "-debug = True\n+debug = False```"
    ) in text
    assert "```make deploy```" in text and "*Timeout:* `90 s`" in text
    assert "*Working directory:* `not given (the tool's own)`" in text
    assert "*Server:* `github`  ·  *URL:* `https://mcp.example/github`" in text


async def test_a_long_argument_is_cut_on_the_card_and_whole_in_show_all(redis_url: str) -> None:
    content = "".join(f"line {n:05d} of the new config\n" for n in range(1100))[:30_000]
    assert len(content) == 30_000
    call = function_call("write_file", {"path": "/srv/big.cfg", "content": content}, call_id="w1")
    agent = writer([[assistant_message("Replacing the config."), call], [assistant_message("ok")]])
    async with BotHarness(redis_url, agent, POLICY) as bot:
        card = await bot.start_and_wait("write the big config", user="U1")
        assert all(len(t) <= 3000 for t in sections(card)) and len(card.blocks) <= 50
        text = card.all_text()
        assert "truncated: showing 159 of 30,000 characters of content" in text
        assert "…" in text and content[:100].split("\n")[0] in text
        view = await open_modal(bot, card, SHOW_ALL, user="U2")
        shown = view_text(view)
        assert "*content* (30,000 characters)" in shown and "*path* (12 characters)" in shown
        # The whole value, in sections of code, exactly.
        codes = [b["text"]["text"] for b in view["blocks"] if b["text"]["text"].startswith("```")]
        assert "".join(c[3:-3] for c in codes) == "/srv/big.cfg" + content
        await bot.click(card, APPROVE, user="U2")
        await bot.wait_for_status("finished")
        await bot.idle()
    assert written == [{"path": "/srv/big.cfg", "content": content}]


async def test_the_conversation_modal_shows_the_run_so_far_to_its_channel_only(
    redis_url: str,
) -> None:
    first = function_call("write_file", {"path": "/srv/a", "content": "1"}, call_id="w1")
    second = function_call("write_file", {"path": "/srv/b", "content": "2"}, call_id="w2")
    agent = writer(
        [
            [assistant_message("First /srv/a."), first],
            [assistant_message("Then /srv/b instead."), second],
            [assistant_message("ok")],
        ]
    )
    async with BotHarness(redis_url, agent, POLICY) as bot:
        bot.slack_api.channel_members["C1"] = ["U1", "U2", "U3", "U4"]
        card = await bot.start_and_wait("tidy the config files", user="U1")
        await bot.reject(card, user="U2", reason="not /srv/a, it is live")
        [later] = await bot.wait_for_approvals(1)
        # U4 is no approver, but is in the channel and sees the card: allowed.
        view = await open_modal(bot, later, SHOW_CONVERSATION, user="U4")
        text = view_text(view)
        order = [
            "*Task:*\n>tidy the config files",
            ":bust_in_silhouette: *User*:\n>tidy the config files",
            "*writer* said:\n>First /srv/a.",
            '*writer* called `write_file`:\n```{\n  "path": "/srv/a"',
            ":no_entry: Rejected by <@U2>",
            ">not /srv/a, it is live",
            ":inbox_tray: Result:\n```not /srv/a, it is live```",
            "*writer* said:\n>Then /srv/b instead.",
            '*writer* called `write_file`:\n```{\n  "path": "/srv/b"',
            "*This call*: waiting for a decision",
        ]
        at = [text.find(piece) for piece in order]
        assert -1 not in at and at == sorted(at), list(zip(order, at, strict=True))
        # Mallory is not in the channel: told privately, shown nothing, whichever button.
        opened = len(bot.slack_api.views)
        for action_id in (SHOW_CONVERSATION, SHOW_ALL):
            await bot.slack.click(
                action_id, later.button_value(APPROVE), user="U9", channel="C1",
                message_ts=later.ts,
            )  # fmt: skip
        told = await wait_until(
            lambda: len(bot.slack_api.ephemeral_to("U9")) >= 2 and bot.slack_api.ephemeral_to("U9"),
            what="the refusals",
        )
        assert all("Only the members of this run's channel" in t for t in told)
        await bot.idle()
        assert len(bot.slack_api.views) == opened


HOSTILE = "<!channel> *bold* <@U7> <https://evil.example|click> ```x``` &amp;"


async def test_untrusted_words_and_arguments_stay_inert(redis_url: str) -> None:
    call = function_call("write_file", {"path": "/srv/a", "content": HOSTILE}, call_id="w1")
    said = assistant_message(f"Trust me {HOSTILE}")
    async with BotHarness(
        redis_url, writer([[said, call], [assistant_message("ok")]]), POLICY
    ) as bot:
        card = await bot.start_and_wait("write", user="U1")
        [body] = [t for t in sections(card) if t.startswith("```")]
        # Inside one code block: `*bold*` is not bold, the fence cannot be closed early.
        assert body.startswith("```") and body.endswith("```") and body.count("```") == 2
        assert (
            "content: &lt;!channel&gt; *bold* &lt;@U7&gt; &lt;https://evil.example|click&gt;"
            in body
        )
        assert "&amp;amp;" in body
        [why] = [t for t in sections(card) if t.startswith("*Why")]
        assert why.startswith("*Why* (agent *writer*):\n>Trust me &lt;!channel&gt;")
        conversation = view_text(await open_modal(bot, card, SHOW_CONVERSATION, user="U2"))
        assert "&lt;!channel&gt; *bold*" in conversation
        whole = view_text(await open_modal(bot, card, SHOW_ALL, user="U2"))
        assert "```&lt;!channel&gt; *bold* &lt;@U7&gt;" in whole
    for sent in bot.slack_api.calls:
        if sent.method in ("chat.postMessage", "chat.update", "views.open"):
            payload = json.dumps(sent.params)
            for raw in ("<!channel>", "<@U7>", "<https://evil"):
                assert raw not in payload, (sent.method, raw)
