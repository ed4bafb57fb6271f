"""The compact Redis layout (issue #9): what a paused run costs, and runs paused under the layout
before it (tests/fixtures/layout_v1.json, written by tests/fixtures/make_layout_v1.py with the
code of that layout) resume after the upgrade, through signed clicks on their old cards."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from benchmarks.storage import paused_run_bytes
from bot.engine.runner import pack_state, unpack_state
from bot.slack.blocks import APPROVE
from bot.store import keys
from bot.store.records import CallRecord, RunRecord
from bot.testing.harness import BotHarness, wait_until
from bot.testing.slack_api import FakeSlackAPI
from tests.agents_for_tests import POLICY, Ledger
from tests.fixtures.make_layout_v1 import PATH_100, fixture_agents, load_keys, load_messages

FIXTURE = Path(__file__).parent / "fixtures" / "layout_v1.json"


async def test_a_paused_run_costs_at_most_2_kb_and_3_kb_with_realistic_text(
    redis_url: str,
) -> None:
    figures = await paused_run_bytes(redis_url)
    # Layout 1: 4,064 B in 6 keys (minimal) and 6,744 B (realistic).
    assert figures["minimal"]["bytes"] <= 2048, figures["minimal"]
    assert figures["realistic"]["bytes"] <= 3072, figures["realistic"]
    assert figures["minimal"]["keys"] <= 5, figures["minimal"]


def _thread_has(api: FakeSlackAPI, text: str) -> bool:
    return any(m.thread_ts and text in m.text for m in api.messages.values())


async def test_runs_paused_under_layout_1_resume_after_the_upgrade(
    redis_url: str, slack_api: FakeSlackAPI
) -> None:
    data: dict[str, Any] = json.loads(FIXTURE.read_text())
    assert data["layout"] == 1
    client = aioredis.Redis.from_url(redis_url)
    await load_keys(client, data["keys"])
    load_messages(slack_api, data["messages"])
    runs = data["runs"]
    mini, real, multi = runs["mini"], runs["real"], runs["multi"]
    assert await client.type(keys.snapshot_key(mini["run_id"])) == b"hash"  # layout 1 indeed
    ledger = Ledger()
    try:
        async with BotHarness(
            redis_url, fixture_agents(ledger, resumed=True), POLICY, slack=slack_api
        ) as bot:
            # A click on an old card, exactly as Slack would send it.
            for run in (mini, real):
                [card] = run["approvals"]
                sent = await bot.slack.click(
                    APPROVE,
                    card["approval_id"],
                    user="U2",
                    channel=card["channel"],
                    message_ts=card["message_ts"],
                )
                assert sent.status == 200
            await wait_until(lambda: _thread_has(slack_api, "mini done"), what="mini's output")
            await wait_until(lambda: _thread_has(slack_api, "real done"), what="real's output")
            # The multi run: an Always decision kept, two pending calls, a thread comment.
            db, web = multi["approvals"]
            assert "db" in db["arguments"] and "web" in web["arguments"]
            web_card = slack_api.messages[(web["channel"], web["message_ts"])]
            opened = len(slack_api.views)
            await bot.click(web_card, "approval_reject", user="U3")
            await wait_until(lambda: len(slack_api.views) > opened, what="the reject modal")
            view = slack_api.views[-1]["view"]
            assert view["blocks"][1]["element"]["initial_value"] == "Check the backups first"
            values = {"reason": {"reason_input": {"type": "plain_text_input", "value": "no"}}}
            await bot.slack.submit(view, values, user="U3")
            db_card = slack_api.messages[(db["channel"], db["message_ts"])]
            await bot.click(db_card, APPROVE, user="U2")
            await wait_until(lambda: _thread_has(slack_api, "multi done"), what="multi's output")
            await bot.idle()
            for run in (mini, real, multi):
                for card in run["approvals"]:
                    shown = slack_api.messages[(card["channel"], card["message_ts"])]
                    assert shown.action_ids() == [], shown.all_text()  # decided, updated
                    assert "by <@U" in shown.all_text()
                stored = await client.hget(keys.run_key(run["run_id"]), "status")
                assert stored == b"finished"
                # Nothing of layout 1 is left behind by the finished runs.
                assert not await client.exists(keys.snapshot_key(run["run_id"]))
                assert not await client.exists(keys.pause_key(run["run_id"]))
    finally:
        await client.aclose()
    assert sorted(ledger.executed, key=str) == sorted(
        [
            ("delete_logs", {"path": "/tmp"}),
            ("delete_logs", {"path": PATH_100}),
            ("restart_service", {"service": "db"}),
        ],
        key=str,
    )


def test_records_store_no_default_and_no_derived_field() -> None:
    call = CallRecord(
        approval_id="0123456789abcdef.AAAAAAAAAAAAAAAA", run_id="0123456789abcdef", index=0,
        call_id="c1", agent="ops", tool="delete_logs", kind="function", sticky="ops::delete_logs",
        arguments="{}",
    )  # fmt: skip
    stored = call.to_hash()
    assert "approval_id" not in stored and "run_id" not in stored  # the key says them
    assert not [k for k, v in stored.items() if v == ""]
    assert stored["status"] == "pending" and stored["pause"] == "0"  # the scripts compare them
    assert CallRecord.from_hash(stored, call.approval_id) == call
    run = RunRecord(run_id="0123456789abcdef", team_id="T", user_id="U", channel_id="C",
                    agent_name="ops", task="t")  # fmt: skip
    assert RunRecord.from_hash(run.to_hash(), run.run_id) == run
    assert set(run.to_hash()) == {
        "team_id",
        "user_id",
        "channel_id",
        "agent_name",
        "task",
        "status",
    }


def test_a_snapshot_is_compressed_with_its_schema_dictionary_and_old_blobs_still_read() -> None:
    data: dict[str, Any] = json.loads(FIXTURE.read_text())
    [old] = [
        base64.b64decode(e["value"]["state"]["base64"])
        for e in data["keys"]
        if e["key"] == keys.snapshot_key(data["runs"]["mini"]["run_id"])
    ]
    state = unpack_state(old)  # xz, as layout 1 stored it
    assert old.startswith(b"\xfd7zXZ")
    packed = pack_state(state)
    assert packed.startswith(b"Z1.21:") and unpack_state(packed) == state
    assert len(packed) * 3 < len(old)  # 1,344 B with xz; 326 B with the dictionary
    # A schema without a dictionary is stored with xz.
    other = state.replace(b'"$schemaVersion":"1.21"', b'"$schemaVersion":"9.99"')
    assert pack_state(other).startswith(b"\xfd7zXZ") and unpack_state(pack_state(other)) == other


async def test_calls_paused_before_timers_existed_get_an_expiry_from_the_upgrade(
    redis_url: str, slack_api: FakeSlackAPI
) -> None:
    """Layout 1 calls carry no timers: the sweeper's full pass gives them the policy's expiry,
    counted from the upgrade, so they cannot wait unseen forever; decided calls are untouched."""
    data: dict[str, Any] = json.loads(FIXTURE.read_text())
    client = aioredis.Redis.from_url(redis_url)
    await load_keys(client, data["keys"])
    load_messages(slack_api, data["messages"])
    mini = data["runs"]["mini"]
    [card] = mini["approvals"]
    try:
        async with BotHarness(
            redis_url, fixture_agents(Ledger(), resumed=True), POLICY, slack=slack_api
        ) as bot:
            assert not await client.hget(keys.call_key(card["approval_id"]), "expires_at")
            before = time.time()
            await bot.runtime.service.requeue_stalled(older_than=3600, reconcile=True)
            call = await bot.runtime.service.store.get_call(card["approval_id"])
            assert call is not None and call.status == "pending"
            assert before + 86400 - 5 <= float(call.expires_at) <= time.time() + 86400 + 5
            assert call.remind_max == 0  # no burst of overdue reminders
            due = await client.zscore(keys.TIMERS, card["approval_id"])
            assert due is not None and abs(due / 1000 - float(call.expires_at)) < 1
            # A second pass changes nothing (the call has its timers now).
            await bot.runtime.service.requeue_stalled(older_than=3600, reconcile=True)
            again = await bot.runtime.service.store.get_call(card["approval_id"])
            assert again is not None and again.expires_at == call.expires_at
    finally:
        await client.aclose()
