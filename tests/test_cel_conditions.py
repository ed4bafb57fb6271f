"""CEL conditions (`when: {cel: ...}`, #34 part 4): judged on what the tool will receive, with
the three results of every condition (an error, a missing field, a result that is not a boolean
is undecidable, and an undecidable condition never approves), checked with their line by
`approval-bot check`, replayed by a backtest. Through the real bot where the behaviour is the
bot's (signed requests, a real Redis, the Slack stand-in)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.learning.backtest import backtest
from bot.learning.history import read_history
from bot.service.policy.cel import compile_cel
from bot.service.policy.conditions import UNREADABLE, ConditionError, Undecidable
from bot.service.policy.rules import parse_policy
from bot.slack.blocks import APPROVE
from bot.store.records import CallStatus
from bot.store.trail.audit import AuditLog
from bot.testing.harness import BotHarness
from bot.testing.history import HistoryWriter
from tests.agents_for_tests import Ledger
from tests.forkserver import run_bot
from tests.test_authorization import no_server_errors
from tests.test_config import ROOT, base_env, check
from tests.test_what_the_tool_receives import pay, payments

# The CFO (U9) approves large payments to acme; everything else is approved automatically.
CEL_THEN_AUTO = """
defaults:
  allow_self_approval: false
channels:
  C1:
    approvers: [U2, U3]
tools:
  - name: large-to-acme
    match: "pay*"
    when: {cel: "args.amount > 10000 && args.to == 'acme'"}
    approvers: [U9]
  - name: small-payments
    match: "pay*"
    auto: approve
"""


async def test_a_cel_condition_judges_what_the_tool_receives_and_never_approves_an_error(
    redis_url: str,
) -> None:
    """50000 as a number or as the text the tool reads as 50000.0: the CFO's rule. 5: the
    automatic one. A string CEL cannot compare with a number (where the bot does not read the
    tool's model for it): undecidable, so the CFO's rule, never the automatic one after it."""
    ledger = Ledger()
    calls = [
        pay("50000", "number"),
        pay('"5e4"', "exponent"),
        pay("5", "small"),
        pay('"50000"', "memo_text", tool="pay_with_memo"),
    ]
    agent, _ = payments(ledger, calls)
    async with BotHarness(redis_url, agent, CEL_THEN_AUTO) as bot:
        await bot.slack.command("pay acme", user="U1", channel="C1")
        cards = await bot.wait_for_approvals(3)
        audit = await bot.audit()
        run_id = cards[0].button_value(APPROVE).partition(".")[0]
        by_call = {c.call_id: c for c in await bot.runtime.service.store.pause_calls(run_id)}
        for card in cards:
            await bot.click(card, APPROVE, user="U9")
        await bot.wait_for_status("finished")
        await bot.idle()
        no_server_errors(bot)
    waiting = {k: c.rule for k, c in by_call.items() if c.status == CallStatus.PENDING}
    assert waiting == {k: "large-to-acme" for k in ("number", "exponent", "memo_text")}
    assert "small" not in by_call  # decided inside the run (#32)
    assert [e["decision"] for e in audit if e["kind"] == "decided"] == ["auto_approve"]
    [undecidable] = [e for e in audit if e["kind"] == "undecidable"]
    assert undecidable["approval_id"] == by_call["memo_text"].approval_id
    assert "cel: No matching overloads found : _>_(string, int64)" in undecidable["detail"]
    assert sorted(a["amount"] for _, a in ledger.executed) == [5.0, 50000.0, 50000.0, 50000.0]


def condition(expression: str) -> Any:
    return compile_cel(expression)


TYPING = [
    # (expression, the call's subject, what the condition says)
    ("args.amount > 10000", {"args": {"amount": 50000.0}}, True),  # an int and a double
    ("args.amount > 10000.0", {"args": {"amount": 50000}}, True),
    ("args.amount > 10000", {"args": {"amount": 5}}, False),
    ("args.flag == 1", {"args": {"flag": True}}, False),  # a boolean is not 1
    ("args.currency == 'USD'", {"args": {"amount": 1}}, "Key not found in map"),
    ("!has(args.currency) || args.currency == 'USD'", {"args": {"amount": 1}}, True),
    ("args.currency == 'USD'", {"args": {"currency": None}}, False),
    ("args.amount > 10000", {"args": {"amount": "50000"}}, "No matching overloads"),
    ("args.n > 1", {"args": {"n": 10**30}}, "out of range"),  # beyond 64 bits
    ("args.a / args.b > 1", {"args": {"a": 1, "b": 0}}, "divide by zero"),
    ("args.missing > 1 || true", {"args": {}}, True),  # CEL's ||: an error, or true
    ("args.x", {"args": {"x": 3}}, "gave int, not true or false"),
    (
        "args.l.all(x, args.l.exists(y, y == x))",
        {"args": {"l": list(range(500))}},
        "Iteration budget exceeded",
    ),
    ("command.startsWith('rm ')", {"args": {"path": "/"}}, False),  # a function call's
    ("command.startsWith('rm ')", {"command": "rm -rf /"}, True),
    ("args.amount > 1", {UNREADABLE: {"args": "is not JSON"}}, "args is not JSON"),
    (
        "args.path.startsWith('/srv/') && !args.path.contains('..')",
        {"args": {"path": "/srv/../etc/passwd"}},
        False,
    ),
    ("args.ticket.matches('^T-[0-9]+$')", {"args": {"ticket": "T-" + "1" * 100_000}}, True),
]


@pytest.mark.parametrize(("expression", "subject", "says"), TYPING)
def test_what_a_cel_condition_says(expression: str, subject: dict[str, Any], says: Any) -> None:
    """True, false, or undecidable with the runtime's reason: never an exception, and RE2's
    linear time on a long string (the agent's)."""
    started = time.process_time()
    truth = condition(expression).test(subject)
    if isinstance(says, bool):
        assert truth is says
    else:
        assert isinstance(truth, Undecidable) and truth.path == "cel", truth
        assert says in truth.why
    assert time.process_time() - started < 5  # not a timing test: a runaway would take minutes


@pytest.mark.parametrize(
    ("expression", "said"),
    [
        ("args.amount >", "column 14: Syntax error"),
        ("foo.bar == 1", "undeclared reference to 'foo.bar'"),
        ("args.amount + 1", "gives int, not true or false"),
        ("'text'", "gives string, not true or false"),
        ("", "a `cel:` condition is a CEL expression, as text"),
    ],
)
def test_a_cel_condition_that_cannot_be_used_is_refused_when_read(
    expression: str, said: str
) -> None:
    with pytest.raises(ConditionError, match=said.replace("(", r"\(").replace("`", "`")):
        condition(expression)


def test_check_names_a_bad_cel_condition_and_a_bad_short_form_with_their_lines(
    tmp_path: Path,
) -> None:
    policy = CEL_THEN_AUTO.replace("args.to == 'acme'", "args.to ==") + (
        "  - match: refund\n    when:\n      args.amount: '> ten'\n"
        '      cel: "size(args.items)"\n    auto: approve\n'
    )
    result = check(tmp_path, policy, SLACK_BOT_TOKEN="xoxb-1", SLACK_SIGNING_SECRET="s",
                   OPENAI_API_KEY="sk-test")  # fmt: skip
    assert result.returncode == 1
    lines = policy.splitlines()
    first = next(n for n, line in enumerate(lines, 1) if "cel:" in line)
    short = next(n for n, line in enumerate(lines, 1) if "'> ten'" in line)
    assert f"policy.yml:{first}: tools.0.when.cel: " in result.stderr
    assert "Syntax error" in result.stderr
    assert f"policy.yml:{short}: tools.2.when.args.amount: " in result.stderr
    # One problem at a time for a rule: its short form is wrong, so its CEL is not reached.
    assert result.stderr.count("when.cel") == 1


async def test_a_backtest_replays_a_candidate_with_a_cel_condition(redis_url: str) -> None:
    """The candidate approves payments under 100 to acme automatically: one of them was
    rejected (the backtest fails on it); one whose amount the trail kept as text cannot be
    decided, so it goes to a person, never approved automatically."""
    client = aioredis.from_url(redis_url)
    writer = HistoryWriter(AuditLog(client))
    now = time.time()
    approved = writer.settle("pay", {"amount": 20, "to": "acme"}, "approve", by="U2",
                             at=now - 3600)  # fmt: skip
    rejected = writer.settle("pay", {"amount": 50, "to": "acme"}, "reject", by="U3", at=now - 60)
    writer.settle("pay", {"amount": "5", "to": "acme"}, "approve", by="U2", at=now - 30)
    writer.settle("pay", {"amount": 20, "to": "other"}, "approve", by="U2", at=now - 20)
    await writer.flush()
    candidate = parse_policy(
        "channels:\n  C1:\n    approvers: [U2, U3]\ntools:\n  - match: pay\n"
        "    when: {cel: \"args.amount < 100 && args.to == 'acme'\"}\n    auto: approve\n"
    )
    history = await read_history(AuditLog(client), since=now - 86400, until=now)
    await client.aclose()
    result = backtest(candidate, history.decided)
    assert [c.call.approval_id for c in result.approves_rejected] == [rejected.approval_id]
    assert result.approves_approved == 1 and result.unchanged == 2
    assert approved.approval_id not in {c.call.approval_id for c in result.approves_rejected}


def test_without_the_cel_extra_a_cel_condition_is_a_policy_error_that_says_what_to_install(
    tmp_path: Path,
) -> None:
    """Where cel-expr-python is not installed (it has no wheel for Linux on ARM, say), a `cel:`
    condition is refused with its line and what to install; the short forms still work."""
    blocked = tmp_path / "blocked" / "cel_expr_python"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('not installed here')\n")
    env = base_env(tmp_path, CEL_THEN_AUTO, SLACK_BOT_TOKEN="xoxb-1", SLACK_SIGNING_SECRET="s",
                   OPENAI_API_KEY="sk-test")  # fmt: skip
    env["PYTHONPATH"] = f"{tmp_path / 'blocked'}{os.pathsep}{ROOT}"
    # Real processes, forked from one that imported the bot but never the CEL runtime (a fresh
    # interpreter each spent 4-5 CPU-seconds on imports): the package is unimportable in them
    # as it is where it is not installed.
    result = run_bot(["check"], env=env, cwd=tmp_path, timeout=120)
    assert result.returncode == 1
    line = next(n for n, text in enumerate(CEL_THEN_AUTO.splitlines(), 1) if "cel:" in text)
    assert f"policy.yml:{line}: tools.0.when.cel: `cel:` conditions need the cel-expr-python" in (
        result.stderr
    )
    assert "pip install 'slack-approval-bot[cel]'" in result.stderr
    short = CEL_THEN_AUTO.replace(
        "{cel: \"args.amount > 10000 && args.to == 'acme'\"}", "{args.amount: '> 10000'}"
    )
    (tmp_path / "policy.yml").write_text(short)
    passed = run_bot(["check"], env=env, cwd=tmp_path, timeout=120)
    assert passed.returncode == 0 and "policy.yml" not in passed.stderr, passed.stderr
