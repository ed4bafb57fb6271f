"""The compact Redis layout (issue #9): what a paused run costs, and runs paused under the layout
before it (tests/fixtures/layout_v1.json, written by tests/fixtures/make_layout_v1.py with the
code of that layout) resume after the upgrade, through signed clicks on their old cards."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from benchmarks.storage import paused_run_bytes
from bot.slack.blocks import APPROVE
from bot.store import keys
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
