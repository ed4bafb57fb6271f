"""Nothing waits forever unseen (issue #10), the people's side: cancel a run, see where it
stands, list what waits for me, the App Home, and the requester's one message for a burst.

Signed HTTP into the real Bolt app, real Redis, the Slack Web API stand-in at the edge."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from typing import Any

import pytest

from bot import metrics
from bot.slack.blocks import APPROVE, CANCEL_RUN
from bot.slack.listeners.commands import STILL_WORKING_COMMAND
from bot.store import keys
from bot.store.records import CallRecord, RunRecord, Snapshot
from bot.testing.harness import BotHarness, status_line, wait_until
from bot.testing.slack_api import Message
from tests.agents_for_tests import (
    POLICY,
    Ledger,
    assistant_message,
    delete_then_say,
    function_call,
    ops_agent,
    slow_check,
)

RUN_ID_WORDS = "run `"

# U2 and U3 approve the channel's calls; only U4 approves restart_service.
POLICY_U4 = (
    POLICY
    + """
tools:
  - match: restart_service
    approvers: [U4]
"""
)


def run_id_of(message: Message) -> str:
    """The run id shown on a run message (`run <id>` in its status line)."""
    line = status_line(message)
    return line.split(RUN_ID_WORDS, 1)[1].split("`", 1)[0]


async def stored_run(bot: BotHarness, run_id: str) -> RunRecord:
    run = await bot.runtime.service.store.get_run(run_id)
    assert run is not None
    return run


async def stored_call(bot: BotHarness, approval_id: str) -> CallRecord:
    call = await bot.runtime.service.store.get_call(approval_id)
    assert call is not None
    return call


def ephemeral(sent: Any) -> str:
    body = sent.json()
    assert body["response_type"] == "ephemeral", body
    return str(body["text"]) + json.dumps(body.get("blocks") or [])


async def asked(bot: BotHarness, text: str, *, user: str, channel: str = "C1") -> str:
    """`/agent <text>` and its answer: the ack's or, when the answer came past the ack budget
    (a busy machine: the ack says it is still working), the one told privately then."""
    before = len(bot.slack_api.ephemeral)
    said = ephemeral(await bot.slack.command(text, user=user, channel=channel))
    if STILL_WORKING_COMMAND not in said:
        return said

    def told() -> list[str]:
        return [
            str(e.get("text", "")) + json.dumps(e.get("blocks") or [])
            for e in bot.slack_api.ephemeral[before:]
            if e.get("user") == user
        ]

    answers: list[str] = await wait_until(told, what=f"the answer to /agent {text}")
    return answers[0]


def one_call_agent(ledger: Ledger) -> Any:
    agent, _ = ops_agent(delete_then_say(), ledger)
    return agent


@pytest.mark.cluster_too
async def test_the_starter_cancels_from_the_command_and_twice_is_harmless(redis_url: str) -> None:
    ledger = Ledger()
    limits = {"user_open_runs": 1}
    async with BotHarness(redis_url, one_call_agent(ledger), POLICY, settings=limits) as bot:
        card = await bot.start_and_wait("clean", user="U1")
        approval_id = card.button_value(APPROVE)
        run_id = run_id_of(bot.run_message())
        assert CANCEL_RUN in bot.run_message().action_ids()
        # The open-run limit holds the paused run...
        refused = await asked(bot, "another", user="U1")
        assert "unfinished runs" in refused

        cancels = metrics.REGISTRY.get_sample_value("approval_bot_runs_cancelled_total") or 0
        sent = await asked(bot, f"cancel {run_id}", user="U1")
        assert f"Cancelled run `{run_id}` and its 1 pending call(s)." in sent
        await bot.wait_for_status("cancelled")
        await bot.idle()
        assert "cancelled by <@U1>" in status_line(bot.run_message())
        assert bot.run_message().action_ids() == []  # no Cancel button once ended
        assert card.action_ids() == []  # the card lost its buttons
        assert "Cancelled by <@U1>" in card.all_text()
        assert (await stored_run(bot, run_id)).status == "cancelled"
        assert (await stored_call(bot, approval_id)).status == "cancelled"
        audit = await bot.audit()
        assert [e["kind"] for e in audit].count("cancelled") == 2  # the run and its call
        assert any(e["kind"] == "cancelled" and e["user"] == "U1" for e in audit)

        again = await asked(bot, f"cancel {run_id}", user="U1")
        assert "already cancelled by <@U1>" in again
        counted = metrics.REGISTRY.get_sample_value("approval_bot_runs_cancelled_total")
        assert counted == cancels + 1
        # A click on the card after the cancel changes nothing and says why.
        await bot.slack.click(APPROVE, approval_id, user="U2", channel="C1", message_ts=card.ts)
        await wait_until(lambda: bot.slack_api.ephemeral_to("U2"), what="the late clicker told")
        assert "already cancelled" in bot.slack_api.ephemeral_to("U2")[-1]
        # ...and the cancelled run no longer counts towards it.
        admitted = await bot.slack.command("another", user="U1", channel="C1")
        # (No answer: started; past the ack budget, "still working" and nothing told after.)
        assert admitted.status == 200, admitted
        assert not admitted.text or STILL_WORKING_COMMAND in admitted.text, admitted
        await wait_until(lambda: len(bot.slack_api.top_level("C1")) == 3, what="new run")
        await bot.idle()
        assert [e["kind"] for e in await bot.audit()].count("cancelled") == 2
    assert ledger.executed == []


async def test_cancel_button_for_an_approver_and_not_for_an_outsider(redis_url: str) -> None:
    ledger = Ledger()
    async with BotHarness(redis_url, one_call_agent(ledger), POLICY) as bot:
        card = await bot.start_and_wait("clean", user="U1")
        run = bot.run_message()
        run_id = run_id_of(run)
        clicks = len(bot.slack_api.calls_to("chat.update"))

        sent = await bot.click(run, CANCEL_RUN, user="U9")
        assert sent.status == 200
        await wait_until(lambda: bot.slack_api.ephemeral_to("U9"), what="the outsider told")
        assert "Only the person who started this run" in bot.slack_api.ephemeral_to("U9")[-1]
        await bot.idle()
        assert (await stored_run(bot, run_id)).status == "paused"
        assert (await stored_call(bot, card.button_value(APPROVE))).status == "pending"
        assert len(bot.slack_api.calls_to("chat.update")) == clicks  # nothing changed
        assert card.action_ids() and CANCEL_RUN in bot.run_message().action_ids()
        refused = [e for e in await bot.audit() if e["kind"] == "refused"]
        assert refused and refused[-1]["decision"] == "cancel" and refused[-1]["user"] == "U9"

        await bot.click(run, CANCEL_RUN, user="U2")  # an approver in the channel
        await bot.wait_for_status("cancelled")
        await bot.idle()
        assert "cancelled by <@U2>" in status_line(bot.run_message())
        assert card.action_ids() == [] and "Cancelled by <@U2>" in card.all_text()
        assert bot.slack_api.ephemeral_to("U2") == []  # the run message says it

        await bot.slack.click(CANCEL_RUN, run_id, user="U3", channel="C1", message_ts=run.ts)
        await wait_until(lambda: bot.slack_api.ephemeral_to("U3"), what="U3 told")
        assert "already cancelled by <@U2>" in bot.slack_api.ephemeral_to("U3")[-1]
    assert ledger.executed == []


async def test_the_starter_cancels_with_the_button(redis_url: str) -> None:
    ledger = Ledger()
    async with BotHarness(redis_url, one_call_agent(ledger), POLICY) as bot:
        card = await bot.start_and_wait("clean", user="U1")
        await bot.click(bot.run_message(), CANCEL_RUN, user="U1")
        await bot.wait_for_status("cancelled")
        await bot.idle()
        assert "cancelled by <@U1>" in status_line(bot.run_message())
        assert card.action_ids() == []
        # The starter cancelled it: nobody needs to tell them.
        assert bot.slack_api.dms("U1") == []
    assert ledger.executed == []


async def test_cancel_while_running_stops_before_the_next_model_call(redis_url: str) -> None:
    ledger = Ledger()
    started, release = asyncio.Event(), asyncio.Event()

    agent, model = ops_agent(
        [
            [function_call("slow_check", {"host": "db1"}, call_id="s1")],
            [function_call("delete_logs", {"path": "/a"}, call_id="c1")],
            [assistant_message("never")],
        ],
        ledger,
        extra_tools=[slow_check(ledger, started, release)],
    )
    async with BotHarness(redis_url, agent, POLICY) as bot:
        await bot.slack.command("check then clean", user="U1", channel="C1")
        await asyncio.wait_for(started.wait(), 10)
        run_id = run_id_of(await bot.wait_for_status("running"))
        sent = await asked(bot, f"cancel {run_id}", user="U2")
        assert f"Cancelled run `{run_id}`" in sent
        release.set()  # the tool call in progress finishes...
        await bot.wait_for_status("cancelled")
        await bot.idle()
        await wait_until(lambda: ledger.executed, what="the tool to finish")
        assert ledger.names() == ["slow_check"]
        assert len(model.calls) == 1  # ...and no further model call was made
        assert model.remaining_steps == 2
        assert bot.slack_api.approval_messages() == []
        assert bot.run_thread() == []  # no result: the run did not finish
        assert (await stored_run(bot, run_id)).status == "cancelled"
        assert "cancelled by <@U2>" in status_line(bot.run_message())
        # The starter is told (someone else cancelled their run).
        await wait_until(lambda: bot.slack_api.dms("U1"), what="the starter's message")
        assert "cancelled by <@U2>" in bot.slack_api.dms("U1")[0].text


async def test_finished_unknown_and_bad_run_ids_get_clear_answers(redis_url: str) -> None:
    ledger = Ledger()
    agent, _ = ops_agent([[assistant_message("all good")]], ledger)
    async with BotHarness(redis_url, agent, POLICY) as bot:
        await bot.slack.command("hello", user="U1", channel="C1")
        run_id = run_id_of(await bot.wait_for_status("finished"))
        await bot.idle()
        finished = await asked(bot, f"cancel {run_id}", user="U1")
        assert "already finished; there is nothing left to cancel" in finished
        unknown = await asked(bot, "status 0123456789abcdef", user="U1")
        assert "There is no run `0123456789abcdef`" in unknown
        bad = await asked(bot, "cancel xyz!", user="U1")
        assert "`xyz!` is not a run id" in bad
        missing = await asked(bot, "status", user="U1")
        assert "Which run?" in missing
        await bot.idle()
        assert (await stored_run(bot, run_id)).status == "finished"
        # A task that merely starts with a command word still reaches the agent.
        await bot.slack.command("cancel the old cron jobs", user="U1", channel="C1")
        await wait_until(lambda: len(bot.slack_api.top_level("C1")) == 2, what="second run")


async def test_help_lists_every_command(redis_url: str) -> None:
    async with BotHarness(redis_url, one_call_agent(Ledger()), POLICY) as bot:
        text = await asked(bot, "help", user="U1")
    for usage in (
        "/agent <task>",
        "/agent run <agent> <task>",
        "/agent status <run id>",
        "/agent list",
        "/agent cancel <run id>",
        "/agent help",
    ):
        assert usage in text, usage


async def test_status_and_list_show_what_waits_for_whom(redis_url: str) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(
        [
            [
                function_call("delete_logs", {"path": "/a"}, call_id="c1"),
                function_call("restart_service", {"service": "web"}, call_id="c2"),
            ],
            [assistant_message("done")],
        ],
        ledger,
    )
    async with BotHarness(redis_url, agent, POLICY_U4) as bot:
        await bot.slack.command("clean and restart", user="U1", channel="C1")
        cards = await bot.wait_for_approvals(2)
        run_id = run_id_of(bot.run_message())
        by_tool = {
            ("delete_logs" if "delete_logs" in c.all_text() else "restart"): c for c in cards
        }

        status = await asked(bot, f"status {run_id}", user="U1")
        assert f"Run `{run_id}`" in status and "*ops*" in status and "<@U1>" in status
        assert "waiting for 2 approvals" in status
        run_link = f"/archives/C1/p{bot.run_message().ts.replace('.', '')}"
        assert run_link in status
        for card in cards:
            assert f"/archives/C1/p{card.ts.replace('.', '')}" in status
        outsider = await asked(bot, f"status {run_id}", user="U9")
        assert "Only the person who started this run" in outsider and run_link not in outsider

        def mine(text: str) -> str:
            return text.split("Unfinished runs in this channel")[0]

        u2 = await asked(bot, "list", user="U2")
        assert "delete_logs" in mine(u2) and "restart_service" not in mine(u2)
        assert run_id in u2.split("Unfinished runs in this channel")[1]
        u4 = await asked(bot, "list", user="U4")
        assert "restart_service" in mine(u4) and "delete_logs" not in mine(u4)
        u1 = await asked(bot, "list", user="U1")
        assert "Waiting for your decision:* nothing" in u1  # no self-approval here
        assert run_id in u1

        await bot.click(by_tool["delete_logs"], APPROVE, user="U2")
        await bot.idle()
        u2 = await asked(bot, "list", user="U2")
        assert "Waiting for your decision:* nothing" in u2  # decided: no longer waits for U2
        await bot.click(by_tool["restart"], APPROVE, user="U4")
        await bot.wait_for_status("finished")
        await bot.idle()
        done = await asked(bot, "list", user="U4")
        assert "Unfinished runs in this channel:* none" in done


def home_click(bot: BotHarness, action_id: str, value: str, user: str) -> dict[str, Any]:
    """A click on a button of the App Home: no channel, a `view` container."""
    payload = bot.slack.click_payload(action_id, value, user=user, channel="")
    del payload["channel"], payload["message"]
    payload["container"] = {"type": "view", "view_id": f"VH{user}"}
    payload["view"] = {"id": f"VH{user}", "type": "home", "team_id": bot.slack_api.team_id}
    return payload


async def test_app_home_shows_my_calls_and_a_decision_from_it(redis_url: str) -> None:
    ledger = Ledger()
    async with BotHarness(redis_url, one_call_agent(ledger), POLICY) as bot:
        card = await bot.start_and_wait("clean", user="U1")
        approval_id = card.button_value(APPROVE)

        for user in ("U2", "U1"):
            event = {"type": "app_home_opened", "user": user, "channel": f"D{user}", "tab": "home"}
            sent = await bot.slack.send_json(bot.slack.event_payload(event))
            assert sent.status == 200
        await wait_until(lambda: {"U1", "U2"} <= set(bot.slack_api.home_views), what="Homes")
        home = Message("home", "", "", bot.slack_api.home_views["U2"]["blocks"])
        assert home.button_value(APPROVE) == approval_id  # the card's own button
        assert "delete_logs" in home.all_text()
        starter = Message("home", "", "", bot.slack_api.home_views["U1"]["blocks"])
        assert starter.action_ids() == []  # U1 may not approve their own run
        assert run_id_of(bot.run_message()) in starter.all_text()  # their recent run

        # An outsider's click from the Home: refused, told by direct message.
        await bot.slack.send_interaction(home_click(bot, APPROVE, approval_id, "U9"))
        await wait_until(lambda: bot.slack_api.dms("U9"), what="the outsider's DM")
        assert "not among the approvers" in bot.slack_api.dms("U9")[0].text
        assert (await stored_call(bot, approval_id)).status == "pending"

        sent = await bot.slack.send_interaction(home_click(bot, APPROVE, approval_id, "U2"))
        assert sent.status == 200
        await bot.wait_for_status("finished")
        await bot.idle()
        assert "Approved by <@U2>" in card.all_text()

        def refreshed() -> bool:
            view = Message("home", "", "", bot.slack_api.home_views["U2"]["blocks"])
            return "Nothing is waiting for your decision" in view.all_text()

        await wait_until(refreshed, what="U2's Home without the decided call")
        await wait_until(
            lambda: "finished" in json.dumps(bot.slack_api.home_views["U1"]),
            what="U1's Home showing the finished run",
        )
    assert ledger.names() == ["delete_logs"]


async def test_home_publishes_are_coalesced_per_person(redis_url: str) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(
        [
            [function_call("delete_logs", {"path": f"/{n}"}, call_id=f"c{n}") for n in range(4)],
            [assistant_message("ok")],
        ],
        ledger,
    )

    def buttons() -> int:
        view = bot.slack_api.home_views.get("U3")
        return Message("home", "", "", view["blocks"]).action_ids().count(APPROVE) if view else -1

    interval = 2.0
    settings = {"home_refresh_seconds": interval}
    async with BotHarness(redis_url, agent, POLICY, settings=settings) as bot:
        event = {"type": "app_home_opened", "user": "U3", "channel": "DU3", "tab": "home"}
        await bot.slack.send_json(bot.slack.event_payload(event))
        await bot.slack.command("clean", user="U1", channel="C1")
        cards = await bot.wait_for_approvals(4)
        await wait_until(lambda: buttons() == 4, what="U3's Home with the four calls")
        before = bot.slack_api.home_publishes["U3"]
        began = time.monotonic()
        for card in cards:  # four decisions within 1.5 s, each a change to U3's Home
            await bot.click(card, APPROVE, user="U2")
            await asyncio.sleep(0.4)
        # At most one publish an interval: over the burst, and one after it. A loaded machine
        # spreads the clicks (what the stopwatch saw pass bounds the burst from above).
        most = 2 + int((time.monotonic() - began) // interval)
        await bot.wait_for_status("finished")
        await wait_until(lambda: buttons() == 0, what="U3's Home without the calls")
        # Any publish still coming is on the index (due within the interval): wait it out.
        await bot.idle()
        await wait_until(bot.runtime.home.idle, timeout=30, what="no App Home due")
        after = bot.slack_api.home_publishes["U3"]
    assert 1 <= after - before <= most, (before, after, most)  # 2 on a quiet machine, not 4


async def test_the_requester_gets_one_message_for_a_burst(redis_url: str) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(
        [
            [
                function_call("delete_logs", {"path": "/a"}, call_id="c1"),
                function_call("delete_logs", {"path": "/b"}, call_id="c2"),
                function_call("restart_service", {"service": "web"}, call_id="c3"),
            ],
            [assistant_message("done")],
        ],
        ledger,
    )
    window = 3.0
    settings = {"requester_notice_seconds": window}
    async with BotHarness(redis_url, agent, POLICY, settings=settings) as bot:
        await bot.slack.command("clean", user="U1", channel="C1")
        cards = await bot.wait_for_approvals(3)
        run_id = run_id_of(bot.run_message())
        restart = next(c for c in cards if "restart_service" in c.all_text())
        began = time.monotonic()
        for card in cards:  # a burst: three decisions over about a second
            if card is restart:
                await bot.reject(restart, user="U3", reason="not <!here> now")
            else:
                await bot.click(card, APPROVE, user="U2")
            await asyncio.sleep(0.4)
        burst = time.monotonic() - began  # from above: a loaded machine spreads the clicks
        await bot.wait_for_status("finished")
        await bot.idle()
        await wait_until(
            lambda: any("finished" in m.text for m in bot.slack_api.dms("U1")),
            what="the starter told that the run finished",
        )
        await bot.idle()  # a notice still to come would be in the outbox
        dms = sorted(bot.slack_api.dms("U1"), key=lambda m: m.ts)
        # The three decisions are one message; the run's end comes with them when it falls
        # within the same window (as it usually does), else in one more. (A burst a loaded
        # machine spread past the window is told in a message a window, each decision once.)
        first, told = dms[0].text, "\n".join(m.text for m in dms)
        assert f"Your run `{run_id}`" in first
        if burst < window:
            assert first.count("Approved by <@U2>") == 2
            assert "Rejected by <@U3>:\n>not &lt;!here&gt; now" in first
        assert told.count("Approved by <@U2>") == 2 and told.count("Rejected by <@U3>") == 1
        assert "Rejected by <@U3>:\n>not &lt;!here&gt; now" in told
        most = 2 + int(burst // window)
        assert len(dms) <= most and "finished" in dms[-1].text, [m.text for m in dms]
        assert bot.slack_api.calls_to("conversations.open")[-1].params["users"] == "U1"
        assert bot.slack_api.dms("U2") == [] and bot.slack_api.dms("U3") == []


@pytest.mark.cluster_too  # the notice's pipelined scripts, across the nodes (#32)
async def test_the_requester_message_can_be_an_ephemeral(redis_url: str) -> None:
    ledger = Ledger()
    settings = {"requester_notice": "ephemeral"}
    async with BotHarness(redis_url, one_call_agent(ledger), POLICY, settings=settings) as bot:
        card = await bot.start_and_wait("clean", user="U1")
        await bot.reject(card, user="U2", reason="no")
        await bot.wait_for_status("finished")
        await bot.idle()
        await wait_until(lambda: bot.slack_api.ephemeral_to("U1"), what="the starter told")
        told = bot.slack_api.ephemeral_to("U1")
        assert len(told) == 1 and "Rejected by <@U2>:\n>no" in told[0]
        assert bot.slack_api.dms("U1") == []


@pytest.mark.cluster_too
async def test_a_click_racing_a_cancel_resolves_once(redis_url: str) -> None:
    ledger = Ledger()
    async with BotHarness(redis_url, one_call_agent(ledger), POLICY) as bot:
        card = await bot.start_and_wait("clean", user="U1")
        approval_id = card.button_value(APPROVE)
        run_id = run_id_of(bot.run_message())
        store = bot.runtime.service.store
        owner = f"race:{secrets.token_hex(4)}"
        decided, cancelled = await asyncio.gather(
            store.decide(
                approval_id,
                approve=True,
                always=False,
                team="T0TEST",
                user="U2",
                reason="",
                owner=owner,
            ),
            store.cancel(run_id, team="T0TEST", user="U3"),
        )
        call = await stored_call(bot, approval_id)
        assert cancelled.outcome == "ok"
        if type(decided).__name__ == "Decided":
            assert call.status == "approved" and cancelled.calls == ()
        else:
            assert call.status == "cancelled" and cancelled.calls == (call.approval_id,)
        assert (await stored_run(bot, run_id)).status == "cancelled"
        # The resume the decision would have started: a worker takes it and runs nothing.
        await bot.runtime.queue.enqueue("resume", run_id, owner)
        await bot.idle()
        assert ledger.executed == []
        assert (await stored_run(bot, run_id)).status == "cancelled"


@pytest.mark.cluster_too  # the notice's pipelined scripts, across the nodes (#32)
async def test_the_direct_message_channel_is_opened_once_per_person(redis_url: str) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(
        [[function_call("delete_logs", {"path": "/a"}, call_id="c1")], [assistant_message("a")],
         [function_call("delete_logs", {"path": "/b"}, call_id="c2")], [assistant_message("b")]],
        ledger,
    )  # fmt: skip
    settings = {"requester_notice_seconds": 0.2}
    async with BotHarness(redis_url, agent, POLICY, settings=settings) as bot:
        for told in (1, 2):  # two runs of U1, each decided by U2: two messages to U1
            card = await bot.start_and_wait(f"clean {told}", user="U1")
            await bot.reject(card, user="U2", reason="no")
            await bot.wait_for_status("finished")
            await wait_until(lambda n=told: len(bot.slack_api.dms("U1")) == n, what="a DM")  # type: ignore[misc]
        assert len(bot.slack_api.calls_to("conversations.open")) == 1


async def test_news_listed_while_the_notice_is_told_is_told_after_the_pass(
    redis_url: str,
) -> None:
    """A pass that tells a person's notice records it told with its end (#32); a run whose news
    was listed meanwhile (its pass indexed the person's notice, held by the telling pass) is
    told right after that pass, which still holds the notice; each run's `notice` mark (what
    keeps its news until told) is dropped once its news is told."""
    ledger = Ledger()
    agent, _ = ops_agent(
        [[function_call("delete_logs", {"path": "/a"}, call_id="c1")],
         [function_call("delete_logs", {"path": "/b"}, call_id="c2")],
         [assistant_message("a")], [assistant_message("b")]],
        ledger,
    )  # fmt: skip
    settings = {"requester_notice_seconds": 0.2}
    async with BotHarness(redis_url, agent, POLICY, settings=settings) as bot:
        first = await bot.start_and_wait("clean 1", user="U1")
        await bot.slack.command("clean 2", user="U1", channel="C1")
        [second] = [c for c in await bot.wait_for_approvals(2) if c.ts != first.ts]
        run_ids = [keys.run_of(c.button_value(APPROVE)) or "" for c in (first, second)]
        # The first notice's post hangs, its pass holding U1's notice meanwhile.
        bot.slack_api.hang("chat.postMessage", when=lambda p: str(p.get("channel")).startswith("D"))
        await bot.reject(first, user="U2", reason="no")
        await wait_until(lambda: bot.slack_api.hanging >= 1, what="the first notice to hang")
        await bot.reject(second, user="U2", reason="not now")
        client = bot.runtime.service.store.redis

        async def listed() -> bool:
            marks = await client.hgetall(keys.outbox_key(run_ids[1]))
            found = await client.zscore(keys.notice_runs_key("T0TEST:U1"), run_ids[1])
            return found is not None and b"notice" in marks and b"card:" not in b"".join(marks)

        await wait_until(listed, what="the second run listed, its own pass done")
        assert await client.zscore(keys.OUTBOX_INDEX, keys.notice_entry("T0TEST:U1"))
        assert len(bot.slack_api.dms("U1")) == 0
        bot.slack_api.release()
        told = await wait_until(
            lambda: (dms := bot.slack_api.dms("U1")) and len(dms) == 2 and dms,
            what="U1 told of both runs",
        )
        await bot.idle()
        texts = [m.text for m in sorted(told, key=lambda m: m.ts)]
        assert f"`{run_ids[0]}`" in texts[0] and f"`{run_ids[1]}`" in texts[1], texts
        assert len(bot.slack_api.dms("U1")) == 2
        for run_id in run_ids:
            assert b"notice" not in await client.hgetall(keys.outbox_key(run_id))


async def test_a_burst_over_several_runs_is_one_message_to_their_starter(redis_url: str) -> None:
    """Three runs of U1, each paused on a call; U2 approves the three at once: U1 gets one
    direct message telling all three runs, not one each (#17, item 4)."""
    ledger = Ledger()
    agent, _ = ops_agent(
        [
            *([function_call("delete_logs", {"path": f"/{n}"}, call_id=f"c{n}")] for n in range(3)),
            *([assistant_message(f"done {n}")] for n in range(3)),
        ],
        ledger,
    )
    settings = {"requester_notice_seconds": 2.0}
    async with BotHarness(redis_url, agent, POLICY, settings=settings) as bot:
        for n in range(3):
            await bot.slack.command(f"clean {n}", user="U1", channel="C1")
            await bot.wait_for_approvals(n + 1)
        cards = [m for m in bot.slack_api.approval_messages() if m.action_ids()]
        run_ids = {
            run_id_of(m) for m in bot.slack_api.top_level() if "started agent" in m.all_text()
        }
        assert len(cards) == 3 and len(run_ids) == 3
        await asyncio.gather(*(bot.click(card, APPROVE, user="U2") for card in cards))
        await wait_until(lambda: len(ledger.executed) == 3, what="the three tools")
        await bot.idle()
        await wait_until(
            lambda: all(
                any(f"Your run `{r}`" in m.text for m in bot.slack_api.dms("U1")) for r in run_ids
            ),
            what="U1 told of the three runs",
        )
        await bot.idle()
        dms = sorted(bot.slack_api.dms("U1"), key=lambda m: m.ts)
        # The three decisions are one message (one per run before); the runs' ends come with
        # them when they fall within the same window (as they usually do), else in one more.
        assert len(dms) <= 2, [m.text for m in dms]
        assert dms[0].text.count("Approved by <@U2>") == 3, dms[0].text
        assert all(f"Your run `{r}`" in dms[0].text for r in run_ids)


@pytest.mark.cluster_too  # the notice's entry and listing, across the nodes (#32)
async def test_a_burst_over_several_runs_is_one_notice_pass_not_one_a_run(
    redis_url: str,
) -> None:
    """Four runs of U1, each paused on a call; U2 decides the four at once. Once every run has
    finished and shown it, what is left to deliver is U1's one notice (the outbox entry
    `@<person>`, #32: one projector pass tells a person all their runs with news), not a
    pass a run (each run due for its own notice, before). The runs' `notice` marks keep their
    news until that pass has told it; when it comes, one message tells all four runs and
    their marks are dropped."""
    ledger = Ledger()
    n = 4
    agent, _ = ops_agent(
        [
            *([function_call("delete_logs", {"path": f"/{i}"}, call_id=f"c{i}")] for i in range(n)),
            *([assistant_message(f"done {i}")] for i in range(n)),
        ],
        ledger,
    )
    settings = {"requester_notice_seconds": 600.0}  # (made due below, not waited out)
    async with BotHarness(redis_url, agent, POLICY, settings=settings) as bot:
        for i in range(n):
            await bot.slack.command(f"clean {i}", user="U1", channel="C1")
            await bot.wait_for_approvals(i + 1)
        cards = [m for m in bot.slack_api.approval_messages() if m.action_ids()]
        run_ids = {keys.run_of(c.button_value(APPROVE)) or "" for c in cards}
        assert len(run_ids) == n
        await asyncio.gather(*(bot.click(card, APPROVE, user="U2") for card in cards))
        client = bot.runtime.service.store.redis
        entry = keys.notice_entry("T0TEST:U1")

        async def shown() -> bool:  # every run finished, and nothing but its notice marked
            for run_id in run_ids:
                run = await stored_run(bot, run_id)
                marks = {
                    m.decode()
                    for m in await client.hkeys(keys.outbox_key(run_id))  # type: ignore[misc]
                }
                if run.status != "finished" or marks != {"notice", "notice@"}:
                    return False
            return await client.zscore(keys.OUTBOX_INDEX, entry) is not None

        async def settled() -> set[str] | None:  # no run's pass still in hand or due
            due = {m.decode() for m in await client.zrange(keys.OUTBOX_INDEX, 0, -1)}
            return due if due == {entry} else None

        await wait_until(shown, what="the runs finished and shown, their notice to come")
        # A run may stay indexed a moment longer for a pass of its own (seen once on a loaded
        # machine, its marks already let go); once those end, only the notice is due: not
        # one entry a run.
        await wait_until(settled, what="only U1's notice due, no run's entry")
        listed = await client.zrange(keys.notice_runs_key("T0TEST:U1"), 0, -1)
        assert {m.decode() for m in listed} == run_ids
        assert bot.slack_api.dms("U1") == []
        await client.zadd(keys.OUTBOX_INDEX, {entry: 0})  # its window over
        told = await wait_until(lambda: bot.slack_api.dms("U1"), what="U1 told")
        await bot.idle()
        assert len(bot.slack_api.dms("U1")) == 1
        assert told[0].text.count("Approved by <@U2>") == n, told[0].text
        assert all(f"Your run `{r}`" in told[0].text for r in run_ids)
        for run_id in run_ids:
            assert not await client.hkeys(keys.outbox_key(run_id))  # type: ignore[misc]
        assert not await client.zrange(keys.notice_runs_key("T0TEST:U1"), 0, -1)


@pytest.mark.cluster_too
async def test_a_pause_saved_between_the_read_and_the_cancel_is_cancelled_too(
    redis_url: str,
) -> None:
    """The cancel read the run (its pause: call A); before its script runs, A is decided and
    the resume saves a new pause (call B). The script reads the pause itself: B is cancelled,
    no pending call is left under a cancelled run."""
    ledger = Ledger()
    async with BotHarness(redis_url, one_call_agent(ledger), POLICY) as bot:
        card = await bot.start_and_wait("clean", user="U1")
        first = card.button_value(APPROVE)
        run_id = run_id_of(bot.run_message())
        store = bot.runtime.service.store
        read = await stored_run(bot, run_id)  # what the cancel read
        assert read.call_ids() == [first]
        # Meanwhile: A is decided, and the resume that owns the run saves its next pause.
        owner = f"race:{secrets.token_hex(4)}"
        decided = await store.decide(
            first, approve=True, always=False, team="T0TEST", user="U2", reason="", owner=owner
        )
        assert type(decided).__name__ == "Decided"
        second = keys.new_approval_id(run_id)
        call = CallRecord(
            approval_id=second, run_id=run_id, index=0, call_id="c2", agent="ops",
            tool="delete_logs", kind="function", sticky="ops::delete_logs",
            arguments='{"path": "/b"}', paused_at=time.time(),
        )  # fmt: skip
        await store.save_pause(run_id, owner, Snapshot(b"x", "0", "f"), [call], time.time())
        assert (await stored_run(bot, run_id)).status == "paused"

        cancelled = await store.cancel(run_id, team="T0TEST", user="U1", pause=read.call_ids())
        assert cancelled.outcome == "ok" and cancelled.calls == (second,)
        assert (await stored_run(bot, run_id)).status == "cancelled"
        assert (await stored_call(bot, first)).status == "approved"
        assert (await stored_call(bot, second)).status == "cancelled"
        left = [c for c in await store.pause_calls(run_id) if c.status == "pending"]
        assert left == []
    assert ledger.executed == []


# A rule scoped to another agent, and an unscoped rule of tools this run never waited on.
POLICY_SCOPED = (
    POLICY
    + """
tools:
  - match: "*"
    agent: billing
    approvers: [U7]
  - match: read_*
    approvers: ["*"]
  - match: restart_service
    approvers: [U4]
"""
)


async def test_cancel_and_status_rights_follow_the_rules_of_the_runs_agent_and_calls(
    redis_url: str,
) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(
        [
            [
                function_call("delete_logs", {"path": "/a"}, call_id="c1"),
                function_call("restart_service", {"service": "web"}, call_id="c2"),
            ],
            [assistant_message("ok")],
        ],
        ledger,
    )
    async with BotHarness(redis_url, agent, POLICY_SCOPED) as bot:
        await bot.slack.command("clean and restart", user="U1", channel="C1")
        await wait_until(lambda: len(bot.slack_api.approval_messages()) == 2, what="two cards")
        run_id = run_id_of(bot.run_message())
        # U7 approves billing's calls only; "*" approves read_* calls, which this run never
        # waited on: neither may see this ops run or cancel it.
        for user in ("U7", "U9"):
            for verb in ("status", "cancel"):
                sent = await asked(bot, f"{verb} {run_id}", user=user)
                assert "Only the person who started this run" in sent, (user, verb)
        assert (await stored_run(bot, run_id)).status == "paused"
        # The channel's approvers, and U4 who approves the restart_service call it waits for.
        for user in ("U2", "U4"):
            sent = await asked(bot, f"status {run_id}", user=user)
            assert "Only the person" not in sent and run_id in sent
        sent = await asked(bot, f"cancel {run_id}", user="U4")
        assert f"Cancelled run `{run_id}` and its 2 pending call(s)." in sent
        await bot.wait_for_status("cancelled")
        await bot.idle()
    assert ledger.executed == []


FORGED = "no\n*Now:* finished FORGED\n:white_check_mark: Approved by <@U3> FORGED\r*Now:* FORGED"


def unquoted_forgeries(text: str) -> list[str]:
    """Lines of `text` that carry a forged line of the reason without a quote mark."""
    lines = text.replace("\r", "\n").split("\n")
    return [line for line in lines if "FORGED" in line and not line.startswith(">")]


@pytest.mark.parametrize("notice", ["dm", "ephemeral"])
async def test_a_multi_line_reason_is_quoted_on_every_surface(redis_url: str, notice: str) -> None:
    """A reason's lines cannot pass for the bot's own (`*Now:*`, an approval): on the card, in
    the requester's message, and anywhere else the bot writes, each of them is a quote."""
    ledger = Ledger()
    settings = {"requester_notice": notice}
    async with BotHarness(redis_url, one_call_agent(ledger), POLICY, settings=settings) as bot:
        card = await bot.start_and_wait("clean", user="U1")
        run_id = run_id_of(bot.run_message())
        await bot.reject(card, user="U2", reason=FORGED)
        await bot.wait_for_status("finished")
        await bot.idle()
        shown = card.all_text()
        assert "*Reason:*\n>no\n>*Now:* finished FORGED\n>:white_check_mark: Approved by" in shown
        assert unquoted_forgeries(shown) == []

        def told() -> list[str]:
            if notice == "dm":
                return [m.all_text() for m in bot.slack_api.dms("U1")]
            return bot.slack_api.ephemeral_to("U1")

        [message] = await wait_until(told, what="the requester's message")
        assert "Rejected by <@U2>:\n>no\n>*Now:* finished FORGED" in message, message
        assert unquoted_forgeries(message) == []
        assert message.count("*Now:*") == 3  # the bot's own, and the two quoted ones

        # Status, the App Home, the run's thread: whatever shows the reason quotes it.
        status = await bot.slack.command(f"status {run_id}", user="U1", channel="C1")
        event = {"type": "app_home_opened", "user": "U1", "channel": "DU1", "tab": "home"}
        assert (await bot.slack.send_json(bot.slack.event_payload(event))).status == 200
        await wait_until(lambda: "U1" in bot.slack_api.home_views, what="the Home")
        await bot.idle()
        home = Message("home", "", "", bot.slack_api.home_views["U1"]["blocks"])
        status_body = status.json()
        everything = [Message("C1", "", status_body["text"], status_body["blocks"]).all_text()]
        everything += [home.all_text()]
        everything += [m.all_text() for m in bot.slack_api.messages.values()]
        everything += [Message("", "", str(e.get("text", "")), e.get("blocks") or []).all_text()
                       for e in bot.slack_api.ephemeral]  # fmt: skip
        for text in everything:
            assert unquoted_forgeries(text) == [], text
    assert ledger.executed == []
