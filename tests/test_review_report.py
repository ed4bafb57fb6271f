"""Whether approvals are real (#33 part 3), read back: `approval-bot report reviews` on a
scripted history written through the real audit trail (exact percentiles and counts, its CSV),
run as the command an operator runs; and the weekly digest to a channel, sent once across two
replicas on the skipping clock, from decisions made through signed requests."""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.learning.reviews import CSV_COLUMNS, ReviewFigures, percentile
from bot.service.audit import AuditKind, audit_fields
from bot.service.ports import Actor
from bot.slack.blocks import APPROVE, SHOW_ALL
from bot.slack.review_digest import digest_text
from bot.store.trail.audit import AuditLog
from bot.store.trail.digests import digest_key
from bot.testing.clock import SkippingClock
from bot.testing.harness import BotHarness, wait_until
from bot.testing.history import TEAM, HistoryWriter
from bot.weekly import DAYS, WEEK, Weekly, parse_schedule
from tests.agents_for_tests import POLICY, Ledger, assistant_message, function_call, ops_agent
from tests.forkserver import run_bot
from tests.test_config import check
from tests.test_policy_learning import command_env
from tests.test_review_attention import deletes, show

DAY = 86400.0


async def scripted(redis_url: str) -> None:
    """Two days ago, in C1 and C2 (cards hours apart unless said, 500 characters a second):

    U2 in C1: 1,000 characters approved in 1 s (too fast: 2 s needed); a folded card approved
    in 10 s, never opened (unopened); a folded card of 5,000 characters opened (Show all) and
    approved in 20 s; a rejection in 30 s; an approval in 60 s. An expired call named U2 (and a
    group), and U2 raised a rubber-stamp alarm.
    U3 in C1: two cards shown together, approved 100 s and 101 s after: the second had a second
    of attention (too fast); a quorum vote 10 s after its card; a rejection of a call whose card
    was not audited (an older version: 40 s from its request). An Always decision's other call
    is not a review of its own.
    U2 in C2: an approval in 4 s. The policy's decisions are nobody's; 40 days ago is outside.
    """
    client = aioredis.from_url(redis_url)
    writer = HistoryWriter(AuditLog(client))
    base = time.time() - 2 * DAY

    def card(at: float, chars: int, *, folded: bool = False, channel: str = "C1") -> Any:
        call = writer.call("delete_logs", {"path": f"/tmp/{at}"}, channel=channel, requested=at)
        writer.shown(call, chars, folded=folded, at=at)
        return call

    u2 = [(0, 1000, False, 1, "approve"), (3600, 500, True, 10, "approve"),
          (7200, 5000, True, 20, "approve"), (10800, 200, False, 30, "reject"),
          (14400, 100, False, 60, "approve")]  # fmt: skip
    for offset, chars, folded, seconds, decision in u2:
        call = card(base + offset, chars, folded=folded)
        if chars == 5000:
            writer.person(AuditKind.VIEWED, call, "U2", "show_all", at=base + offset + 5)
        writer.record(call, decision, by="U2", at=base + offset + seconds)
    expired = writer.call("delete_logs", {"path": "/x"}, approvers=("U2", "@sre"))
    writer.record(expired, "expired", at=base + 15000)
    writer.person(AuditKind.RUBBER_STAMP, expired, "U2", "alarm", at=base + 15001,
                  detail="30 approvals in a row, each within 5 s")  # fmt: skip
    first, second = card(base + 20000, 1000), card(base + 20000, 1000)
    writer.record(first, "approve", by="U3", at=base + 20100)
    writer.record(second, "approve", by="U3", at=base + 20101)
    alongside = audit_fields(kind=AuditKind.DECIDED, call=writer.call("delete_logs", {"p": 1}),
                             actor=Actor(TEAM, "U3", ""), decision="always_approve",
                             detail=f"always decision on {second.approval_id}")  # fmt: skip
    writer.raw(base + 20101, AuditKind.DECIDED, alongside)
    quorum = card(base + 29990, 1000)
    writer.person(AuditKind.APPROVAL_VOTE, quorum, "U3", "approve", at=base + 30000)
    unshown = writer.call("delete_logs", {"path": "/y"}, requested=base + 39960)
    writer.record(unshown, "reject", by="U3", at=base + 40000)
    writer.settle("delete_logs", {"path": "/z"}, "auto_approve", at=base + 41000)
    writer.record(card(base + 50000, 300, channel="C2"), "approve", by="U2", at=base + 50004)
    writer.record(card(base - 38 * DAY, 300), "approve", by="U2", at=base - 38 * DAY + 1)
    await writer.flush()
    await client.aclose()


# (channel, approver): decisions, approvals, rejections, timed, p50, p95, too fast, unopened,
# expiries, alarms.
EXPECTED = {
    ("C1", "*"): (9, 7, 2, 9, 30.0, 101.0, 2, 1, 1, 1),  # [1,10,10,20,30,40,60,100,101]
    ("C1", "U2"): (5, 4, 1, 5, 20.0, 60.0, 1, 1, 1, 1),  # [1,10,20,30,60]
    ("C1", "U3"): (4, 3, 1, 4, 40.0, 101.0, 1, 0, 0, 0),  # [10,40,100,101]
    ("C2", "*"): (1, 1, 0, 1, 4.0, 4.0, 0, 0, 0, 0),
    ("C2", "U2"): (1, 1, 0, 1, 4.0, 4.0, 0, 0, 0, 0),
}


def as_expected(row: dict[str, Any]) -> tuple[Any, ...]:
    names = ("decisions", "approvals", "rejections", "timed", "p50_seconds", "p95_seconds",
             "too_fast", "unopened", "expiries", "rubber_stamp_alarms")  # fmt: skip
    return tuple(row[n] if "seconds" in n else int(row[n]) for n in names)


async def test_the_review_report_of_a_scripted_history(redis_url: str, tmp_path: Path) -> None:
    await scripted(redis_url)
    env = command_env(redis_url)
    out = run_bot(["report", "reviews", "--days", "7", "--csv"], env=env, cwd=tmp_path, check=True)
    table = list(csv.reader(io.StringIO(out.stdout)))
    assert tuple(table[0]) == CSV_COLUMNS
    assert all(len(row) == len(CSV_COLUMNS) for row in table)
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert [(r["channel"], r["approver"]) for r in rows] == list(EXPECTED)  # in this order
    assert {r["team"] for r in rows} == {TEAM}
    found = {(r["channel"], r["approver"]): r for r in rows}
    for key, expected in EXPECTED.items():
        row = {k: (float(v) if "seconds" in k else v) for k, v in found[key].items()}
        assert as_expected(row) == expected, key

    data = json.loads(run_bot(["report", "reviews", "--json", "--days", "7"], env=env,
                              cwd=tmp_path, check=True).stdout)  # fmt: skip
    assert {(r["channel"], r["approver"]): as_expected(r) for r in data["reviews"]} == EXPECTED

    # The channel's report: its rows alone, its rubber-stamp alarm on them.
    text = run_bot(["report", "reviews", "--channel", "C1"], env=env, cwd=tmp_path, check=True)
    lines = text.stdout.splitlines()
    assert lines[0].startswith("Reviews, the last 30 days")
    assert lines[1].split() == ["channel", "approver", "decisions", "approved", "rejected",
                                "p50", "s", "p95", "s", "too", "fast", "unopened", "expired",
                                "alarms"]  # fmt: skip
    assert [line.split() for line in lines[2:]] == [
        ["C1", "*", "9", "7", "2", "30.0", "101.0", "2", "1", "1", "1"],
        ["C1", "U2", "5", "4", "1", "20.0", "60.0", "1", "1", "1", "1"],
        ["C1", "U3", "4", "3", "1", "40.0", "101.0", "1", "0", "0", "0"],
    ]
    # The 40-day-old decision is in a 60-day window.
    wide = run_bot(["report", "reviews", "--csv", "--days", "60", "--channel", "C1"], env=env,
                   cwd=tmp_path, check=True)  # fmt: skip
    assert next(csv.DictReader(io.StringIO(wide.stdout)))["decisions"] == "10"


async def test_csv_names_one_table(redis_url: str, tmp_path: Path) -> None:
    env = command_env(redis_url)
    for args in (["report", "shadow", "--csv"], ["report", "shadow", "reviews", "--csv"]):
        refused = run_bot(args, env=env, cwd=tmp_path)
        assert refused.returncode == 2 and refused.stdout == ""
        assert "--csv prints one table: name one of reviews" in refused.stderr
    both = run_bot(["report", "--csv", "--json"], env=env, cwd=tmp_path)
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    empty = run_bot(["report", "--csv"], env=env, cwd=tmp_path, check=True)
    assert empty.stdout == ",".join(CSV_COLUMNS) + "\n"


def test_percentiles_are_by_nearest_rank() -> None:
    twenty = [float(n) for n in range(20, 0, -1)]
    assert (percentile(twenty, 0.5), percentile(twenty, 0.95)) == (10.0, 19.0)
    assert percentile([7.0], 0.95) == 7.0 and percentile([], 0.5) is None


# The weekly digest -------------------------------------------------------------------------


def digests(bot: BotHarness, channel: str = "C1") -> list[str]:
    return [m.text for m in bot.slack_api.top_level(channel) if "Review digest" in m.text]


async def passed(bots: list[BotHarness], due: float) -> None:
    """Every replica's timer loop has looked past the digest's time (so a post it spawned is
    among its background tasks), and each is idle."""
    for bot in bots:
        digest = bot.runtime.digests
        assert digest is not None
        await wait_until(lambda d=digest: d.due == due, what="the timer loop's pass")
        await bot.idle()


async def test_the_weekly_digest_is_posted_once_across_replicas(redis_url: str) -> None:
    """Two replicas share Redis and Slack; the digest is set for ten minutes from now. People
    decide through signed requests (two approvals raise the rubber-stamp alarm, then a
    rejection); nothing is posted until the skipping clock passes the time, then the channel
    gets one digest, whichever replica claimed it. A third replica started after the time
    (within the day it would still send it) finds it claimed; the next week, with nothing
    decided, posts nothing."""
    clock = SkippingClock()
    at = (clock.time() // 60 + 10) * 60
    moment = time.gmtime(at)
    schedule = f"{DAYS[moment.tm_wday]} {moment.tm_hour:02d}:{moment.tm_min:02d}"
    settings = {"review_digest": schedule, "rubber_stamp_streak": 2,
                "rubber_stamp_seconds": 3600}  # fmt: skip
    agent, _ = ops_agent(deletes(3), Ledger())
    async with (
        BotHarness(redis_url, agent, POLICY, settings=settings, clock=clock) as one,
        BotHarness(redis_url, agent, POLICY, settings=settings, clock=clock,
                   slack=one.slack_api) as two,
    ):  # fmt: skip
        assert one.runtime.settings.review_digest == schedule
        await one.slack.command("clean up", user="U1", channel="C1")
        first, second, third = await one.wait_for_cards(3)
        assert (await one.click(first, APPROVE, user="U2")).status == 200
        assert (await two.click(second, APPROVE, user="U2")).status == 200
        await two.reject(third, user="U2", reason="not this one")
        await one.wait_for_status("finished")
        await passed([one, two], at)
        assert digests(one) == []
        clock.advance(at - clock.time() + 1)
        await passed([one, two], at + WEEK)
        [digest] = digests(one)
        assert await one.runtime.redis.get(digest_key(at)) is not None
        for line in ("*Everyone*: 3 decisions (2 approved, 1 rejected); time to decision p50 ",
                     "<@U2>: 3 decisions (2 approved, 1 rejected); time to decision p50 ",
                     "; 1 rubber-stamp alarm\n",
                     "`approval-bot report reviews --channel C1`"):  # fmt: skip
            assert line in digest
        assert "<@U1>" not in digest  # the starter decided nothing
        async with BotHarness(redis_url, agent, POLICY, settings=settings, clock=clock,
                              slack=one.slack_api) as three:  # fmt: skip
            await passed([three], at + WEEK)
        clock.advance(WEEK)
        await passed([one, two], at + 2 * WEEK)
        assert len(digests(one)) == 1
        assert await one.runtime.redis.get(digest_key(at + WEEK)) is not None  # claimed, empty


def test_the_digest_escapes_what_it_shows() -> None:
    odd = ReviewFigures(channel="C1", approver="<!channel>&", approvals=1, seconds=[3.0])
    text = digest_text("C1<!here>", [odd], 1_800_000_000.0)
    assert "<!channel>" not in text and "<!here>" not in text
    assert "`&lt;!channel&gt;&amp;`: 1 decision (1 approved, 0 rejected)" in text
    assert "reviews --channel C1&lt;!here&gt;" in text


def test_a_time_of_the_week() -> None:
    assert parse_schedule("off") is None and parse_schedule("") is None
    assert str(parse_schedule("weekly")) == "mon 09:00"
    assert parse_schedule(" Friday  16:30 ") == Weekly(4, 16 * 60 + 30)
    for wrong in ("daily", "fri", "fri 24:00", "fri 9:5", "someday 09:00"):
        with pytest.raises(ValueError, match="use off, weekly"):
            parse_schedule(wrong)
    thursday = 0.0  # 1 January 1970, 00:00 UTC
    monday_nine = Weekly(0, 9 * 60)
    assert monday_nine.last(thursday) == 4 * 86400 + 9 * 3600 - WEEK
    assert monday_nine.last(4 * 86400 + 9 * 3600) == 4 * 86400 + 9 * 3600
    assert Weekly(3, 0).last(thursday) == 0.0


def test_a_digest_setting_that_is_not_a_time_of_the_week_is_refused(tmp_path: Path) -> None:
    result = check(tmp_path, POLICY, APPROVAL_BOT_REVIEW_DIGEST="every day")
    assert result.returncode == 1
    assert "APPROVAL_BOT_REVIEW_DIGEST" in result.stderr
    assert "use off, weekly (Monday 09:00 UTC) or a day and a UTC time" in result.stderr


async def test_the_report_reads_what_the_running_bot_recorded(
    redis_url: str, tmp_path: Path
) -> None:
    """Decisions through signed requests on two folded cards, one opened (Show all) first:
    the report counts what the live metrics count (both faster than a card can be read at a
    thousandth of a character a second; one folded card decided unopened), with each
    decision's time from its card."""
    steps = [[function_call("delete_logs", {"path": "x" * 5000}, call_id=f"d{n}")
              for n in range(2)], [assistant_message("done")]]  # fmt: skip
    agent, _ = ops_agent(steps, Ledger())
    async with BotHarness(redis_url, agent, POLICY) as bot:
        await bot.slack.command("clean up", user="U1", channel="C1")
        first, second = await bot.wait_for_cards(2)
        await wait_until(lambda: _kinds(bot, "card_shown", 2), what="both cards audited")
        opened = len(bot.slack_api.views) + 1
        await show(bot, first, SHOW_ALL, "U2")
        await wait_until(lambda: len(bot.slack_api.views) >= opened, what="Show all")
        await wait_until(lambda: _kinds(bot, "viewed", 1), what="the view audited")
        await bot.click(first, APPROVE, user="U2")
        await bot.reject(second, user="U2", reason="not this one")
        await bot.wait_for_status("finished")
        await bot.idle()
    env = command_env(redis_url, APPROVAL_BOT_REVIEW_READ_CHARS_PER_SECOND="0.001")
    out = run_bot(["report", "reviews", "--csv"], env=env, cwd=tmp_path, check=True).stdout
    rows = {(r["channel"], r["approver"]): r for r in csv.DictReader(io.StringIO(out))}
    assert list(rows) == [("C1", "*"), ("C1", "U2")]
    for row in rows.values():
        counts = [row[k] for k in ("decisions", "approvals", "rejections", "timed", "too_fast",
                                   "unopened", "expiries", "rubber_stamp_alarms")]  # fmt: skip
        assert counts == ["2", "1", "1", "2", "2", "1", "0", "0"]
        assert 0 <= float(row["p50_seconds"]) <= float(row["p95_seconds"])


async def _kinds(bot: BotHarness, kind: str, count: int) -> bool:
    return len([e for e in await bot.audit() if e["kind"] == kind]) >= count
