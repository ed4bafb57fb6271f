"""A policy that learns from its own audit (#34): shadow rules that record what they would have
done (through the real bot, real clicks and a real Redis), `approval-bot report shadow`,
`approval-bot policy backtest` and `approval-bot policy suggest` on a scripted history written
through the real audit trail, run as the command an operator (or CI) runs."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
import yaml

from bot import metrics
from bot.learning.backtest import backtest
from bot.learning.history import read_history
from bot.sandbox.server import serve
from bot.service.policy.rules import parse_policy
from bot.service.policy.shadow import shadow_verdicts
from bot.slack.blocks import APPROVE
from bot.store.records import RunRecord
from bot.store.trail.audit import AuditLog
from bot.store.trail.webhooks import Event
from bot.testing.harness import BotHarness, wait_until
from bot.testing.history import HistoryWriter
from bot.webhooks import payload
from tests.agents_for_tests import Ledger, function_call
from tests.forkserver import run_bot
from tests.test_authorization import no_server_errors
from tests.test_config import check
from tests.test_policy_rules import BASE, deploy_agent
from tests.test_sandbox_process import cards as sandbox_cards

ROOT = Path(__file__).resolve().parents[1]
DAY = 86400.0

SHADOWED = BASE + (
    "tools:\n"
    "  - name: prod\n    match: deploy\n    when: {args.env: 'prod-*'}\n    approvers: [U3]\n"
    "  - name: try-deploys\n    match: deploy\n    auto: approve\n    mode: shadow\n"
)


def shadow_count(rule: str, would: str) -> float:
    value = metrics.REGISTRY.get_sample_value(
        "approval_bot_shadow_decisions_total", {"rule": rule, "would": would}
    )
    return value or 0.0


def card_for(cards: list[Any], env: str) -> Any:
    [card] = [c for c in cards if f"env: {env}" in c.all_text()]
    return card


def command_env(redis_url: str, **more: str) -> dict[str, str]:
    """The environment of an operator's command: Redis, and no Slack secret at all."""
    prefixes = ("SLACK_", "APPROVAL_BOT_", "REDIS", "OPENAI_API_KEY")
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    env.update(REDIS_URL=redis_url, PYTHONPATH=str(ROOT), **more)
    return env


# Shadow rules ------------------------------------------------------------------------------


async def test_a_shadow_rule_decides_nothing_and_records_what_it_would_have_done(
    redis_url: str, tmp_path: Path
) -> None:
    """`try-deploys` would approve every deploy automatically. It decides nothing: all three
    calls wait for people. It is judged in its place: `prod` (enforced, before it) governs
    prod-1, so only the two staging calls get a shadow entry (and move the metric). People
    approve one and reject the other; the report says it agreed once of twice, and lists the
    rejected call."""
    before = shadow_count("try-deploys", "auto_approve")
    ledger = Ledger()
    agent, _ = deploy_agent(
        [function_call("deploy", {"env": "staging-1"}, call_id="s1"),
         function_call("deploy", {"env": "staging-2"}, call_id="s2"),
         function_call("deploy", {"env": "prod-1"}, call_id="p1")],
        ledger,
    )  # fmt: skip
    async with BotHarness(redis_url, agent, SHADOWED) as bot:
        await bot.slack.command("deploy", user="U1", channel="C1")
        cards = await bot.wait_for_approvals(3)
        await bot.idle()
        assert ledger.executed == []  # the shadow rule approved nothing
        assert "rule `prod`" in card_for(cards, "prod-1").all_text()
        await bot.click(card_for(cards, "staging-1"), APPROVE, user="U2")
        await bot.reject(card_for(cards, "staging-2"), user="U2", reason="not today")
        await bot.click(card_for(cards, "prod-1"), APPROVE, user="U3")
        await bot.wait_for_status("finished")
        await bot.idle()
        audit = await bot.audit()
        no_server_errors(bot)
    assert sorted(e["env"] for _, e in ledger.executed) == ["prod-1", "staging-1"]
    shadows = [e for e in audit if e["kind"] == "shadow"]
    assert [(e["rule"], e["decision"]) for e in shadows] == [("try-deploys", "auto_approve")] * 2
    assert all("would have approved it automatically" in e["detail"] for e in shadows)
    assert all("the rule in force: channels.C1" in e["detail"] for e in shadows)
    assert shadow_count("try-deploys", "auto_approve") == before + 2
    decided = {e["approval_id"]: e for e in audit if e["kind"] == "decided"}
    assert {json.loads(d["subject"])["args"]["env"] for d in decided.values()} == {
        "staging-1", "staging-2", "prod-1",
    }  # fmt: skip
    for entry in decided.values():  # what a backtest replays: the subject, when it was asked
        assert float(entry["requested"]) <= float(entry["time"])
        assert entry["approvers"] in ('["U2", "U3"]', '["U3"]')
    # A webhook never carries the arguments (the trail keeps them for backtests).
    entry = next(iter(decided.values()))
    sent = json.loads(payload(Event(entry["id"], {k: v for k, v in entry.items() if k != "id"})))
    assert "subject" not in sent and sent["kind"] == "decided" and "requested" in sent

    text = run_bot(["report", "shadow"], env=command_env(redis_url), cwd=tmp_path, check=True)
    out = text.stdout
    assert "try-deploys: 2 calls (approve automatically: 2)" in out
    assert "agreed with people on 1 of 2 (50.0%); disagreed on 1" in out
    assert "would have approved what people rejected (or edited first): 1" in out
    [listed] = [line for line in out.splitlines() if "rejected by U2" in line]
    assert "staging-2" in listed and "ops/deploy" in listed
    data = json.loads(
        run_bot(["report", "--json"], env=command_env(redis_url), cwd=tmp_path, check=True).stdout
    )
    [rule] = data["shadow"]
    assert (rule["rule"], rule["agreed"], rule["disagreed"]) == ("try-deploys", 1, 1)
    assert rule["approved_rejected"][0]["subject"]["args"]["env"] == "staging-2"


async def test_a_shadow_rule_after_a_rule_that_decides_records_nothing(redis_url: str) -> None:
    """An enforced automatic rule before the shadow rule decides the call: the shadow rule
    would never have seen it. A shadow rule that would ask others says whom."""
    policy = BASE + (
        "tools:\n"
        "  - match: deploy\n    when: {args.env: 'staging-*'}\n    auto: approve\n"
        "  - name: never-staging\n    match: deploy\n    auto: reject\n    mode: shadow\n"
        "  - name: ask-u9\n    match: deploy\n    approvers: [U9]\n    required_approvals: 2\n"
        "    mode: shadow\n"
    )
    ledger = Ledger()
    agent, _ = deploy_agent(
        [function_call("deploy", {"env": "staging-1"}, call_id="s1"),
         function_call("deploy", {"env": "qa"}, call_id="q1")],
        ledger,
    )  # fmt: skip
    async with BotHarness(redis_url, agent, policy) as bot:
        await bot.slack.command("deploy", user="U1", channel="C1")
        [card] = await bot.wait_for_approvals(1)
        await bot.idle()
        audit = await bot.audit()
        no_server_errors(bot)
    assert "env: qa" in card.all_text()
    shadows = [(e["rule"], e["decision"]) for e in audit if e["kind"] == "shadow"]
    assert shadows == [("never-staging", "auto_reject"), ("ask-u9", "ask")]
    [asks] = [e for e in audit if e["kind"] == "shadow" and e["rule"] == "ask-u9"]
    assert asks["approvers"] == '["U9"]' and asks["required"] == "2"
    assert "would have asked U9 (2 approvals)" in asks["detail"]


def test_check_validates_mode_with_its_line(tmp_path: Path) -> None:
    policy = SHADOWED.replace("mode: shadow", "mode: shadowy")
    result = check(tmp_path, policy, SLACK_BOT_TOKEN="xoxb-1", SLACK_SIGNING_SECRET="s",
                   OPENAI_API_KEY="sk-test")  # fmt: skip
    assert result.returncode == 1
    line = policy.splitlines().index("    mode: shadowy") + 1
    assert f"policy.yml:{line}: tools.1.mode:" in result.stderr
    assert "'enforce' or 'shadow'" in result.stderr


def test_a_shadow_rule_grants_nothing() -> None:
    """Its approvers are nobody's: not the channel's approvers (cancel, Homes), not a rule."""
    policy = parse_policy(BASE + (
        "tools:\n  - match: deploy\n    approvers: [U9]\n    auto: approve\n    mode: shadow\n"
    ))  # fmt: skip
    rule = policy.rule_for(channel="C1", agent="ops", tool="deploy", subject={"args": {}})
    assert rule is not None and rule.source == "channels.C1" and rule.auto is None
    assert "U9" not in policy.channel_approvers("C1")
    assert "U9" not in policy.run_approvers("C1", [("ops", "deploy", {"args": {}})])


def test_a_shadow_rule_that_cannot_be_decided_on_a_call_would_ask_a_person() -> None:
    """Conditions a call's arguments cannot settle (text where a number is compared): enforced,
    an `auto: approve` shadow rule would approve nothing (the call goes to the channel's people
    as it does: no entry); one that routes would take the call, to a person, and says why."""
    policy = parse_policy(BASE + (
        "tools:\n"
        "  - name: cheap\n    match: pay\n    when: {args.amount: '< 100'}\n    auto: approve\n"
        "    mode: shadow\n"
        "  - name: finance\n    match: pay\n    when: {args.amount: '>= 100'}\n"
        "    approvers: [U9]\n    mode: shadow\n"
    ))  # fmt: skip
    writer = HistoryWriter(AuditLog(aioredis.Redis()))
    run = RunRecord(run_id="r", team_id="T1", user_id="U1", channel_id="C1", agent_name="ops",
                    task="t")  # fmt: skip
    [verdict] = shadow_verdicts(policy, run, writer.call("pay", {"amount": "a lot"}))
    assert (verdict.rule.source, verdict.would) == ("finance", "ask")
    assert "could not be decided: args.amount: is text, not a number" in verdict.why
    [cheap] = shadow_verdicts(policy, run, writer.call("pay", {"amount": 5}))
    assert (cheap.rule.source, cheap.would) == ("cheap", "auto_approve")


# A scripted history --------------------------------------------------------------------------

CANDIDATE = BASE + (
    "tools:\n"
    "  - name: prod-auto\n    match: deploy\n    when: {args.env: 'prod-*'}\n    auto: approve\n"
    "  - name: logs-to-u9\n    match: delete_logs\n    approvers: [U9]\n"
    "  - name: qa-typed\n    match: deploy\n    when: {args.env: [qa]}\n    confirm: type\n"
    "    confirm_value: args.env\n"
    "  - name: no-restarts\n    match: restart\n    auto: reject\n"
    "  - name: nights\n    match: rotate\n    auto: approve\n"
    "    during: {hours: '00:00-06:00', timezone: UTC}\n"
)


def midnight(days_ago: int) -> float:
    today = time.time() // DAY * DAY
    return today - days_ago * DAY


async def scripted(redis_url: str) -> dict[str, Any]:
    """Two weeks of settled calls (and one of 40 days ago, and one before subjects were kept)."""
    client = aioredis.from_url(redis_url)
    writer = HistoryWriter(AuditLog(client))
    calls: dict[str, Any] = {}
    for day in range(1, 8):
        writer.settle("deploy", {"env": "staging-1"}, "approve", by="U2" if day % 2 else "U3",
                      at=midnight(day) + 3600)  # fmt: skip
    calls["prod"] = writer.settle("deploy", {"env": "prod-1"}, "reject", by="U2",
                                  at=midnight(3) + 7200)  # fmt: skip
    calls["prod_expired"] = writer.settle(
        "deploy", {"env": "prod-2"}, "expired", at=midnight(2) + 7200
    )
    calls["logs"] = writer.settle("delete_logs", {"path": "/tmp/a"}, "approve", by="U3",
                                  at=midnight(2) + 9000)  # fmt: skip
    calls["qa"] = writer.settle("deploy", {"env": "qa"}, "auto_approve", at=midnight(1) + 100,
                                rule="qa-auto")  # fmt: skip
    calls["restart"] = writer.settle("restart", {"service": "api"}, "approve", by="U2",
                                     at=midnight(1) + 200)  # fmt: skip
    # Requested at 05:30, decided at 09:00: a `during` rule reads the request's time.
    calls["rotate_night"] = writer.settle(
        "rotate", {"key": "k1"}, "approve", by="U3", at=midnight(4) + 9 * 3600,
        requested=midnight(4) + 5.5 * 3600,
    )  # fmt: skip
    calls["rotate_day"] = writer.settle(
        "rotate", {"key": "k2"}, "reject", by="U3", at=midnight(4) + 10 * 3600,
        requested=midnight(4) + 9.5 * 3600,
    )  # fmt: skip
    writer.settle("deploy", {"env": "prod-9"}, "reject", by="U2", at=midnight(40))
    writer.raw(midnight(5), "decided", {"decision": "reject", "user": "U2", "tool": "deploy",
                                        "channel": "C1", "agent": "ops"})  # fmt: skip
    await writer.flush()
    await client.aclose()
    return calls


async def test_a_backtest_sorts_what_would_change_most_dangerous_first(
    redis_url: str, tmp_path: Path
) -> None:
    calls = await scripted(redis_url)
    candidate = tmp_path / "new.yml"
    candidate.write_text(CANDIDATE)
    env = command_env(redis_url)
    result = run_bot(["policy", "backtest", str(candidate), "--days", "30", "--json"], env=env,
                     cwd=tmp_path)  # fmt: skip
    assert result.returncode == 1, result.stderr  # it would approve what people turned down
    found = json.loads(result.stdout)

    def ids(key: str) -> set[str]:
        return {c["approval_id"] for c in found[key]}

    assert ids("approves_rejected") == {calls["prod"].approval_id}
    assert ids("approves_expired") == {calls["prod_expired"].approval_id}  # listed, not failing
    assert ids("other_approvers") == {calls["logs"].approval_id, calls["qa"].approval_id}
    assert ids("typed_confirmation") == {calls["qa"].approval_id}
    assert ids("rejects_approved") == {calls["restart"].approval_id}
    # rotate: requested at night -> approved automatically, as people did; by day -> unchanged
    assert found["approves_approved"] == 1 and found["not_replayable"] == 1
    assert found["replayed"] == 7 + 7 and found["unchanged"] == 7 + 1
    text = run_bot(["policy", "backtest", str(candidate)], env=env, cwd=tmp_path).stdout
    order = [text.index(f"{n}. Would") for n in range(1, 5)]
    assert order == sorted(order)
    assert "1. Would approve automatically what was rejected (or edited first): 1  <- fails" in text
    assert "Also approved automatically, not failing: 1 call that expired undecided" in text
    assert "rejected by U2" in text.split("2. Would")[0]
    assert "ask U9 instead of U2, U3" in text
    assert "type args.env to approve (qa-typed)" in text
    # A change that lets nothing through that people turned down passes (exit 0).
    safe = tmp_path / "safe.yml"
    safe.write_text(CANDIDATE.replace("'prod-*'", "'prod-never-*'"))
    passed = run_bot(["policy", "backtest", str(safe)], env=env, cwd=tmp_path)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    # A window that leaves the rejections out; a policy with problems is said, exit 2.
    assert run_bot(["policy", "backtest", str(candidate), "--days", "1"], env=env,
                   cwd=tmp_path).returncode == 0  # fmt: skip
    broken = tmp_path / "broken.yml"
    broken.write_text(CANDIDATE.replace("auto: reject", "auto: maybe"))
    refused = run_bot(["policy", "backtest", str(broken)], env=env, cwd=tmp_path)
    assert refused.returncode == 2 and "broken.yml:" in refused.stderr


async def test_a_backtest_needs_no_slack_secret_and_says_when_redis_is_away(
    tmp_path: Path,
) -> None:
    candidate = tmp_path / "new.yml"
    candidate.write_text(CANDIDATE)
    env = command_env("redis://127.0.0.1:1/0")
    result = run_bot(["policy", "backtest", str(candidate)], env=env, cwd=tmp_path)
    assert result.returncode == 2
    assert "Could not read the audit trail" in result.stderr


async def test_suggested_rules_come_with_evidence_and_never_cover_a_rejection(
    redis_url: str, tmp_path: Path
) -> None:
    client = aioredis.from_url(redis_url)
    writer = HistoryWriter(AuditLog(client))
    at = midnight(20)
    for n in range(6):  # staging: 6 approvals by two people
        writer.settle("deploy", {"env": "staging-1", "replicas": n % 2 + 1}, "approve",
                      by=("U2", "U3")[n % 2], at=at + n * 3600)  # fmt: skip
    for n in range(6):  # prod: 6 approvals, and one rejection: never suggested
        writer.settle("deploy", {"env": "prod-1", "replicas": 1}, "approve",
                      by=("U2", "U3")[n % 2], at=at + DAY + n * 3600)  # fmt: skip
    writer.settle("deploy", {"env": "prod-1", "replicas": 1}, "reject", by="U3", at=at + 2 * DAY)
    for n in range(8):  # logs under one directory, each a different file
        writer.settle("delete_logs", {"path": f"/srv/logs/app-{n}.log"}, "approve",
                      by=("U2", "U3")[n % 2], at=at + 3 * DAY + n)  # fmt: skip
    writer.settle("delete_logs", {"path": "/var/lib/db/x.log"}, "reject", by="U2",
                  at=at + 3 * DAY + 60)  # fmt: skip
    for n in range(9):  # one person only: not enough
        writer.settle("restart", {"service": "api"}, "approve", by="U2", at=at + 4 * DAY + n)
    for n in range(5):  # approved through an edit: not evidence
        writer.settle("rotate", {"key": "k"}, "approve_edited", by=("U2", "U3")[n % 2],
                      at=at + 5 * DAY + n)  # fmt: skip
    hostile = {"env": "staging-1", "replicas": 1, "note": "\x1b[2J\x1b[31mok"}
    writer.settle("deploy", hostile, "approve", by="U2", at=at + 6 * DAY)
    await writer.flush()
    await client.aclose()
    (tmp_path / "policy.yml").write_text(BASE)
    env = command_env(redis_url, APPROVAL_BOT_POLICY=str(tmp_path / "policy.yml"))
    result = run_bot(["policy", "suggest", "--days", "30"], env=env, cwd=tmp_path, check=True)
    out = result.stdout
    assert "\x1b" not in out  # the agent's text cannot drive the terminal
    rules = yaml.safe_load(out)
    assert isinstance(rules, list)
    by_tool = {r["match"]: r for r in rules}
    assert set(by_tool) == {"deploy", "delete_logs"}
    deploy = by_tool["deploy"]
    assert deploy["when"]["args.env"] == ["staging-1"] and deploy["mode"] == "shadow"
    assert deploy["agent"] == "ops" and deploy["channel"] == "C1"
    assert deploy["auto"] == "approve"
    assert by_tool["delete_logs"]["when"] == {"args.path": "/srv/logs/*"}
    assert "evidence: 7 approvals by U2 (4), U3 (3)" in out
    assert "0 that were rejected" in out and "would approve automatically 7 calls" in out
    # Pasted at the top of `tools:`, it is a valid policy; enforced, its backtest passes.
    pasted = BASE + "tools:\n" + out
    policy = parse_policy(pasted)
    assert [r.mode for r in policy.tools] == ["shadow", "shadow"]
    enforced = parse_policy(pasted.replace("mode: shadow", "mode: enforce"))
    history = await read_history(AuditLog(aioredis.from_url(redis_url)), since=0,
                                 until=time.time())  # fmt: skip
    result_now = backtest(enforced, history.decided)
    assert not result_now.fails and result_now.approves_approved == 7 + 8


@pytest.mark.parametrize("min_approvals", ["0", "x"])
def test_suggest_refuses_a_bad_threshold(tmp_path: Path, min_approvals: str) -> None:
    env = command_env("redis://127.0.0.1:1/0")
    result = run_bot(["policy", "suggest", "--min-approvals", min_approvals], env=env,
                     cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2 and "at least 1" in result.stderr


# The sandbox ---------------------------------------------------------------------------------


async def test_the_sandbox_shows_its_shadow_rule_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sandbox's policy has a shadow rule that would approve restarts; Carol rejects the
    restart (in its thread); the page's Report shows the rule disagreed, and on which call."""
    monkeypatch.chdir(tmp_path)
    stop, ready = asyncio.Event(), asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        serve(host="127.0.0.1", port=0, agents="bot.examples.agents:agents", policy_file=None,
              offline=True, stop=stop, ready=ready)
    )  # fmt: skip
    try:
        await asyncio.wait([ready, task], timeout=60, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()  # raises what stopped it
        page = f"http://127.0.0.1:{ready.result()}"
        async with aiohttp.ClientSession() as http:

            async def state() -> dict[str, Any]:
                async with http.get(f"{page}/api/state", params={"user": "U0ALICE"}) as got:
                    result: dict[str, Any] = await got.json()
                    return result

            async def post(what: str, body: dict[str, Any]) -> None:
                async with http.post(f"{page}/api/{what}", json=body) as response:
                    assert response.status == 200, await response.text()

            await post("command", {"user": "U0ALICE", "text": "restart the web tier"})

            async def restart_card() -> dict[str, Any] | None:
                found = [c for c in sandbox_cards(await state()) if "restart_service" in c["text"]]
                return found[0] if found else None

            restart = await wait_until(restart_card, timeout=30, what="the restart's card")
            reject = {"user": "U0CAROL", "thread_ts": restart["ts"], "text": "reject: not now"}
            await post("reply", reject)

            async def reported() -> str | None:
                async with http.get(f"{page}/report") as response:
                    assert response.content_type == "text/plain"
                    text = await response.text()
                return text if "agreed with people" in text else None

            text = await wait_until(reported, timeout=30, what="the shadow rule's report")
            async with http.get(page) as response:
                assert 'href="/report"' in await response.text()
    finally:
        stop.set()
        await task
    assert "try-auto-restarts: 1 call (approve automatically: 1)" in text
    assert "agreed with people on 0 of 1 (0.0%); disagreed on 1" in text
    [listed] = [line for line in text.splitlines() if "rejected by U0CAROL" in line]
    assert "restart_service" in listed
