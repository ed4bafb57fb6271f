"""A hostile review of Approve all / Reject all (#33 part 1): forged selections and submissions
naming calls of other channels and workspaces, calls already decided or voted on, a call that
needs typed confirmation, self-approval, an outsider. Signed HTTP into the real app, real
Redis, the Slack stand-in: whatever the ids say, each call is judged for the person by the one
judgement, decided at most once, and nothing of a call the person may not see is shown."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from bot.service.policy.source import PolicySource
from bot.slack.blocks import (
    APPROVE,
    BATCH_APPROVE,
    HOME_BATCH_APPROVE,
    HOME_PICK,
    HOME_PICK_BLOCK,
    SHOW_ALL,
    SHOW_CONVERSATION,
)
from bot.store.records import CallStatus
from bot.store.trail.attention import viewers_key
from bot.testing.harness import BotHarness, wait_until
from bot.testing.slack_api import Message
from tests.agents_for_tests import (
    Ledger,
    assistant_message,
    delete_then_say,
    function_call,
    ops_agent,
)
from tests.test_batch import submit_batch, view_text
from tests.test_home import home_click

POLICY = """
defaults:
  allow_self_approval: false
channels:
  C1:
    approvers: [U1, U2, U3]
  C9:
    approvers: [U5, U6]
tools:
  - name: typed
    match: restart_service
    confirm: type
  - name: quorum
    match: delete_logs
    when: {args.path: "/var/log/*"}
    required_approvals: 2
"""
SECRET_PATH = "/srv/payroll-of-the-board-7"


def steps() -> list[Any]:
    """Run 1 (C1): a plain call, a quorum's and a typed one; run 2 (C9): one call whose
    arguments only C9's people may see."""
    return [
        [
            function_call("delete_logs", {"path": "/plain-a"}, call_id="c1"),
            function_call("delete_logs", {"path": "/var/log/q"}, call_id="c2"),
            function_call("restart_service", {"service": "web"}, call_id="c3"),
        ],
        [function_call("delete_logs", {"path": SECRET_PATH}, call_id="c9")],
        [assistant_message("done")],
        [assistant_message("done")],
    ]


async def two_runs(bot: BotHarness) -> tuple[list[Message], Message]:
    """U1 starts a run in C1 (three calls), U5 one in C9; their cards."""
    await bot.slack.command("clean", user="U1", channel="C1")
    await bot.wait_for_approvals(3)
    await bot.slack.command("payroll", user="U5", channel="C9")
    every = await bot.wait_for_approvals(4)
    [secret] = [c for c in every if c.channel == "C9"]
    return [c for c in every if c.channel == "C1"], secret


def card_of(cards: list[Message], needle: str) -> Message:
    return next(c for c in cards if needle in c.all_text())


async def status_of(bot: BotHarness, value: str) -> str:
    """The status of the call whose card's Approve carries `value`."""
    call = await bot.runtime.service.store.get_call(value.split(":")[0])
    assert call is not None
    return str(call.status)


async def home_batch(bot: BotHarness, user: str, values: list[str]) -> dict[str, Any] | None:
    """`user` clicks Approve selected on the App Home with `values` ticked (forged or not): the
    form that opens, or None (told privately instead)."""
    payload = home_click(bot, HOME_BATCH_APPROVE, "", user)
    options = [{"text": {"type": "plain_text", "text": "x"}, "value": v} for v in values]
    state = {"type": "checkboxes", "selected_options": options}
    payload["view"]["state"] = {"values": {f"{HOME_PICK_BLOCK}:0": {HOME_PICK: state}}}
    opened, told = len(bot.slack_api.views), len(bot.slack_api.dms(user))
    assert (await bot.slack.send_interaction(payload)).status == 200
    await wait_until(
        lambda: len(bot.slack_api.views) > opened or len(bot.slack_api.dms(user)) > told,
        what="the batch form or a refusal",
    )
    return bot.slack_api.views[-1]["view"] if len(bot.slack_api.views) > opened else None


async def test_a_forged_home_selection_shows_nothing_of_a_call_the_person_may_not_see(
    redis_url: str,
) -> None:
    """U2 (C1's approver, not in C9) ticks a C1 call and, forged, C9's: the form lists only
    the C1 call; C9's tool and arguments appear nowhere, and submitting decides only C1's."""
    ledger = Ledger()
    agent, _ = ops_agent(steps(), ledger)
    async with BotHarness(redis_url, agent, POLICY) as bot:
        cards, secret = await two_runs(bot)
        plain = card_of(cards, "/plain-a").button_value(APPROVE)
        hidden = secret.button_value(APPROVE)
        view = await home_batch(bot, "U2", [plain, hidden])
        assert view is not None
        shown = view_text(view)
        assert "/plain-a" in shown and SECRET_PATH not in shown, shown
        assert view["submit"]["text"] == "Approve 1"
        # Forged further: the submission names C9's call among those to decide.
        metadata = json.loads(view["private_metadata"])
        metadata["calls"].append(hidden)
        metadata["left"].append(hidden)
        view["private_metadata"] = json.dumps(metadata)
        sent = await submit_batch(bot, view, "U2")
        done = view_text(sent.json()["view"])
        assert SECRET_PATH not in done, done
        await bot.idle()
        assert await status_of(bot, plain) == CallStatus.APPROVED
        assert await status_of(bot, hidden) == CallStatus.PENDING
        # A submission naming only C9's call: nothing decided, nothing of it shown.
        metadata.update(calls=[hidden], left=[hidden])
        view["private_metadata"] = json.dumps(metadata)
        done = view_text((await submit_batch(bot, view, "U2")).json()["view"])
        assert "Nothing was decided" in done and SECRET_PATH not in done, done
        # Only C9's call selected: nothing opens, and the refusal names nothing of it.
        assert await home_batch(bot, "U2", [hidden]) is None
        told = bot.slack_api.dms("U2")[-1].all_text()
        assert SECRET_PATH not in told and "delete_logs" not in told, told
        # Its own approver still sees and decides it.
        view = await home_batch(bot, "U6", [hidden])
        assert view is not None and SECRET_PATH in view_text(view)


async def test_forged_and_repeated_submissions_hold(redis_url: str) -> None:
    """Each case through the real form's submission, its ids forged as noted; what must hold:
    nothing is decided or counted that the one judgement would refuse for a click."""
    ledger = Ledger()
    agent, _ = ops_agent(steps(), ledger)
    async with BotHarness(redis_url, agent, POLICY) as bot:
        cards, secret = await two_runs(bot)
        plain = card_of(cards, "/plain-a").button_value(APPROVE)
        quorum = card_of(cards, "/var/log/q").button_value(APPROVE)
        typed = card_of(cards, "restart_service").button_value(APPROVE)
        hidden = secret.button_value(APPROVE)
        store = bot.runtime.service.store

        # The starter (U1, an approver of C1) under allow_self_approval: false: no form.
        opened = len(bot.slack_api.views)
        await bot.click(run_message(bot, "C1"), BATCH_APPROVE, user="U1")
        await bot.idle()
        assert len(bot.slack_api.views) == opened
        assert any("nothing here you may approve" in t for t in bot.slack_api.ephemeral_to("U1"))

        # U2's real form: the plain call decided, the quorum voted, the typed one left out.
        view = await open_form(bot, "U2")
        assert view["submit"]["text"] == "Approve 2"
        forged = json.loads(view["private_metadata"])
        # Forged: the typed call moved into what is decided, C9's call added, a made-up id.
        forged["calls"] += [typed, hidden, "zz"]
        view["private_metadata"] = json.dumps(forged)
        # The starter submits U2's form (a form is the person's own: judged as U1).
        await submit_batch(bot, view, "U1")
        await bot.idle()
        for value in (plain, quorum, typed, hidden):
            assert await status_of(bot, value) == CallStatus.PENDING
        # Another workspace's person submitting it: nothing either.
        sent = await bot.slack.submit(view, {}, user="U2", team="T0OTHER")
        assert sent.status == 200
        await bot.idle()
        for value in (plain, quorum, typed, hidden):
            assert await status_of(bot, value) == CallStatus.PENDING

        # U2 submits (forged as above): plain decided, quorum one vote, typed and C9 untouched.
        await submit_batch(bot, view, "U2")
        await bot.idle()
        assert await status_of(bot, plain) == CallStatus.APPROVED
        assert await status_of(bot, typed) == CallStatus.PENDING
        assert await status_of(bot, hidden) == CallStatus.PENDING
        call = await store.get_call(quorum.split(":")[0])
        assert call is not None and call.status == CallStatus.PENDING
        assert call.voter_ids() == ["U2"]
        # The same submission again (replayed): the decided call is not decided twice, U2's
        # vote is not counted twice.
        await submit_batch(bot, view, "U2")
        await bot.idle()
        call = await store.get_call(quorum.split(":")[0])
        assert call is not None and call.voter_ids() == ["U2"]
        assert call.status == CallStatus.PENDING
        # An outsider (U4) submitting U2's form: nothing.
        await submit_batch(bot, view, "U4")
        await bot.idle()
        call = await store.get_call(quorum.split(":")[0])
        assert call is not None and call.voter_ids() == ["U2"]
        entries = await bot.audit()
    decided = [e for e in entries if e["kind"] == "decided"]
    assert [(e["user"], e["detail"]) for e in decided] == [("U2", "by batch")]
    votes = [e for e in entries if e["kind"] == "approval_vote"]
    assert [e["user"] for e in votes] == ["U2"]
    assert ledger.names() == []


def run_message(bot: BotHarness, channel: str) -> Message:
    runs = [m for m in bot.slack_api.top_level() if m.channel == channel]
    return [m for m in runs if "started agent" in m.all_text()][-1]


async def open_form(bot: BotHarness, user: str) -> dict[str, Any]:
    """`user` clicks Approve all on C1's run message; the form it opens."""
    opened = len(bot.slack_api.views)
    assert (await bot.click(run_message(bot, "C1"), BATCH_APPROVE, user=user)).status == 200
    await wait_until(lambda: len(bot.slack_api.views) > opened, what="the batch form")
    view: dict[str, Any] = bot.slack_api.views[-1]["view"]
    return view


async def test_only_those_who_may_see_a_card_open_what_lies_behind_it(redis_url: str) -> None:
    """Show all and Show conversation (#33 part 3) named with another channel's call id, from
    a channel the clicker is in: an outsider, an approver of the other channel, and someone of
    another workspace open nothing and record no `viewed` entry (the review report counts
    those); the call's own approver opens it, and that is recorded."""
    ledger = Ledger()
    agent, _ = ops_agent(steps(), ledger)
    async with BotHarness(redis_url, agent, POLICY) as bot:
        _, secret = await two_runs(bot)
        hidden = secret.button_value(APPROVE).split(":")[0]
        opened = len(bot.slack_api.views)
        cases = [("U4", None), ("U2", None), ("U6", "T0OTHER")]
        for (user, team), action in itertools.product(cases, (SHOW_ALL, SHOW_CONVERSATION)):
            sent = await bot.slack.click(action, hidden, user=user, channel="C1", team=team)
            assert sent.status == 200
        await bot.idle()
        assert len(bot.slack_api.views) == opened
        for user in ("U4", "U2", "U6"):
            told = bot.slack_api.ephemeral_to(user)
            assert told and all(SECRET_PATH not in t for t in told), (user, told)
        store = bot.runtime.service.store
        assert await store.redis.smembers(viewers_key(hidden)) == set()
        assert [e for e in await bot.audit() if e["kind"] == "viewed"] == []
        # The control: C9's approver opens the conversation, and it is recorded.
        await bot.slack.click(SHOW_CONVERSATION, hidden, user="U6", channel="C9")
        await wait_until(lambda: len(bot.slack_api.views) > opened, what="the conversation")
        assert SECRET_PATH in view_text(bot.slack_api.views[-1]["view"])
        await wait_until(
            lambda: bot.runtime.service.store.redis.smembers(viewers_key(hidden)),
            what="the view recorded",
        )


async def test_a_quorum_raised_after_a_card_was_posted_holds_for_it(
    redis_url: str, tmp_path: Path
) -> None:
    """The policy in force asks 2 approvals of calls posted when 1 sufficed: a click and Approve
    all each count as a vote, as they would on a call posted now; the second approver decides."""
    ledger = Ledger()
    agent, _ = ops_agent(
        delete_then_say(["/logs-x", "/logs-y"], "done"),
        ledger,
    )
    rule = "tools:\n  - name: logs\n    match: delete_logs\n"
    path = tmp_path / "policy.yml"
    path.write_text(POLICY.split("tools:")[0] + rule)
    source = PolicySource.from_file(path)
    async with BotHarness(redis_url, agent, source) as bot:
        await bot.slack.command("clean", user="U1", channel="C1")
        cards = await bot.wait_for_approvals(2)
        x, y = (card_of(cards, p).button_value(APPROVE) for p in ("/logs-x", "/logs-y"))
        path.write_text(POLICY.split("tools:")[0] + rule + "    required_approvals: 2\n")
        assert source.reload()
        await bot.click(card_of(cards, "/logs-x"), APPROVE, user="U2")
        await bot.idle()
        assert await status_of(bot, x) == CallStatus.PENDING
        view = await open_form(bot, "U2")
        shown = view_text(view)
        assert "you already approved it" in shown and "Will count as your vote" in shown, shown
        await submit_batch(bot, view, "U2")
        await bot.idle()
        assert await status_of(bot, y) == CallStatus.PENDING
        for card in cards:
            await bot.click(card, APPROVE, user="U3")
        await bot.wait_for_status("finished")
        votes = [e for e in await bot.audit() if e["kind"] == "approval_vote"]
    assert sorted(e["detail"] for e in votes) == ["1 of 2", "1 of 2, by batch"]
    assert ledger.names() == ["delete_logs", "delete_logs"]
