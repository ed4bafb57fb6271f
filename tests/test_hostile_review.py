"""What a hostile review found (issue #7, items 3 to 8): other organizations, ambiguous replies,
evicted comments, invisible characters, spreadsheet formulas and malformed bodies. Signed HTTP
into the real app, real Redis, the Slack stand-in."""

from __future__ import annotations

import asyncio
import csv
import hashlib
import hmac
import io
import json
import logging
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis.asyncio as aioredis

from bot.engine.runner import TASK_REF, unpack_state
from bot.slack.app import STILL_WORKING_COMMAND
from bot.slack.blocks import APPROVE, REJECT, REPLY_KEEP, REPLY_REJECT
from bot.store import keys
from bot.store.parts.snapshots import decode_snapshot
from bot.store.parts.texts import unpack_text
from bot.store.records import SHOWN_ARGUMENTS
from bot.testing.harness import SIGNING_SECRET, BotHarness, wait_until
from bot.testing.requests import signature_headers
from bot.testing.slack_api import FakeSlackAPI
from tests.agents_for_tests import (
    Ledger,
    assistant_message,
    delete_then_say,
    function_call,
    ops_agent,
    tool_outputs,
)
from tests.forkserver import run_bot
from tests.processes import ROOT
from tests.test_security import audited, call_status

OPEN = """
channels:
  C1:
    starters: ["*"]
    approvers: [U2, U3]
"""


def reads_then_deletes(ledger: Ledger) -> Any:
    """An ungated read, then a gated delete: what an outsider could run is the read."""
    agent, _ = ops_agent(
        [
            [function_call("read_logs", {"path": "/secrets"}, call_id="r1")],
            [function_call("delete_logs", {"path": "/a"}, call_id="c1")],
            [assistant_message("ok")],
        ],
        ledger,
    )
    return agent


# 3. Slack Connect and other organizations --------------------------------------------------------


async def test_a_shared_channel_guest_of_another_org_cannot_start_runs(redis_url: str) -> None:
    """No `workspace:` in the policy and starters "*": only the installed workspace is served."""
    ledger = Ledger()
    async with BotHarness(redis_url, reads_then_deletes(ledger), OPEN) as bot:
        sent = await bot.slack.command("read the secrets", user="UX1", channel="C1", team="T0CONN")
        assert sent.json()["text"] == "This workspace is not served by this bot."
        await bot.idle()
        assert bot.slack_api.top_level() == []
        # The same command from the installed workspace starts a run.
        approval = await bot.start_and_wait("clean", user="U1")
        approval_id = approval.button_value(APPROVE)
        # A guest of the other org clicking Approve changes nothing either.
        await bot.slack.click(APPROVE, approval_id, user="UX1", channel="C1", team="T0CONN")
        await bot.idle()
        assert await call_status(redis_url, approval_id) == "pending"
        assert bot.slack_api.ephemeral_to("UX1") == ["This workspace is not served by this bot."]
        entries = await bot.audit()
        audit = await audited(bot)
    assert [e["team"] for e in entries if e["kind"] == "start_refused"] == ["T0CONN"]
    assert audit["refused"] == ["UX1"] and "decided" not in audit
    assert ledger.names() == ["read_logs"]  # the insider's run only


async def test_an_org_member_of_another_workspace_is_not_served_by_a_workspace_install(
    redis_url: str,
) -> None:
    slack = FakeSlackAPI(enterprise_id="E0ORG")
    ledger = Ledger()
    async with BotHarness(redis_url, reads_then_deletes(ledger), OPEN, slack=slack) as bot:
        other = await bot.slack.command("hi", user="UX2", channel="C1", team="T0SISTER")
        assert other.json()["text"] == "This workspace is not served by this bot."
        await bot.idle()
        assert bot.slack_api.top_level() == []
        await audited(bot)
    assert ledger.executed == []


async def test_until_slack_says_where_the_bot_is_installed_everyone_is_refused(
    redis_url: str,
) -> None:
    """The bot's own auth.test at start-up fails: fail closed, with the reason, until the
    background retry learns the installation (Bolt is not asked to try on its own)."""
    slack = FakeSlackAPI()
    failures = iter([True])
    slack.fail_when = lambda method, _: method == "auth.test" and next(failures, False)
    ledger = Ledger()
    async with BotHarness(redis_url, reads_then_deletes(ledger), OPEN, slack=slack) as bot:
        refused = await bot.slack.command("hi", user="U1", channel="C1")
        assert "Slack does not accept its token (fatal_error)" in refused.json()["text"]
        authorizer = bot.runtime.service.authorizer
        await wait_until(lambda: authorizer.installation is not None, what="auth.test")
        await bot.start_and_wait("clean", user="U1")
        await audited(bot)
    assert ledger.names() == ["read_logs"]


# 8. Malformed bodies ------------------------------------------------------------------------------


def signed(bot: BotHarness, body: bytes, timestamp: str | None = None) -> dict[str, str]:
    headers = signature_headers(body, SIGNING_SECRET)
    if timestamp is not None:  # signed over this (non-numeric) timestamp, as given
        digest = hmac.new(
            SIGNING_SECRET.encode(), f"v0:{timestamp}:".encode() + body, hashlib.sha256
        ).hexdigest()
        headers = {"X-Slack-Request-Timestamp": timestamp, "X-Slack-Signature": f"v0={digest}"}
    return headers


FORM = "application/x-www-form-urlencoded"
NESTED = ("[" * 100_000 + "]" * 100_000).encode()  # 200 KB of nesting (twice: 400 KB)


async def test_malformed_bodies_get_400_signed_and_401_unsigned_never_500(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    ledger = Ledger()
    malformed: list[tuple[bytes, str]] = [
        (b"payload=" + quote("[]").encode(), FORM),
        (b"payload=null", FORM),
        (b"payload=" + quote('"a string"').encode(), FORM),
        (b"payload=%7Bnot+json", FORM),
        (b"[]", "application/json"),
        (b"null", "application/json"),
        (b'"a string"', "application/json"),
        (b"{not json", "application/json"),
        (json.dumps({"type": "event_callback", "event": "x"}).encode(), "application/json"),
        (json.dumps({"type": "event_callback", "event": [1]}).encode(), "application/json"),
        (b'{"a":' + NESTED + NESTED + b"}", "application/json"),
        (b"payload=" + NESTED + NESTED, FORM),
    ]
    async with BotHarness(redis_url, reads_then_deletes(ledger), OPEN) as bot:
        with caplog.at_level(logging.INFO):
            for body, content_type in malformed:
                unsigned = await bot.slack.send_raw(body, content_type)
                assert unsigned.status == 401, (body[:40], unsigned)
                sent = await bot.slack.send_raw(body, content_type, signed(bot, body))
                assert sent.status == 400, (body[:40], sent)
            body = b"payload=%7B%7D"
            odd_time = await bot.slack.send_raw(body, FORM, signed(bot, body, timestamp="soon"))
            assert odd_time.status == 400
            # Slack's certificate check still gets Bolt's 200, signed or not, and does nothing.
            ssl_check = await bot.slack.send_raw(b"ssl_check=1&token=x", FORM)
            assert ssl_check.status == 200 and ssl_check.text == ""
            # Well-formed requests still work.
            await bot.start_and_wait("clean", user="U1")
        await audited(bot)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    assert not [r for r in caplog.records if r.exc_info], "no stack traces"
    refusals = [r.getMessage() for r in caplog.records if "refused a request" in r.getMessage()]
    assert len(refusals) == 2 * len(malformed) + 1
    assert ledger.names() == ["read_logs"]


# 4. Replies reject only when they plainly mean to; 5. only approvers' comments are kept ----------


def question_to(bot: BotHarness, user: str) -> dict[str, Any]:
    """The last private question with buttons the bot asked `user`."""
    asked = [e for e in bot.slack_api.ephemeral if e.get("user") == user and e.get("blocks")]
    assert asked, f"nothing was asked of {user}"
    return asked[-1]


def button(question: dict[str, Any], action_id: str) -> str:
    blocks = question["blocks"]
    blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
    for block in blocks:
        for element in block.get("elements", []) if block.get("type") == "actions" else []:
            if element["action_id"] == action_id:
                return str(element["value"])
    raise KeyError(action_id)


async def test_a_reply_that_merely_starts_with_deny_is_asked_about_not_obeyed(
    redis_url: str,
) -> None:
    ledger = Ledger()
    agent, model = ops_agent(delete_then_say(), ledger)
    async with BotHarness(redis_url, agent, OPEN) as bot:
        approval = await bot.start_and_wait("clean", user="U1")
        approval_id = approval.button_value(APPROVE)
        text = "Deny list looks fine to me, go ahead"
        await bot.slack.thread_reply(text, user="U2", channel="C1", thread_ts=approval.ts)
        await bot.idle()
        assert await call_status(redis_url, approval_id) == "pending"
        asked = question_to(bot, "U2")
        assert asked["thread_ts"] == approval.ts and text in str(asked["blocks"])
        reply_id = button(asked, REPLY_KEEP)
        assert reply_id != approval_id and button(asked, REPLY_REJECT) == reply_id
        await bot.slack.click(REPLY_KEEP, reply_id, user="U2", channel="C1")
        await bot.idle()
        assert await call_status(redis_url, approval_id) == "pending"
        assert bot.slack_api.ephemeral_to("U2")[-1].startswith("Kept as a comment")
        # A second approver means it; someone else cannot answer for them.
        meant = "deny this one, the path is wrong"
        await bot.slack.thread_reply(meant, user="U3", channel="C1", thread_ts=approval.ts)
        await bot.idle()
        reply_id = button(question_to(bot, "U3"), REPLY_REJECT)
        await bot.slack.click(REPLY_REJECT, reply_id, user="U2", channel="C1")
        await bot.idle()
        assert "Only the person who wrote that reply" in bot.slack_api.ephemeral_to("U2")[-1]
        assert await call_status(redis_url, approval_id) == "pending"
        await bot.slack.click(REPLY_REJECT, reply_id, user="U3", channel="C1")
        await bot.wait_for_status("finished")
        await bot.slack.click(REPLY_REJECT, reply_id, user="U3", channel="C1")  # again
        await bot.idle()
        assert "already answered" in bot.slack_api.ephemeral_to("U3")[-1]
        audit = await audited(bot)
    assert ledger.executed == []
    assert tool_outputs(model) == {"c1": meant}
    assert audit["decided"] == ["U3"]


@pytest.mark.parametrize("reply", ["DENY: not on a Friday", "Reject:not on a Friday"])
async def test_reject_and_deny_with_a_colon_reject_at_once_in_any_case(
    redis_url: str, reply: str
) -> None:
    ledger = Ledger()
    agent, model = ops_agent(
        [[function_call("delete_logs", {"path": "/a"}, call_id="c1")], [assistant_message("")]],
        ledger,
    )
    async with BotHarness(redis_url, agent, OPEN) as bot:
        approval = await bot.start_and_wait("clean", user="U1")
        await bot.slack.thread_reply(reply, user="U2", channel="C1", thread_ts=approval.ts)
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await audited(bot)
    assert ledger.executed == [] and tool_outputs(model) == {"c1": "not on a Friday"}
    assert audit["decided"] == ["U2"]


async def test_others_replies_cannot_push_approvers_comments_out_of_the_prefill(
    redis_url: str,
) -> None:
    ledger = Ledger()
    async with BotHarness(redis_url, reads_then_deletes(ledger), OPEN) as bot:
        approval = await bot.start_and_wait("clean", user="U1")
        note = "Check the backups first"
        await bot.slack.thread_reply(note, user="U2", channel="C1", thread_ts=approval.ts)
        for i in range(25):
            await bot.slack.thread_reply(
                f"ignore that, just approve {i}", user="U9", channel="C1", thread_ts=approval.ts
            )
        await bot.idle()
        await bot.click(approval, REJECT, user="U3")
        await wait_until(lambda: bot.slack_api.views, what="the reject modal")
        view = bot.slack_api.views[-1]["view"]
        prefill = [
            b["element"].get("initial_value") for b in view["blocks"] if b["type"] == "input"
        ]
        assert prefill == [note]
        await audited(bot)
    assert ledger.names() == ["read_logs"]


# 6. Invisible format characters are shown ------------------------------------------------------


async def test_bidi_and_zero_width_characters_are_shown_on_cards_modals_and_notes(
    redis_url: str,
) -> None:
    ledger = Ledger()
    path = "/srv/\u2066logs\u2069/\u202egol.exe"
    agent, _ = ops_agent(
        [
            [function_call("delete_logs", {"path": path}, call_id="c1")],
            [assistant_message("removed \u200bit\u200d")],
        ],
        ledger,
        name="o\u200dps",
    )
    async with BotHarness(redis_url, agent, OPEN) as bot:
        approval = await bot.start_and_wait("clean \u202eup", user="U1")
        card = approval.all_text()
        for code in ("202E", "2066", "2069"):
            assert f"&lt;U+{code}&gt;" in card, card
        assert "o&lt;U+200D&gt;ps" in card  # the agent's name
        assert "clean &lt;U+202E&gt;up" in bot.run_message().all_text()
        await bot.click(approval, REJECT, user="U2")
        await wait_until(lambda: bot.slack_api.views, what="the reject modal")
        modal = json.dumps(bot.slack_api.views[-1]["view"], ensure_ascii=False)
        assert "o&lt;U+200D&gt;ps" in modal
        await bot.click(approval, APPROVE, user="U3")
        await bot.wait_for_status("finished")
        await bot.idle()
        notes = "\n".join(m.text for m in bot.run_thread())
        assert "removed &lt;U+200B&gt;it&lt;U+200D&gt;" in notes
        shown = [m.all_text() for m in bot.slack_api.messages.values()]
        shown += [json.dumps(v, ensure_ascii=False) for v in bot.slack_api.views]
        invisible = ("\u202e", "\u2066", "\u2069", "\u200b", "\u200d")
        assert not [t for t in shown if any(c in t for c in invisible)]
        await audited(bot)
    assert ledger.executed == [("delete_logs", {"path": path})]  # what ran is what was shown


async def test_invisible_characters_in_an_approvers_comment_are_shown_in_the_reject_prefill(
    redis_url: str,
) -> None:
    """The Reject modal's pre-filled reason is plain text, so it is not escaped; it must still
    show a right-to-left override or zero-width joiner from a thread comment, since that text is
    what the agent receives if the reviewer submits it."""
    ledger = Ledger()
    agent, model = ops_agent(delete_then_say(), ledger)
    async with BotHarness(redis_url, agent, OPEN) as bot:
        approval = await bot.start_and_wait("clean", user="U1")
        note = "path is \u202ewrong\u202c, ask o\u200dps"
        await bot.slack.thread_reply(note, user="U2", channel="C1", thread_ts=approval.ts)
        await bot.idle()
        await bot.click(approval, REJECT, user="U3")
        await wait_until(lambda: bot.slack_api.views, what="the reject modal")
        view = bot.slack_api.views[-1]["view"]
        [prefill] = [b["element"]["initial_value"] for b in view["blocks"] if b["type"] == "input"]
        assert prefill == "path is <U+202E>wrong<U+202C>, ask o<U+200D>ps"
        values = {b["block_id"]: {b["element"]["action_id"]: {"value": prefill}}
                  for b in view["blocks"] if b["type"] == "input"}  # fmt: skip
        assert (await bot.slack.submit(view, values, user="U3")).status == 200
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await audited(bot)
    assert ledger.executed == [] and tool_outputs(model) == {"c1": prefill}
    assert audit["decided"] == ["U3"] and "refused" not in audit


# 7. The audit export: no spreadsheet formulas, ISO 8601 UTC times ---------------------------------


async def test_audit_csv_neutralises_formulas_and_times_are_iso_utc(
    redis_url: str, tmp_path: Path
) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(delete_then_say(), ledger)
    hostile = ['=HYPERLINK("http://x.invalid","y")', "+1+1", "-2", "@SUM(A1)", "\tx", "\rx"]
    async with BotHarness(redis_url, agent, OPEN) as bot:
        approval = await bot.start_and_wait("=cmd|' /C calc'!A0", user="U1")
        await bot.reject(approval, user="U2", reason="+ no")
        await bot.wait_for_status("finished")
        for text in hostile:  # every cell that can start like a formula, in a free-text field
            await bot.runtime.service.audit_log.append("comment", detail=text, user=text)
        await bot.idle()
        await audited(bot)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("APPROVAL_BOT_", "REDIS"))}
    env.update(REDIS_URL=redis_url, PYTHONPATH=str(ROOT))

    def export(fmt: str) -> str:
        # (The output as written: a CR inside a cell must stay a CR.)
        return run_bot(["audit", "--since", "1h", "--format", fmt], env=env, cwd=tmp_path,
                       check=True).stdout  # fmt: skip

    rows = list(csv.DictReader(io.StringIO(export("csv"), newline="")))
    cells = [value for row in rows for value in row.values() if value]
    assert cells and not [c for c in cells if c.startswith(("=", "+", "-", "@", "\t", "\r"))]
    assert any(c.startswith("'=cmd") for c in cells) and any(c == "'+ no" for c in cells)
    assert ["'" + text for text in hostile] == [r["detail"] for r in rows if r["kind"] == "comment"]
    iso = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
    assert all(iso.match(row["time"]) for row in rows)
    lines = [json.loads(line) for line in export("jsonl").splitlines()]
    assert len(lines) == len(rows) and all(iso.match(e["time"]) for e in lines)
    assert lines[0]["text"].startswith("=cmd")  # JSON keeps the text as it was


# 9. What one person or one channel can start ----------------------------------------------------


async def test_a_burst_of_commands_from_one_person_starts_only_the_burst(redis_url: str) -> None:
    ledger = Ledger()
    agent, _ = ops_agent([[assistant_message("ok")]] * 40, ledger)
    async with BotHarness(redis_url, agent, OPEN) as bot:
        sent = await asyncio.gather(
            *(bot.slack.command(f"task {i}", user="U1", channel="C1") for i in range(40))
        )
        await bot.idle()
        # A refusal is the command's answer, or (an answer that would have come after the ack
        # budget: a loaded machine, forty at once) told privately once it is known.
        answered = [s.json()["text"] for s in sent if s.text]
        acked = [text for text in answered if text != STILL_WORKING_COMMAND]

        def refused() -> list[str] | None:
            told = [t for t in bot.slack_api.ephemeral_to("U1") if "faster than" in t]
            return acked + told if len(acked + told) >= 35 else None

        refusals = await wait_until(refused, what="35 refusals, answered or told")
        runs = [m for m in bot.slack_api.top_level() if "started agent" in m.all_text()]
        entries = await bot.audit()
        await audited(bot)
    assert len(runs) == 5 and len(refusals) == 35, (runs, refusals)
    assert all("faster than this bot allows (10 a minute, bursts of 5)" in r for r in refusals)
    assert all("Try again in" in r for r in refusals)
    assert len([e for e in entries if e["kind"] == "start_refused"]) == 35
    assert len([e for e in entries if e["kind"] == "run_started"]) == 5


async def test_unfinished_runs_per_person_and_channel_are_capped(redis_url: str) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(
        [[function_call("delete_logs", {"path": f"/{i}"}, call_id=f"c{i}")] for i in range(3)]
        + [[assistant_message("ok")]] * 3,
        ledger,
    )
    limits = {"user_open_runs": 2, "channel_open_runs": 3}
    async with BotHarness(redis_url, agent, OPEN, settings=limits) as bot:
        first = await bot.start_and_wait("one", user="U1")
        await bot.slack.command("two", user="U1", channel="C1")
        await bot.wait_for_approvals(2)
        third = await bot.slack.command("three", user="U1", channel="C1")
        assert "You already have 2 unfinished runs" in third.json()["text"]
        await bot.slack.command("four", user="U4", channel="C1")  # another person: allowed
        await bot.wait_for_approvals(3)
        full = await bot.slack.command("five", user="U5", channel="C1")
        assert "This channel already has 3 unfinished runs" in full.json()["text"]
        # When one of U1's runs finishes, U1 may start another.
        await bot.click(first, APPROVE, user="U2")
        await bot.idle()
        again = await bot.slack.command("six", user="U1", channel="C1")
        assert again.text == "", again
        await bot.idle()
        await audited(bot)


async def test_a_task_over_the_length_limit_is_refused_with_its_length(redis_url: str) -> None:
    ledger = Ledger()
    agent, _ = ops_agent([[assistant_message("ok")]], ledger)
    async with BotHarness(redis_url, agent, OPEN) as bot:
        sent = await bot.slack.command("x" * 4001, user="U1", channel="C1")
        assert "4,001 characters long; the limit here is 4,000" in sent.json()["text"]
        await bot.slack.command("x" * 4000, user="U1", channel="C1")
        await bot.wait_for_status("finished")
        await bot.idle()
        entries = await bot.audit()
    # Both recorded (the refusal's entry is written beside its answer: in either order).
    assert sorted(e["kind"] for e in entries if e["kind"] in ("start_refused", "run_started")) == [
        "run_started",
        "start_refused",
    ]


# 10. What a run stores -------------------------------------------------------------------------


async def test_a_long_task_and_long_arguments_are_stored_once_and_bound_by_their_hash(
    redis_url: str,
) -> None:
    ledger = Ledger()
    long_path = "/srv/" + "very-long-directory-name/" * 400  # 10,005 characters
    agent, model = ops_agent(
        [
            [function_call("delete_logs", {"path": long_path}, call_id="c1")],
            [assistant_message("ok")],
        ],
        ledger,
    )
    task = " ".join(f"step {i}: check the backup of shard {i} and report" for i in range(800))
    assert len(task) > 40_000
    async with BotHarness(redis_url, agent, OPEN, settings={"max_task_chars": 0}) as bot:
        approval = await bot.start_and_wait(task, user="U1")
        approval_id = approval.button_value(APPROVE)
        run_id = keys.run_of(approval_id)
        assert run_id is not None
        client = aioredis.Redis.from_url(redis_url)
        try:
            run = await client.hgetall(keys.run_key(run_id))
            call = await client.hgetall(keys.call_key(approval_id))
            # Layout 3: each long text once, in a key of its own; the snapshot refers to the task.
            assert b"task" not in run and b"arguments" not in call
            assert unpack_text(await client.get(keys.task_key(run_id))) == task
            shown = unpack_text(await client.get(keys.arguments_key(approval_id)))
            assert len(shown) == SHOWN_ARGUMENTS and call[b"arguments_sha"]
            snapshot = decode_snapshot(await client.get(keys.state_key(run_id)))
            assert json.loads(unpack_state(snapshot.state))["original_input"] == TASK_REF
            total = 0
            async for key in client.scan_iter(match=f"ab:{{{run_id}}}*"):
                total += await client.memory_usage(key, samples=0) or 0
        finally:
            await client.aclose()
        assert total < 24_000, total  # before: over 60 KB (the task and arguments stored twice)
        assert "_(truncated)_" in bot.run_message().all_text()
        assert "of 10,0" in approval.all_text() and "truncated: showing" in approval.all_text()
        await bot.click(approval, APPROVE, user="U2")
        await bot.wait_for_status("finished")
        await bot.idle()
        entries = await bot.audit()
        await audited(bot)
    first_input = model.calls[0].input
    assert task in json.dumps(first_input)  # the agent got the whole task
    assert ledger.executed == [("delete_logs", {"path": long_path})]  # and the whole arguments
    [started] = [e for e in entries if e["kind"] == "run_started"]
    assert len(started["text"]) < 1100 and f"({len(task):,} characters)" in started["text"]


async def test_replayed_commands_take_nothing_from_the_quota(redis_url: str) -> None:
    """Slack retries a command with the same trigger id: the retries start nothing and do not
    use up the person's burst."""
    ledger = Ledger()
    agent, _ = ops_agent([[assistant_message("ok")]] * 5, ledger)
    async with BotHarness(redis_url, agent, OPEN) as bot:
        fields = bot.slack.command_fields("first", user="U1", channel="C1")
        replies = [await bot.slack.send_form(fields) for _ in range(6)]
        assert all(r.status == 200 and r.text == "" for r in replies)
        for i in range(4):
            sent = await bot.slack.command(f"task {i}", user="U1", channel="C1")
            assert sent.text == "", sent  # the burst of 5 is still whole
        await bot.idle()
        runs = [m for m in bot.slack_api.top_level() if "started agent" in m.all_text()]
        await audited(bot)
    assert len(runs) == 5
