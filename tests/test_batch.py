"""Approve all and Reject all (#33 part 1), through signed requests against the real bot (real
Redis, the Slack stand-in, scripted models): a pause's calls decided at once, each on its own
(its decision, audit entry and card), a quorum's call voted on, a typed one left out by name
and reason, exactly once under concurrent submissions, re-judged when submitted; and the App
Home's selection across runs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from bot import ask_human
from bot.service.policy.source import PolicySource
from bot.slack.blocks import (
    APPROVE,
    BATCH_APPROVE,
    BATCH_MODAL,
    BATCH_REJECT,
    HOME_BATCH_APPROVE,
    HOME_PICK,
    HOME_PICK_BLOCK,
    REASON_BLOCK,
    REASON_INPUT,
)
from bot.store.records import CallStatus
from bot.testing.harness import BotHarness, wait_until
from bot.testing.requests import Sent
from bot.testing.slack_api import Message
from tests.agents_for_tests import Ledger, assistant_message, function_call, ops_agent
from tests.test_home import home_click, home_of, open_home
from tests.test_policy_rules import submit_typed

MIXED = """
defaults:
  allow_self_approval: false
channels:
  C1:
    approvers: [U2, U3]
tools:
  - name: typed
    match: restart_service
    confirm: type
  - name: quorum
    match: delete_logs
    when: {args.path: "/var/log/*"}
    required_approvals: 2
  - name: logs
    match: delete_logs
"""
PLAIN = """
defaults:
  allow_self_approval: false
channels:
  C1:
    approvers: [U2, U3]
"""


def five_calls() -> list[Any]:
    """One turn of five calls: three plain, one under a quorum of 2, one typed."""
    return [
        [
            function_call("delete_logs", {"path": "/a"}, call_id="c1"),
            function_call("delete_logs", {"path": "/b"}, call_id="c2"),
            function_call("delete_logs", {"path": "/c"}, call_id="c3"),
            function_call("delete_logs", {"path": "/var/log/x"}, call_id="c4"),
            function_call("restart_service", {"service": "web"}, call_id="c5"),
        ],
        [assistant_message("done")],
    ]


async def open_batch(bot: BotHarness, user: str, action: str = BATCH_APPROVE) -> dict[str, Any]:
    """`user` clicks Approve all (or Reject all) on the run message; the form it opens."""
    opened = len(bot.slack_api.views)
    message = bot.run_message()
    sent = await bot.click(message, action, user=user)
    assert sent.status == 200
    await wait_until(lambda: len(bot.slack_api.views) > opened, what="the batch form")
    view: dict[str, Any] = bot.slack_api.views[-1]["view"]
    assert view["callback_id"] == BATCH_MODAL
    return view


async def submit_batch(bot: BotHarness, view: dict[str, Any], user: str, reason: str = "") -> Sent:
    values = {}
    if reason:
        values = {REASON_BLOCK: {REASON_INPUT: {"type": "plain_text_input", "value": reason}}}
    return await bot.slack.submit(view, values, user=user)


def view_text(view: dict[str, Any]) -> str:
    return Message("view", "", "", view["blocks"]).all_text()


async def statuses(bot: BotHarness) -> dict[str, str]:
    """call id -> status of the run's calls."""
    store = bot.runtime.service.store
    run_id = json.loads(bot.slack_api.views[-1]["view"]["private_metadata"])["calls"][0]
    run_id = run_id.split(".")[0]
    return {c.call_id: c.status for c in await store.pause_calls(run_id)}


async def test_approve_all_decides_each_votes_on_a_quorum_and_leaves_out_a_typed_call(
    redis_url: str,
) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(five_calls(), ledger)
    async with BotHarness(redis_url, agent, MIXED) as bot:
        await bot.slack.command("clean", user="U1", channel="C1")
        cards = await bot.wait_for_approvals(5)
        assert "Approve all 5" in bot.run_message().all_text()
        view = await open_batch(bot, "U2")
        listed = view_text(view)
        # Each call, its rule, who else must approve; the typed one left out, by name and why.
        assert listed.count("delete_logs") == 4 and "restart_service" in listed
        assert "rule `quorum`" in listed and "*1 of 2 approvals* with it; 1 more needed" in listed
        assert "Left out:* This call needs typed confirmation" in listed
        assert view["submit"]["text"] == "Approve 4"
        metadata = json.loads(view["private_metadata"])
        assert set(metadata) == {"approve", "calls", "left", "channel"}  # opaque ids only
        assert len(metadata["calls"]) == 4 and len(metadata["left"]) == 1
        sent = await submit_batch(bot, view, "U2")
        assert sent.status == 200
        done = sent.json()
        assert done["response_action"] == "update"
        shown = view_text(done["view"])
        assert "Approved *3*, voted on *1*, left out *1*" in shown
        assert "Left out:* This call needs typed confirmation" in shown
        await bot.idle()
        by_call = await statuses(bot)
        assert [by_call[c] for c in ("c1", "c2", "c3")] == [CallStatus.APPROVED] * 3
        assert by_call["c4"] == CallStatus.PENDING and by_call["c5"] == CallStatus.PENDING
        entries = await bot.audit()
        decided = [e for e in entries if e["kind"] == "decided"]
        assert [(e["user"], e["detail"]) for e in decided] == [("U2", "by batch")] * 3
        [vote] = [e for e in entries if e["kind"] == "approval_vote"]
        assert vote["detail"] == "1 of 2, by batch"
        assert len({e["digest"] for e in decided}) == 3  # each its own digest
        first = bot.slack_api.messages[(cards[0].channel, cards[0].ts)]
        assert "Approved by <@U2> (with other calls at once)" in first.all_text()
        assert ledger.names() == []  # the run waits for the rest of its pause
        # The rest on their cards: U3's vote completes the quorum, U2 types the restart.
        quorum = next(c for c in cards if "/var/log/x" in c.all_text())
        await bot.click(quorum, APPROVE, user="U3")
        typed = next(c for c in cards if "restart_service" in c.all_text())
        view = await bot.modal(typed, APPROVE, user="U2")
        await submit_typed(bot, view, "U2", "restart_service")
        await bot.wait_for_status("finished")
        await bot.idle()
    assert sorted(ledger.names()) == ["delete_logs"] * 4 + ["restart_service"]


async def test_a_five_call_pause_takes_two_interactions_instead_of_five(redis_url: str) -> None:
    """The clicks saved (#33's closing note): five calls one by one are five clicks; Approve
    all is a click and a submission."""
    counts = {}
    for way in ("cards", "batch"):
        ledger = Ledger()
        steps = [
            [function_call("delete_logs", {"path": f"/{n}"}, call_id=f"c{n}") for n in range(5)],
            [assistant_message("done")],
        ]
        agent, _ = ops_agent(steps, ledger)
        async with BotHarness(redis_url, agent, PLAIN) as bot:
            await bot.slack.command("clean", user="U1", channel="C1")
            cards = await bot.wait_for_approvals(5)
            before = len(bot.slack.statuses)
            if way == "cards":
                for card in cards:
                    await bot.click(card, APPROVE, user="U2")
            else:
                await submit_batch(bot, await open_batch(bot, "U2"), "U2")
            counts[way] = len(bot.slack.statuses) - before
            await bot.wait_for_status("finished")
        assert len(ledger.names()) == 5
    assert counts == {"cards": 5, "batch": 2}, counts
    print(f"\n5-call pause: {counts['cards']} interactions one by one, {counts['batch']} batched")


async def test_concurrent_submissions_decide_each_call_once(redis_url: str) -> None:
    ledger = Ledger()
    steps = [
        [function_call("delete_logs", {"path": f"/{n}"}, call_id=f"c{n}") for n in range(4)],
        [assistant_message("done")],
    ]
    agent, _ = ops_agent(steps, ledger)
    async with BotHarness(redis_url, agent, PLAIN) as bot:
        await bot.slack.command("clean", user="U1", channel="C1")
        await bot.wait_for_approvals(4)
        forms = [await open_batch(bot, "U2"), await open_batch(bot, "U3")]
        sent = await asyncio.gather(
            submit_batch(bot, forms[0], "U2"),
            submit_batch(bot, forms[1], "U3"),
            submit_batch(bot, forms[0], "U2"),
        )
        assert all(s.status == 200 for s in sent)
        await bot.wait_for_status("finished")
        await bot.idle()
        decided = [e for e in await bot.audit() if e["kind"] == "decided"]
        refused = [e for e in await bot.audit() if e["kind"] == "refused"]
    assert len(ledger.names()) == 4  # each call ran once
    assert sorted(e["approval_id"] for e in decided) == sorted({e["approval_id"] for e in decided})
    assert len(decided) == 4
    # What one submission decided, the others left out as already decided.
    assert len(refused) == 8 and all("already" in e["detail"] for e in refused), refused


async def test_reject_all_rejects_each_with_the_reason(redis_url: str) -> None:
    ledger = Ledger()
    agent, model = ops_agent(five_calls(), ledger)
    async with BotHarness(redis_url, agent, MIXED) as bot:
        await bot.slack.command("clean", user="U1", channel="C1")
        await bot.wait_for_approvals(5)
        view = await open_batch(bot, "U2", BATCH_REJECT)
        assert view["submit"]["text"] == "Reject 5"  # rejecting types nothing, needs no quorum
        sent = await submit_batch(bot, view, "U2", reason="not during the freeze")
        assert "Rejected *5*" in view_text(sent.json()["view"])
        await bot.wait_for_status("finished")
        await bot.idle()
        rejected = [e for e in await bot.audit() if e.get("decision") == "reject"]
    assert ledger.names() == []
    assert len(rejected) == 5 and {e["text"] for e in rejected} == {"not during the freeze"}
    assert model.last_call is not None and "not during the freeze" in json.dumps(
        model.last_call.input, default=str
    )


async def test_the_submission_is_judged_again_under_the_policy_in_force(
    redis_url: str, tmp_path: Path
) -> None:
    """A form opened by an approver, submitted after the policy took their right away: nothing
    is decided; and someone who may decide nothing is told so, no form opens."""
    ledger = Ledger()
    steps = [
        [function_call("delete_logs", {"path": f"/{n}"}, call_id=f"c{n}") for n in range(2)],
        [assistant_message("done")],
    ]
    agent, _ = ops_agent(steps, ledger)
    path = tmp_path / "policy.yml"
    path.write_text(PLAIN)
    source = PolicySource.from_file(path)
    async with BotHarness(redis_url, agent, source) as bot:
        # U2 stays in the channel (sees its cards) once no longer among its approvers.
        bot.slack_api.channel_members["C1"] = ["U1", "U2", "U3"]
        await bot.slack.command("clean", user="U1", channel="C1")
        await bot.wait_for_approvals(2)
        opened = len(bot.slack_api.views)
        await bot.click(bot.run_message(), BATCH_APPROVE, user="U4")
        await bot.idle()
        assert len(bot.slack_api.views) == opened
        told = bot.slack_api.ephemeral_to("U4")
        assert any("nothing here you may approve" in t for t in told), told
        view = await open_batch(bot, "U2")
        path.write_text(PLAIN.replace("[U2, U3]", "[U3]"))
        assert source.reload()
        sent = await submit_batch(bot, view, "U2")
        shown = view_text(sent.json()["view"])
        assert "left out *2*" in shown and "not among the approvers" in shown
        await bot.idle()
        assert [e for e in await bot.audit() if e["kind"] == "decided"] == []
    assert ledger.names() == []


async def test_the_home_decides_a_selection_across_runs(redis_url: str) -> None:
    ledger = Ledger()
    steps = [
        [function_call("delete_logs", {"path": "/a"}, call_id="c1")],
        [function_call("delete_logs", {"path": "/b"}, call_id="c2")],
        [assistant_message("done")],
        [assistant_message("done")],
    ]
    agent, _ = ops_agent(steps, ledger)
    async with BotHarness(redis_url, agent, PLAIN) as bot:
        await bot.slack.command("clean a", user="U1", channel="C1")
        await bot.wait_for_approvals(1)
        await bot.slack.command("clean b", user="U1", channel="C1")
        await bot.wait_for_approvals(2)
        assert BATCH_APPROVE not in bot.run_message().action_ids()  # one call: no batch
        await open_home(bot, "U2")

        def offered() -> dict[str, Any] | None:
            home = bot.slack_api.home_views.get("U2")
            return home if home and HOME_BATCH_APPROVE in home_of(bot, "U2").action_ids() else None

        home = await wait_until(offered, what="the Home's batch")
        options = [
            o
            for b in home["blocks"]
            if b.get("block_id", "").startswith(HOME_PICK_BLOCK)
            for e in b["elements"]
            for o in e["options"]
        ]
        assert len(options) == 2
        payload = home_click(bot, HOME_BATCH_APPROVE, "", "U2")
        state = {"type": "checkboxes", "selected_options": options}
        payload["view"]["state"] = {"values": {f"{HOME_PICK_BLOCK}:0": {HOME_PICK: state}}}
        opened = len(bot.slack_api.views)
        assert (await bot.slack.send_interaction(payload)).status == 200
        await wait_until(lambda: len(bot.slack_api.views) > opened, what="the batch form")
        view = bot.slack_api.views[-1]["view"]
        assert view["submit"]["text"] == "Approve 2"
        sent = await submit_batch(bot, view, "U2")
        assert "Approved *2*" in view_text(sent.json()["view"])
        await bot.idle()
    assert ledger.names() == ["delete_logs", "delete_logs"]


async def test_a_question_in_the_pause_is_left_out_to_be_answered(redis_url: str) -> None:
    ledger = Ledger()
    steps = [
        [
            function_call("delete_logs", {"path": "/a"}, call_id="c1"),
            function_call("delete_logs", {"path": "/b"}, call_id="c2"),
            function_call("ask_human", {"question": "Which region?"}, call_id="q1"),
        ],
        [assistant_message("done")],
    ]
    agent, _ = ops_agent(steps, ledger, extra_tools=[ask_human])
    async with BotHarness(redis_url, agent, PLAIN) as bot:
        await bot.slack.command("clean", user="U1", channel="C1")
        await bot.wait_for_cards(3)
        assert "Approve all 2" in bot.run_message().all_text()  # questions are answered
        view = await open_batch(bot, "U2")
        listed = view_text(view)
        assert "Left out:* This is a question from the agent: answer it with Answer." in listed
        assert view["submit"]["text"] == "Approve 2"
        sent = await submit_batch(bot, view, "U2")
        shown = view_text(sent.json()["view"])
        assert "Approved *2*, left out *1*" in shown and "answer it with Answer" in shown
        await bot.idle()
        [question] = bot.pending_cards()
        assert "Which region?" in question.all_text()
        by_call = await statuses(bot)
    assert by_call == {"c1": CallStatus.APPROVED, "c2": CallStatus.APPROVED,
                       "q1": CallStatus.PENDING}  # fmt: skip
    assert ledger.names() == []  # the run waits for the answer
