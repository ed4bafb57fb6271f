"""A policy that learns from its audit (#34), as figures: `python -m benchmarks.learning [N]`.

A 30-day history of N settled calls (default 12,000) is written through the real audit trail
(`bot.testing.history.HistoryWriter`: the service's own `audit_fields`, the real `AuditLog`),
with every entry a run writes around its call (started, paused, a shadow rule's verdict,
settled, resumed, finished). Eight tools, five approvers, a few patterns people always approve,
some they sometimes reject, expiries and automatic decisions. Then, on that history:

- bytes: MEMORY USAGE of the audit stream per entry and per settled call, and what the fields
  a backtest needs add to a settled call's entry (the same entries with and without them);
- time: one read of the trail, the backtest of a candidate policy, the suggestions (each with
  its own backtest), the shadow report; CPU seconds (time.process_time) beside the wall clock,
  and the commands as an operator runs them (a process each, Python's start included);
- the worked example: what the backtest finds, and the suggested rules.

Without a REDIS_URL argument an embedded redis-server is started for it.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from bot.learning import backtest as backtests
from bot.learning import shadow_report, suggest
from bot.learning.history import read_history
from bot.service.audit import AuditKind, audit_fields
from bot.service.policy.rules import parse_policy
from bot.store.connection import EmbeddedRedis
from bot.store.records import RunRecord
from bot.store.trail.audit import AUDIT_STREAM, AuditLog
from bot.testing.history import TEAM, HistoryWriter

DAY = 86400.0
DAYS = 30
CALLS = 12_000
PEOPLE = ("U2", "U3", "U4", "U5", "U6")

IN_FORCE = """
channels:
  C1:
    approvers: [U2, U3, U4, U5, U6]
  C2:
    approvers: [U2, U3, U4, U5, U6]
tools:
  - name: qa-deploys
    match: deploy
    when: {args.env: [qa]}
    auto: approve
  - name: try-staging
    match: deploy
    when: {args.env: 'staging-*'}
    auto: approve
    mode: shadow
  - name: transfers
    match: transfer
    when: {args.amount: '> 10000'}
    approvers: [U5, U6]
    required_approvals: 2
"""
# The candidate a person wants to deploy: staging enforced, production deploys typed, every
# deletion under /srv/logs approved, restarts of `api` to the on-call only, other restarts
# approved (people reject one billing restart in ten: the backtest fails on those).
CANDIDATE = (
    IN_FORCE.replace("    mode: shadow\n", "")
    + """
  - name: prod-typed
    match: deploy
    when: {args.env: 'prod-*'}
    confirm: type
    confirm_value: args.env
  - name: logs
    match: delete_logs
    when: {args.path: '/srv/logs/*'}
    auto: approve
  - name: api-restarts
    match: restart
    when: {args.service: [api]}
    approvers: [U6]
  - name: other-restarts
    match: restart
    auto: approve
"""
)


def call_of(rng: random.Random) -> tuple[str, dict[str, Any], float]:
    """A tool, its arguments, and how likely people are to reject it."""
    pick = rng.random()
    if pick < 0.30:
        env = rng.choice(["staging-1", "staging-2", "staging-3", "qa", "prod-1", "prod-2"])
        args = {"env": env, "replicas": rng.randint(1, 5), "version": f"1.{rng.randint(0, 40)}.0"}
        return "deploy", args, 0.15 if env.startswith("prod") else 0.0
    if pick < 0.45:
        where = rng.choice(["/srv/logs", "/srv/logs/archive", "/var/lib/db"])
        args = {"path": f"{where}/app-{rng.randint(1, 999)}.log"}
        return "delete_logs", args, 0.5 if where == "/var/lib/db" else 0.0
    if pick < 0.60:
        service = rng.choice(["api", "web", "worker", "billing", "search"])
        return "restart", {"service": service}, 0.1 if service == "billing" else 0.0
    if pick < 0.70:
        return "rotate_key", {"key": f"key-{rng.randint(1, 50)}"}, 0.02
    if pick < 0.80:
        body = " ".join(rng.choice(["status", "update", "deploy", "done", "ok"]) for _ in range(40))
        to = rng.choice(["team@example.com", "ops@example.com", f"u{rng.randint(1, 99)}@x.com"])
        return "send_email", {"to": to, "subject": "Weekly status", "body": body}, 0.05
    if pick < 0.90:
        amount = round(rng.uniform(1, 20_000), 2)
        args = {"amount": amount, "currency": rng.choice(["USD", "EUR"]), "to": "acct-42"}
        return "transfer", args, 0.3 if amount > 10_000 else 0.02
    sql = f"SELECT * FROM orders WHERE id = {rng.randint(1, 10**6)} LIMIT {rng.randint(1, 100)}"
    return "query_db", {"sql": sql}, 0.01


def run_entries(writer: HistoryWriter, run: RunRecord, at: float, settled: float) -> None:
    """The entries a run writes around its one call, as the service writes them."""
    writer.raw(at - 2, AuditKind.RUN_STARTED, audit_fields(run=run, detail=run.task))
    writer.raw(at, AuditKind.PAUSED, audit_fields(run=run, detail="1 call(s) need a decision"))
    writer.raw(settled + 0.2, AuditKind.RESUMED, audit_fields(run=run, detail="1 approved"))
    writer.raw(settled + 1.5, AuditKind.RUN_FINISHED, audit_fields(run=run, detail="Done."))


async def write_history(url: str, calls: int, seed: int = 34) -> tuple[int, int]:
    """`calls` settled calls over the last 30 days; returns (entries, settled calls)."""
    rng = random.Random(seed)
    policy = parse_policy(IN_FORCE)
    client = aioredis.from_url(url)
    writer = HistoryWriter(AuditLog(client))
    start = time.time() - DAYS * DAY
    for n in range(calls):
        at = start + (n + rng.random()) * (DAYS * DAY - 3600) / calls
        tool, args, risk = call_of(rng)
        channel, agent = rng.choice(["C1", "C1", "C2"]), rng.choice(["ops", "ops", "support"])
        subject = {"args": args}
        rule = policy.rule_for(channel=channel, agent=agent, tool=tool, subject=subject)
        assert rule is not None
        call = writer.call(tool, args, channel=channel, agent=agent, approvers=rule.approvers,
                           required=rule.required, rule=rule.source, requested=at)  # fmt: skip
        if tool == "deploy" and str(args["env"]).startswith("staging-"):
            writer.shadow(call, "try-staging", "auto_approve", at=at + 0.01)
        settled = at + rng.uniform(20, 3600)
        if rule.auto:
            writer.record(call, f"auto_{rule.auto}", at=at + 0.05)
            settled = at + 0.05
        elif rng.random() < 0.02:
            writer.record(call, "expired", at=at + DAY)
            settled = at + DAY
        else:
            decision = "reject" if rng.random() < risk else "approve"
            writer.record(call, decision, by=rng.choice(PEOPLE), at=settled)
        task = f"please {tool} as discussed in the thread"
        run = RunRecord(run_id=call.run_id, team_id=TEAM, user_id="U1", channel_id=channel,
                        agent_name=agent, task=task)  # fmt: skip
        run_entries(writer, run, at, settled)
    written = await writer.flush()  # all at once: the trail's ids only grow
    await client.aclose()
    return written, calls


async def entry_bytes(url: str, samples: int = 2000) -> tuple[float, float, float]:
    """MEMORY USAGE of the trail per entry; a settled call's entry with the fields a backtest
    needs and without them (the same entries, in streams of their own)."""
    client = aioredis.from_url(url, decode_responses=True)
    total = await client.memory_usage(AUDIT_STREAM, samples=0) or 0
    entries = await client.xlen(AUDIT_STREAM)
    rows: list[dict[str, str]] = []
    cursor = "-"
    while len(rows) < samples:
        batch = await client.xrange(AUDIT_STREAM, min=cursor, count=2000)
        if not batch:
            break
        for _, raw in batch:
            fields = {str(k): str(v) for k, v in (raw or {}).items()}
            if fields.get("kind") == AuditKind.DECIDED:
                rows.append(fields)
        cursor = "(" + str(batch[-1][0])
    rows = rows[:samples]
    judged = ("subject", "requested", "approvers", "required", "confirm")
    for key, keep in (("bench:with", True), ("bench:without", False)):
        pipe = client.pipeline(transaction=False)
        for fields in rows:
            pipe.xadd(key, {k: v for k, v in fields.items() if keep or k not in judged})
        await pipe.execute()
    with_ = (await client.memory_usage("bench:with", samples=0) or 0) / len(rows)
    without = (await client.memory_usage("bench:without", samples=0) or 0) / len(rows)
    await client.delete("bench:with", "bench:without")
    await client.aclose()
    return total / entries, with_, without


def timed(what: str, work: Any) -> Any:
    wall, cpu = time.perf_counter(), time.process_time()
    result = work()
    print(
        f"  {what}: {time.perf_counter() - wall:.2f} s wall, {time.process_time() - cpu:.2f} s CPU"
    )
    return result


def command(args: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "bot", *args], env=env, capture_output=True, text=True, check=False
    )
    return time.perf_counter() - started, done


async def main(url: str | None, calls: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-learning-") as tmp:
        server = None
        if url is None:
            server = EmbeddedRedis(Path(tmp) / "redis")
            await server.start()
            url = server.url
        try:
            await run(url, calls, Path(tmp))
        finally:
            if server is not None:
                server.stop()


async def run(url: str, calls: int, tmp: Path) -> None:
    client = aioredis.from_url(url)
    await client.delete(AUDIT_STREAM)
    await client.aclose()
    began = time.perf_counter()
    entries, settled = await write_history(url, calls)
    print(f"History: {settled:,} settled calls over {DAYS} days, {entries:,} audit entries "
          f"(written in {time.perf_counter() - began:.1f} s)")  # fmt: skip

    per_entry, with_fields, without = await entry_bytes(url)
    print("Bytes (MEMORY USAGE):")
    per_call = per_entry * entries / settled
    print(f"  the audit stream: {per_entry:.0f} bytes per entry, "
          f"{per_call:.0f} per settled call (its run's 5-6 entries)")  # fmt: skip
    print(f"  a settled call's entry: {with_fields:.0f} bytes with what a backtest needs, "
          f"{without:.0f} without (+{with_fields - without:.0f})")  # fmt: skip
    for daily, days in ((calls / DAYS, DAYS), (10_000, DAYS), (10_000, 400)):
        size = per_call * daily * days / 1e6
        print(f"  {daily:,.0f} calls a day for {days} days: {size:,.0f} MB")

    trail = AuditLog(aioredis.from_url(url))
    now = time.time()
    print("Timing (in one process; the trail read once):")
    history = await read_history(trail, since=now - DAYS * DAY, until=now)
    wall, cpu = time.perf_counter(), time.process_time()
    history = await read_history(trail, since=now - DAYS * DAY, until=now)
    took = f"{time.perf_counter() - wall:.2f} s wall, {time.process_time() - cpu:.2f} s CPU"
    print(f"  read {history.entries:,} entries, {len(history.decided):,} settled calls: {took}")
    candidate = parse_policy(CANDIDATE)
    result = timed("backtest", lambda: backtests.backtest(candidate, history.decided))
    found = timed("suggest (with each suggestion's backtest)",
                  lambda: suggest.suggest(parse_policy(IN_FORCE), history))  # fmt: skip
    reports = timed("shadow report", lambda: shadow_report.shadow_report(history))

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "APPROVAL_BOT_"))}
    (tmp / "new.yml").write_text(CANDIDATE)
    (tmp / "policy.yml").write_text(IN_FORCE)
    env.update(REDIS_URL=url, APPROVAL_BOT_POLICY=str(tmp / "policy.yml"))
    print("The commands, as an operator runs them (a process each, Python's start included):")
    for args in (["policy", "backtest", str(tmp / "new.yml")], ["policy", "suggest"],
                 ["report", "shadow"]):  # fmt: skip
        seconds, done = command(args, env)
        print(f"  approval-bot {' '.join(a if '/' not in a else Path(a).name for a in args)}: "
              f"{seconds:.2f} s, exit {done.returncode}")  # fmt: skip

    print("\nWorked example: the backtest of the candidate (each set's size)")
    for _, title, changes in result.sets():
        print(f"  {title}: {len(changes):,}")
    print(f"  unchanged: {result.unchanged:,}; approved automatically what people approved: "
          f"{result.approves_approved:,}")  # fmt: skip
    shown = backtests.render(result, history, "new.yml", limit=2)
    print("\n".join("  | " + line for line in shown[:8]))
    print(f"\nSuggested rules ({len(found)}):")
    for s in found:
        print(f"  {s.name}: {s.agent}/{s.tool} in {s.channel} when {s.when} "
              f"({len(s.covered)} approvals by {len(s.approvers)} people; free: "
              f"{sorted(s.free) or 'none'})")  # fmt: skip
    for report in reports:
        print(f"\nShadow rule {report.rule}: {report.calls:,} calls, agreed {report.agreed:,} of "
              f"{report.by_people:,}, would have approved {len(report.approved_rejected):,} "
              "that people rejected")  # fmt: skip


if __name__ == "__main__":
    given = [a for a in sys.argv[1:] if a.startswith("redis")]
    number = [int(a) for a in sys.argv[1:] if a.isdigit()]
    asyncio.run(main(given[0] if given else None, number[0] if number else CALLS))
