"""Rules on the arguments (`when:`), automatic decisions with a reason, rules that route a call
to their own approvers and quorum, typed confirmation (`confirm: type`), and `approval-bot
check` naming each policy mistake with its file and line. All through signed HTTP, a real
Redis and the Slack stand-in."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, ApplyPatchTool, RunContextWrapper, ShellTool, function_tool
from agents.testing import ScriptedModel
from openai.types.responses import ResponseApplyPatchToolCall, ResponseFunctionShellToolCall
from pydantic import BaseModel

from bot.slack.blocks import ALWAYS_APPROVE, APPROVE, CONFIRM_MODAL, TYPED_BLOCK, TYPED_INPUT
from bot.testing.harness import BotHarness, wait_until
from bot.testing.slack_api import Message
from tests.agents_for_tests import (
    Ledger,
    assistant_message,
    function_call,
    ops_agent,
    tool_outputs,
)
from tests.saved_pauses import saved_pause
from tests.test_authorization import no_server_errors, status_of
from tests.test_config import check
from tests.test_home import home_click, home_of, open_home
from tests.test_tool_kinds import Editor, run_shell

BASE = """
defaults:
  allow_self_approval: false
channels:
  C1:
    approvers: [U2, U3]
"""


class Target(BaseModel):
    host: str = ""


def deploy_agent(calls: list[Any], ledger: Ledger) -> tuple[Agent[Any], ScriptedModel]:
    """An agent whose gated `deploy` takes an env, a replica count and a nested target."""

    @function_tool(needs_approval=True)
    def deploy(
        ctx: RunContextWrapper[Any], env: str, replicas: int = 1, target: Target | None = None
    ) -> str:
        """Deploy a service."""
        ledger.executed.append(("deploy", {"env": env, "replicas": replicas}))
        return f"deployed to {env}"

    model = ScriptedModel([calls, [assistant_message("done")]])
    return Agent(name="ops", instructions="Deploy.", model=model, tools=[deploy]), model


def pending_args(bot: BotHarness) -> list[str]:
    """The arguments shown on the cards that still wait for a person."""
    return [m.all_text() for m in bot.slack_api.approval_messages() if m.action_ids()]


def auto_decisions(audit: list[dict[str, str]]) -> list[str]:
    return [e["decision"] for e in audit if e["kind"] == "decided" and not e.get("user")]


def with_(**args: Any) -> dict[str, Any]:
    return {"env": "e", **args}


CASES = [
    ("glob", {"args.env": "staging-*"}, {"env": "staging-1"}, {"env": "prod-1"}),
    ("list", {"args.env": ["dev", "qa"]}, {"env": "qa"}, {"env": "prod-1"}),
    ("regex", {"args.env": "re:vip-[0-9]+"}, {"env": "vip-12"}, {"env": "vip-12x"}),
    ("greater", {"args.replicas": "> 10"}, with_(replicas=11), with_(replicas=10)),
    ("at most", {"args.replicas": "<= 0"}, with_(replicas=0), with_(replicas=1)),
    ("equal", {"args.replicas": "== 3"}, with_(replicas=3), with_(replicas=4)),
    ("exists", {"args.target.host": {"exists": True}}, with_(target={"host": "h"}),
     with_(target={})),
    ("absent", {"args.target": {"exists": False}}, with_(), with_(target={})),
    ("nested glob", {"args.target.host": "*.internal"}, with_(target={"host": "db.internal"}),
     with_(target={"host": "db.internal.example.com"})),
]  # fmt: skip


def shows_env(card: str, value: object) -> bool:
    """Whether the card's `name: value` lines show `env` with exactly `value`."""
    text = value if isinstance(value, str) else json.dumps(value)
    return re.search(rf"(^|\n|`)env: {re.escape(text)}($|\n|`)", card) is not None


@pytest.mark.parametrize(("kind", "when", "matching", "other"), CASES, ids=[c[0] for c in CASES])
async def test_each_condition_kind_holds_for_a_matching_call_only(
    redis_url: str, kind: str, when: dict[str, Any], matching: dict[str, Any],
    other: dict[str, Any],
) -> None:  # fmt: skip
    policy = BASE + "tools:\n  - match: deploy\n    when: " + json.dumps(when) + "\n"
    policy += "    auto: approve\n"
    if not any(path == "args.env" for path in when):  # tell the two calls apart on the cards
        matching, other = {**matching, "env": "matched"}, {**other, "env": "unmatched"}
    ledger = Ledger()
    agent, _ = deploy_agent(
        [function_call("deploy", matching, call_id="yes"),
         function_call("deploy", other, call_id="no")],
        ledger,
    )  # fmt: skip
    async with BotHarness(redis_url, agent, policy) as bot:
        await bot.slack.command("deploy", user="U1", channel="C1")
        [card] = await bot.wait_for_approvals(1)
        audit = await bot.audit()
        no_server_errors(bot)
    assert auto_decisions(audit) == ["auto_approve"], kind
    shown = card.all_text()
    # The call that did not match waits for a person (the card shows `name: value` lines).
    assert shows_env(shown, other["env"]) and not shows_env(shown, matching["env"])
    [decided] = [e for e in audit if e["kind"] == "decided"]
    assert decided["rule"] == "tools[0] (deploy)"


async def test_unreadable_arguments_never_approve_automatically(redis_url: str) -> None:
    """Not JSON, the wrong type, a non-object on the way, a number for a regular expression:
    these cannot be decided, so no automatic rule approves them (a missing path is simply
    absent: it holds nothing); each waits for a person under the channel's rule."""
    policy = BASE + (
        "tools:\n"
        "  - match: deploy\n    when: {args.replicas: '< 5'}\n    auto: approve\n"
        "  - match: deploy\n    when: {args.env: 'staging-*'}\n    auto: approve\n"
        "  - match: deploy\n    when: {args.target.host: {exists: false}}\n    auto: approve\n"
        "  - match: deploy\n    when: {args.ticket: 're:T-.*'}\n    auto: approve\n"
    )
    ledger = Ledger()
    agent, _ = deploy_agent(
        [
            function_call("deploy", '{"env": "staging-1", "replicas": 1', call_id="bad_json"),
            function_call("deploy", {"env": 7, "target": "h"}, call_id="wrong_types"),
            function_call(
                "deploy",
                {"env": "prod", "replicas": "2", "target": {"host": "h"}},
                call_id="string_number",
            ),
            # A number, which a regular expression cannot be tried on.
            function_call("deploy", with_(target={"host": "h"}, ticket=12345), call_id="number"),
        ],
        ledger,
    )
    async with BotHarness(redis_url, agent, policy) as bot:
        await bot.slack.command("deploy", user="U1", channel="C1")
        cards = await bot.wait_for_approvals(4)
        audit = await bot.audit()
        no_server_errors(bot)
    assert len(cards) == 4
    assert auto_decisions(audit) == []
    assert ledger.executed == []
    assert all("channels.C1" in c.all_text() for c in cards)  # the channel's rule: a person


async def test_an_automatic_rejection_gives_its_reason_to_the_agent_and_the_thread(
    redis_url: str,
) -> None:
    policy = BASE + (
        "tools:\n"
        "  - name: no-root-deletes\n    match: delete_logs\n    when: {args.path: '/'}\n"
        "    auto: reject\n    reason: Deleting / is never allowed; name a directory.\n"
    )
    ledger = Ledger()
    agent, model = ops_agent(
        [[function_call("delete_logs", {"path": "/"}, call_id="d1")], [assistant_message("ok")]],
        ledger,
    )
    async with BotHarness(redis_url, agent, policy) as bot:
        await bot.slack.command("clean", user="U1", channel="C1")
        await bot.wait_for_status("finished")
        await bot.idle()
        cards = bot.slack_api.approval_messages()
        notes = [m.text for m in bot.run_thread()]
        audit = await bot.audit()
        no_server_errors(bot)
    assert ledger.executed == []
    assert tool_outputs(model)["d1"] == "Deleting / is never allowed; name a directory."
    assert cards == []  # decided inside the run (#32): no card, and the thread says why
    [note] = [n for n in notes if "delete_logs" in n]
    assert "automatically by policy rule `no-root-deletes`" in note
    assert "Deleting / is never allowed" in note
    [decided] = [e for e in audit if e["kind"] == "decided"]
    assert decided["decision"] == "auto_reject" and decided["rule"] == "no-root-deletes"
    assert "no-root-deletes" in decided["detail"]


async def test_a_routed_rule_has_its_own_approvers_and_quorum(redis_url: str) -> None:
    policy = BASE + (
        "tools:\n"
        "  - match: deploy\n    when: {args.env: 'staging-*'}\n    auto: approve\n"
        "  - name: prod-deploys\n    match: deploy\n    when: {args.env: 'prod-*'}\n"
        "    approvers: [U7, U8, U9]\n    required_approvals: 2\n"
    )
    ledger = Ledger()
    agent, _ = deploy_agent(
        [function_call("deploy", {"env": "staging-1"}, call_id="s1"),
         function_call("deploy", {"env": "prod-1"}, call_id="p1")],
        ledger,
    )  # fmt: skip
    async with BotHarness(redis_url, agent, policy) as bot:
        await bot.slack.command("deploy", user="U1", channel="C1")
        [card] = await bot.wait_for_approvals(1)
        assert "rule `prod-deploys`" in card.all_text() and "prod-1" in card.all_text()
        approval_id = card.button_value(APPROVE)
        await bot.click(card, APPROVE, user="U2")  # a channel approver, not this rule's
        await bot.idle()
        assert "not among" in " ".join(bot.slack_api.ephemeral_to("U2"))
        await bot.click(card, APPROVE, user="U7")
        await bot.idle()
        assert await status_of(redis_url, approval_id) == "pending"  # 1 of 2
        await bot.click(card, APPROVE, user="U8")
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await bot.audit()
        no_server_errors(bot)
    assert sorted(e["env"] for _, e in ledger.executed) == ["prod-1", "staging-1"]
    votes = [e for e in audit if e["kind"] == "approval_vote"]
    assert [(e["user"], e["rule"]) for e in votes] == [("U7", "prod-deploys")]
    refused = [e for e in audit if e["kind"] == "refused"]
    assert [(e["user"], e["rule"]) for e in refused] == [("U2", "prod-deploys")]
    human = [e for e in audit if e["kind"] == "decided" and e.get("user")]
    assert [(e["user"], e["rule"]) for e in human] == [("U8", "prod-deploys")]


TYPED = BASE + (
    "tools:\n"
    "  - name: typed-deletes\n    match: delete_logs\n    confirm: type\n"
    "    confirm_value: args.path\n"
)


async def open_confirmation(bot: BotHarness, card: Message, user: str) -> dict[str, Any]:
    return await bot.modal(card, APPROVE, user=user)


async def submit_typed(bot: BotHarness, view: dict[str, Any], user: str, typed: str) -> Any:
    values = {TYPED_BLOCK: {TYPED_INPUT: {"type": "plain_text_input", "value": typed}}}
    return await bot.slack.submit(view, values, user=user)


async def test_typed_confirmation_a_click_decides_nothing_a_wrong_value_is_refused(
    redis_url: str,
) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(
        [[function_call("delete_logs", {"path": "/var/log/app"}, call_id="d1")],
         [assistant_message("ok")]],
        ledger,
    )  # fmt: skip
    async with BotHarness(redis_url, agent, TYPED) as bot:
        card = await bot.start_and_wait("clean", user="U1")
        approval_id = card.button_value(APPROVE)
        assert ALWAYS_APPROVE not in card.action_ids()  # Always would skip the typing
        assert "type the value of `args.path`" in card.all_text()
        view = await open_confirmation(bot, card, "U2")
        assert view["callback_id"] == CONFIRM_MODAL
        assert json.loads(view["private_metadata"]) == {"approval_id": approval_id,
                                                        "channel": "C1"}  # fmt: skip
        assert "`/var/log/app`" in json.dumps(view)
        await bot.idle()
        assert await status_of(redis_url, approval_id) == "pending"  # the click decided nothing
        # Always approve (a crafted click: the card has no such button) is refused too.
        await bot.slack.click(ALWAYS_APPROVE, approval_id, user="U2", channel="C1")
        await bot.idle()
        assert any("Always approve is not offered" in t for t in bot.slack_api.ephemeral_to("U2"))
        wrong = await submit_typed(bot, view, "U2", "/var/log")
        assert wrong.json()["response_action"] == "errors"
        assert "That is not `/var/log/app`" in wrong.json()["errors"][TYPED_BLOCK]
        assert await status_of(redis_url, approval_id) == "pending"
        # Someone who may not approve is refused in the modal, typing the right value.
        stranger = await submit_typed(bot, view, "U9", "/var/log/app")
        assert stranger.json()["response_action"] == "errors"
        assert await status_of(redis_url, approval_id) == "pending"
        right = await submit_typed(bot, view, "U2", "/var/log/app")
        assert right.status == 200 and not right.text
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await bot.audit()
        no_server_errors(bot)
    assert ledger.names() == ["delete_logs"]
    [decided] = [e for e in audit if e["kind"] == "decided"]
    assert (decided["user"], decided["decision"], decided["rule"]) == (
        "U2", "approve", "typed-deletes",
    )  # fmt: skip
    assert [e["user"] for e in audit if e["kind"] == "refused"] == ["U2", "U2", "U9"]


async def test_typed_confirmation_of_the_tool_name_by_default(redis_url: str) -> None:
    policy = BASE + "tools:\n  - match: delete_*\n    confirm: type\n"
    ledger = Ledger()
    agent, _ = ops_agent(
        [[function_call("delete_logs", {"path": "/a"}, call_id="d1")], [assistant_message("ok")]],
        ledger,
    )
    async with BotHarness(redis_url, agent, policy) as bot:
        card = await bot.start_and_wait("clean", user="U1")
        assert "type the tool name" in card.all_text()
        view = await open_confirmation(bot, card, "U3")
        refused = await submit_typed(bot, view, "U3", "/a")
        assert refused.json()["response_action"] == "errors"
        await submit_typed(bot, view, "U3", "delete_logs")
        await bot.wait_for_status("finished")
        no_server_errors(bot)
    assert ledger.names() == ["delete_logs"]


def test_check_names_each_policy_mistake_with_its_file_and_line(tmp_path: Path) -> None:
    policy = """\
channels:
  C1:
    approvers: [U2]
tools:
  - match: deploy
    when:
      args.env: "re:prod-("
      args.replicas: "> ten"
      "not a path": x
  - match: restart
    auto: maybe
    colour: red
  - match: drop_table
    confirm: type
    confirm_value: "args..database"
  - match: other
    reason: no auto here
"""
    expected = {
        7: "tools.0.when.args.env: 're:prod-(' is not a valid regular expression",
        8: "tools.0.when.args.replicas: '> ten' compares with 'ten', which is not a number",
        9: "tools.0.when.not a path: 'not a path' is not an argument path",
        11: "tools.1.auto: Input should be 'approve' or 'reject'",
        12: "tools.1.colour: unknown key 'colour'",
        15: "tools.2.confirm_value: 'args..database' is not an argument path",
        16: "tools.3: reason: only with auto",
    }
    stderr = check_names(tmp_path, policy, expected)
    assert f"{len(expected)} problem(s) found" in stderr


def check_names(tmp_path: Path, policy: str, expected: dict[int, str]) -> str:
    """`approval-bot check` of `policy` fails naming each line's problem; its stderr."""
    result = check(tmp_path, policy, SLACK_BOT_TOKEN="xoxb-real-value", SLACK_SIGNING_SECRET="s",
                   OPENAI_API_KEY="sk-test")  # fmt: skip
    assert result.returncode == 1
    where = str(tmp_path / "policy.yml")
    for line, message in expected.items():
        assert f"{where}:{line}: {message}" in result.stderr, (line, result.stderr)
    return result.stderr


async def test_shell_and_patch_calls_expose_command_path_and_operation(redis_url: str) -> None:
    policy = BASE + (
        "tools:\n"
        "  - name: listing\n    match: shell\n    when: {command: 'ls *'}\n    auto: approve\n"
        "  - name: no-source-deletes\n    match: apply_patch\n"
        "    when: {operation: delete_file, path: 'src/*'}\n"
        "    auto: reject\n    reason: Source files are not deleted by agents.\n"
    )
    shell = ResponseFunctionShellToolCall(
        id="ls", call_id="ls", type="shell_call", status="completed",
        action={"commands": ["ls -la /srv"], "timeout_ms": 1000},
    )  # fmt: skip
    remove = ResponseFunctionShellToolCall(
        id="rm", call_id="rm", type="shell_call", status="completed",
        action={"commands": ["rm -rf /srv"], "timeout_ms": 1000},
    )  # fmt: skip
    delete = ResponseApplyPatchToolCall(
        id="dp", call_id="dp", type="apply_patch_call", status="completed",
        operation={"type": "delete_file", "path": "src/app.py"},
    )  # fmt: skip
    agent = Agent(
        name="coder",
        model=ScriptedModel([[shell, remove, delete], [assistant_message("ok")]]),
        tools=[ShellTool(executor=run_shell, needs_approval=True),
               ApplyPatchTool(editor=Editor(), needs_approval=True)],
    )  # fmt: skip
    async with BotHarness(redis_url, agent, policy) as bot:
        await bot.slack.command("go", user="U1", channel="C1")
        [card] = await bot.wait_for_approvals(1)
        audit = await bot.audit()
        no_server_errors(bot)
    assert "rm -rf /srv" in card.all_text() and "channels.C1" in card.all_text()
    decided = sorted((e["rule"], e["decision"]) for e in audit if e["kind"] == "decided")
    assert decided == [("listing", "auto_approve"), ("no-source-deletes", "auto_reject")]


async def test_the_app_homes_approve_asks_for_the_typed_value_too(redis_url: str) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(
        [[function_call("delete_logs", {"path": "/srv/old"}, call_id="d1")],
         [assistant_message("ok")]],
        ledger,
    )  # fmt: skip
    async with BotHarness(redis_url, agent, TYPED) as bot:
        card = await bot.start_and_wait("clean", user="U1")
        approval_id = card.button_value(APPROVE)
        await open_home(bot, "U2")
        await wait_until(lambda: "U2" in bot.slack_api.home_views, what="U2's Home")
        home = home_of(bot, "U2")
        assert home.button_value(APPROVE) == approval_id
        assert ALWAYS_APPROVE not in home.action_ids()
        opened = len(bot.slack_api.views)
        sent = await bot.slack.send_interaction(home_click(bot, APPROVE, approval_id, "U2"))
        assert sent.status == 200
        await wait_until(lambda: len(bot.slack_api.views) > opened, what="the confirmation modal")
        view = bot.slack_api.views[-1]["view"]
        assert view["callback_id"] == CONFIRM_MODAL
        await bot.idle()
        assert await status_of(redis_url, approval_id) == "pending"
        await submit_typed(bot, view, "U2", "/srv/old")
        await bot.wait_for_status("finished")
        no_server_errors(bot)
    assert ledger.names() == ["delete_logs"]


async def test_automatic_decisions_are_judged_again_by_the_policy_in_force(redis_url: str) -> None:
    """A pause saved with two calls the policy of the time approved automatically, applied
    (as the sweeper does for a worker that stopped after saving it) under a policy that still
    approves one of them and no longer the other: the first is decided once, the other waits
    for a person under the rule now in force, with its timers."""
    policy = BASE + (
        "tools:\n  - name: tmp-deletes\n    match: delete_logs\n    when: {args.path: '/tmp/*'}\n"
        "    auto: approve\n"
    )
    agent, _ = ops_agent([[assistant_message("done")]], Ledger())
    async with BotHarness(redis_url, agent, policy) as bot:

        def posted(path: str) -> dict[str, Any]:
            return {"arguments": json.dumps({"path": path}), "auto": "approve",
                    "rule": "an older rule"}  # fmt: skip

        saved_at = time.time()
        run_id, _ = await saved_pause(bot, posted("/tmp/a"), posted("/etc"))
        service, store = bot.runtime.service, bot.runtime.service.store
        paused = await store.get_run(run_id)
        assert paused is not None
        await service.runs.auto_decide(paused)
        await service.runs.auto_decide(paused)  # again, as a second sweep would: no change
        tmp, etc = await store.pause_calls(run_id)
        audit = await bot.audit()
    assert (tmp.status, tmp.decided_by, tmp.reason) == (
        "approved", "policy", "automatic decision of policy rule tmp-deletes",
    )  # fmt: skip
    assert (etc.status, etc.auto, etc.rule) == ("pending", "", "channels.C1")
    assert etc.expires_at > saved_at  # timed like a call posted for people
    decided = [(e["approval_id"], e["decision"]) for e in audit if e["kind"] == "decided"]
    assert decided == [(tmp.approval_id, "auto_approve")]
    routed = [(e["approval_id"], e["rule"]) for e in audit if e["kind"] == "routed"]
    assert routed == [(etc.approval_id, "channels.C1")]
