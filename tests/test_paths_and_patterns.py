"""Path globs and regular expressions in `when:` (issue #29, cases 7 and 8): a path is matched
normalised, `*` stays within one segment, and a path that goes up a directory (`..`) is never
approved automatically; `re:` conditions run on RE2, in linear time, so a crafted argument
cannot hold the bot's event loop; a pattern RE2 cannot run is named by `approval-bot check`
with its line. Signed HTTP into the real bot (for case 8, a bot process), a real Redis, the
Slack stand-in."""

from __future__ import annotations

from pathlib import Path

from agents import ApplyPatchTool
from openai.types.responses import ResponseApplyPatchToolCall

from bot.slack.blocks import APPROVE
from bot.store.records import CallStatus
from bot.testing.harness import SIGNING_SECRET, BotHarness, wait_until
from bot.testing.requests import SlackRequests
from bot.testing.slack_api import FakeSlackAPI
from tests.agents_for_tests import POLICY, Ledger, assistant_message, function_call, ops_agent
from tests.processes import bot_env, free_port, running_bot
from tests.test_authorization import no_server_errors
from tests.test_policy_rules import check_names
from tests.test_tool_kinds import Editor

TMP_IS_FINE = (
    POLICY
    + """
tools:
  - name: tmp-deletes
    match: delete_logs
    when: {args.path: "/tmp/*"}
    auto: approve
  - name: source-patches
    match: apply_patch
    when: {path: "src/**"}
    auto: approve
"""
)


async def test_a_path_is_matched_normalised_and_never_approved_through_dot_dot(
    redis_url: str,
) -> None:
    """Case 7: `/tmp/*` approves `/tmp/x` and `//tmp//y/` (the same file, normalised), not
    `/tmp/../etc/passwd` (it goes up a directory: a person decides) nor `/tmp/a/b` (`*` stays
    in one segment); a patch to `src/../../etc/passwd` under `src/**` waits for a person too."""
    ledger = Ledger()
    calls = [
        function_call("delete_logs", {"path": "/tmp/x"}, call_id="plain"),
        function_call("delete_logs", {"path": "//tmp//y/"}, call_id="slashes"),
        function_call("delete_logs", {"path": "/tmp/../etc/passwd"}, call_id="up"),
        function_call("delete_logs", {"path": "/tmp/a/b"}, call_id="deeper"),
    ]
    patch = ResponseApplyPatchToolCall(
        id="p1", call_id="patch", type="apply_patch_call", status="completed",
        operation={"type": "delete_file", "path": "src/../../etc/passwd"},
    )  # fmt: skip
    agent, _ = ops_agent([[*calls, patch], [assistant_message("ok")]], ledger)
    agent.tools.append(ApplyPatchTool(editor=Editor(), needs_approval=True))
    async with BotHarness(redis_url, agent, TMP_IS_FINE) as bot:
        await bot.slack.command("clean", user="U1", channel="C1")
        cards = await bot.wait_for_approvals(3)
        run_id = cards[0].button_value(APPROVE).partition(".")[0]
        calls_now = {c.call_id: c for c in await bot.runtime.service.store.pause_calls(run_id)}
        audit = await bot.audit()
        no_server_errors(bot)
    status = {k: c.status for k, c in calls_now.items()}
    assert status == {
        "up": CallStatus.PENDING, "deeper": CallStatus.PENDING, "patch": CallStatus.PENDING,
    }  # fmt: skip
    # The two the rule approves were decided inside the run (#32), and ran; the run waits for
    # the three people's decisions.
    assert sorted(a["path"] for _, a in ledger.executed) == ["//tmp//y/", "/tmp/x"]
    auto = [e.get("rule") for e in audit if e.get("decision") == "auto_approve"]
    assert auto == ["tmp-deletes", "tmp-deletes"]
    why = {e["approval_id"]: e["detail"] for e in audit if e["kind"] == "undecidable"}
    assert set(why) == {calls_now["up"].approval_id, calls_now["patch"].approval_id}
    assert all("goes up a directory" in detail for detail in why.values())


def test_check_names_a_pattern_re2_cannot_run_and_a_path_pattern_with_dot_dot(
    tmp_path: Path,
) -> None:
    policy = """\
channels:
  C1:
    approvers: [U2]
tools:
  - match: deploy
    when:
      args.env: "re:(prod)-\\\\1"
  - match: deploy
    when:
      args.ticket: "re:(?=T-)T-[0-9]+"
  - match: delete_logs
    when:
      args.path: "/tmp/../etc/*"
"""
    check_names(
        tmp_path,
        policy,
        {
            7: "tools.0.when.args.env: 're:(prod)-\\\\1' is not a valid regular expression",
            10: "tools.1.when.args.ticket: 're:(?=T-)T-[0-9]+' is not a valid regular expression",
            13: "tools.2.when.args.path: '/tmp/../etc/*': a path pattern has no `..`",
        },
    )


BACKTRACKING = """
defaults:
  allow_self_approval: false
channels:
  C1:
    starters: ["*"]
    approvers: [U2, U3]
tools:
  - name: tickets
    match: delete_logs
    when: {args.path: "re:(a+)+$"}
    auto: approve
"""


async def test_a_backtracking_pattern_cannot_hold_the_bot(
    slack: FakeSlackAPI, tmp_path: Path, redis_url: str
) -> None:
    """Case 8: `(a+)+$` against 40 `a`s and a `b` (Python's `re` backtracks for longer than the
    universe's age; 29 characters held the event loop 13 s). On RE2 the call is judged at
    once (no match: it waits for a person) and the bot acks a click as usual. The bot is a
    process of its own, so a loop it could not leave fails this test instead of holding it."""
    policy = tmp_path / "policy.yml"
    policy.write_text(BACKTRACKING)
    env = bot_env(slack, policy, tmp_path, REDIS_URL=redis_url)
    port = free_port()
    url = f"http://127.0.0.1:{port}/slack/events"
    async with running_bot(env, port), SlackRequests(url, SIGNING_SECRET) as requests:
        task = "a" * 40 + "b"  # the stateless agents delete the path the task names
        assert (await requests.command(task, user="U1", channel="C1")).status == 200
        [card] = await wait_until(slack.approval_messages, timeout=30, what="the judged call")
        assert task in card.all_text() and "channels.C1" in card.all_text()
        sent = await requests.click(APPROVE, card.button_value(APPROVE), user="U2",
                                    channel="C1")  # fmt: skip
        assert sent.status == 200
        await wait_until(
            lambda: any("tool said: deleted " + task in m.text for m in slack.messages.values()),
            timeout=30, what="the approved call's output",
        )  # fmt: skip
