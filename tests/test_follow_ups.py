"""Talking to a run (#20): a reply in a run's thread is a follow-up to its agent. Through signed
HTTP, real Redis and the Slack stand-in: the next turn sees the whole conversation, goes
through the same approvals, waits its turn while the run is busy, survives a restart between
turns, and is refused (privately) to someone the policy does not let continue the run."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from agents import Agent

from bot.slack.answer_parts import split_answer
from bot.slack.blocks import APPROVE
from bot.testing.harness import BotHarness, status_line, wait_until
from bot.testing.models import SlowWriter
from bot.testing.slack_api import FakeSlackAPI, Message
from tests.agents_for_tests import (
    POLICY,
    Ledger,
    assistant_message,
    function_call,
    ops_agent,
    slow_check,
)


def in_thread(bot: BotHarness, words: str) -> list[Message]:
    """The messages in the run's thread saying `words` (none while there is no run message)."""
    runs = [m for m in bot.slack_api.top_level() if "started agent" in m.all_text()]
    if not runs:
        return []
    return [m for m in bot.slack_api.thread(runs[-1].channel, runs[-1].ts) if words in m.all_text()]


async def status_of(bot: BotHarness, run_id: str) -> str:
    """What `/agent status <run id>` tells its starter (privately)."""
    body = (await bot.slack.command(f"status {run_id}", user="U1", channel="C1")).json()
    return str(body["text"]) + json.dumps(body.get("blocks") or [])


async def say(bot: BotHarness, text: str, *, user: str = "U1") -> None:
    run = bot.run_message()
    sent = await bot.slack.thread_reply(text, user=user, channel=run.channel, thread_ts=run.ts)
    assert sent.status == 200


async def test_a_follow_up_continues_the_conversation(redis_url: str) -> None:
    ledger = Ledger()
    agent, model = ops_agent(
        [[assistant_message("The answer is 42.")], [assistant_message("It was 42, as I said.")]],
        ledger,
    )
    async with BotHarness(redis_url, agent, POLICY) as bot:
        await bot.slack.command("what is the answer?", user="U1", channel="C1")
        await bot.wait_for_status("finished")
        await wait_until(lambda: in_thread(bot, "The answer is 42."), what="the first answer")
        await say(bot, "remind me: what was it?")
        await wait_until(lambda: in_thread(bot, "It was 42, as I said."), what="the second")
        await bot.wait_for_status("finished")
        await bot.idle()
        # The first answer is still its own message; the second is a new one.
        assert len(in_thread(bot, "The answer is 42.")) == 1
    seen = json.dumps(model.calls[1].input)
    assert "what is the answer?" in seen and "The answer is 42." in seen
    assert "remind me: what was it?" in seen
    audit = await bot.audit()
    assert [(e["detail"], e["text"]) for e in audit if e["kind"] == "turn_started"] == [
        ("turn 2", "remind me: what was it?")
    ]


FOLLOWERS = POLICY.replace('    starters: ["*"]\n', '    starters: ["*"]\n    followers: [U4]\n')


async def test_a_follow_up_by_someone_not_allowed_is_refused_privately(redis_url: str) -> None:
    ledger = Ledger()
    agent, model = ops_agent(
        [[assistant_message("Done.")], [assistant_message("Sure, U4.")]], ledger
    )
    async with BotHarness(redis_url, agent, FOLLOWERS) as bot:
        await bot.slack.command("tidy up", user="U1", channel="C1")
        await bot.wait_for_status("finished")
        await wait_until(lambda: in_thread(bot, "Done."), what="the answer")
        await say(bot, "and now delete everything", user="U5")
        refused = await wait_until(
            lambda: bot.slack_api.ephemeral_to("U5"), what="U5 told privately"
        )
        assert "Only <@U1> (who started this run) and the people the policy names" in refused[0]
        await bot.idle()
        assert len(model.calls) == 1  # the agent never heard it
        await say(bot, "thanks, one more thing", user="U4")  # a follower the policy names
        await wait_until(lambda: in_thread(bot, "Sure, U4."), what="U4's turn")
    audit = await bot.audit()
    assert [e["kind"] for e in audit].count("follow_up_refused") == 1


PRIVATE_FOLLOWERS = """
channels:
  G1:
    starters: [U1]
    followers: ["*"]
    approvers: [U2, U3]
"""


async def test_followers_anyone_in_a_private_channel_means_its_members(redis_url: str) -> None:
    """`followers: ["*"]` is anyone in the channel, as it is for approvers (#29, item 11): a
    non-member's reply in a private channel's run thread is refused with a sentence, and the
    agent never hears it; a member's is taken up."""
    agent, model = ops_agent(
        [[assistant_message("Done.")], [assistant_message("Sure, U2.")]], Ledger()
    )
    async with BotHarness(redis_url, agent, PRIVATE_FOLLOWERS) as bot:
        bot.slack_api.channel_members["G1"] = ["U1", "U2"]
        await bot.slack.command("tidy up", user="U1", channel="G1")
        await wait_until(lambda: in_thread(bot, "Done."), what="the answer")
        await say(bot, "and now delete everything", user="U9")
        refused = await wait_until(lambda: bot.slack_api.ephemeral_to("U9"), what="U9 told")
        assert (
            "Only <@U1> (who started this run) and the members of this channel may continue it"
            in refused[0]
        )
        await bot.idle()
        assert len(model.calls) == 1  # the agent never heard it
        await say(bot, "thanks, one more thing", user="U2")  # a member
        await wait_until(lambda: in_thread(bot, "Sure, U2."), what="U2's turn")
    audit = await bot.audit()
    assert [e["user"] for e in audit if e["kind"] == "follow_up_refused"] == ["U9"]


async def test_a_follow_up_while_the_run_waits_is_queued_then_run(redis_url: str) -> None:
    ledger = Ledger()
    agent, model = ops_agent(
        [
            [function_call("restart_service", {"service": "api"}, call_id="c1")],
            [assistant_message("Restarted api.")],
            [assistant_message("The database is fine too.")],
        ],
        ledger,
    )
    async with BotHarness(redis_url, agent, POLICY) as bot:
        card = await bot.start_and_wait("restart api", user="U1")
        await say(bot, "then check the database")
        queued = await wait_until(lambda: bot.slack_api.ephemeral_to("U1"), what="U1 told")
        assert "it takes this up when that turn ends" in queued[0]
        assert len(model.calls) == 1
        run_id = status_line(bot.run_message()).split("run `", 1)[1].split("`", 1)[0]
        waiting = await status_of(bot, run_id)
        assert "waiting: <@U1>" in waiting and "then check the database" in waiting
        await bot.click(card, APPROVE, user="U2")
        await wait_until(lambda: in_thread(bot, "The database is fine too."), what="turn 2")
        await bot.wait_for_status("finished")
        await bot.idle()
        assert in_thread(bot, "Restarted api.")  # turn 1's answer, shown before turn 2 began
        assert "turn 2  ·  reply in the thread to continue" in status_line(bot.run_message())
        answered = await status_of(bot, run_id)
        assert "turn 2, <@U1>" in answered and "(answered)" in answered
    assert ledger.names() == ["restart_service"]
    assert "then check the database" in json.dumps(model.calls[2].input)


async def test_a_follow_up_turn_goes_through_approval(redis_url: str) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(
        [
            [assistant_message("Logs look noisy.")],
            [function_call("delete_logs", {"path": "/var/log/noisy"}, call_id="c2")],
            [assistant_message("Deleted them.")],
        ],
        ledger,
    )
    async with BotHarness(redis_url, agent, POLICY) as bot:
        await bot.slack.command("look at the logs", user="U1", channel="C1")
        await wait_until(lambda: in_thread(bot, "Logs look noisy."), what="the first answer")
        await say(bot, "delete the noisy ones")
        [card] = await bot.wait_for_approvals(1)
        assert "delete_logs" in card.all_text()
        assert ledger.executed == []
        # The turn's own message in the thread says it waits, and links the request.
        [turn] = await wait_until(
            lambda: in_thread(bot, "waiting for 1 approval_: <"), what="turn 2 says it waits"
        )
        assert card.ts.replace(".", "") in turn.all_text()  # the link to the card
        # And the thread's status line (assistant.threads.setStatus) said the same (until
        # the turn's message, a post in the thread, cleared it as Slack does).
        run = bot.run_message()
        slack = bot.slack_api
        await wait_until(
            lambda: "is waiting for 1 approval" in slack.statuses.get((run.channel, run.ts), []),
            what="the thread's status line",
        )
        await bot.click(card, APPROVE, user="U2")
        await wait_until(lambda: in_thread(bot, "Deleted them."), what="turn 2's answer")
        await bot.wait_for_status("finished")
        await bot.idle()
        assert slack.status_of(run.channel, run.ts) == ""  # cleared: the answer is there
        said = [s for s in slack.statuses[(run.channel, run.ts)] if s]
        assert said[0] == "is working on it…" and "is waiting for 1 approval" in said
        # One message for the turn: what it did, then its answer in the same place.
        [answer] = in_thread(bot, "Deleted them.")
        assert answer.ts == turn.ts and "waiting" not in answer.all_text()
        posts = bot.slack_api.calls_to("chat.postMessage")
        assert [target(c) for c in posts if target(c).startswith("result:2")] == ["result:2"]
    assert ledger.executed == [("delete_logs", {"path": "/var/log/noisy"})]


async def test_a_follow_up_turn_leaves_no_status_line_under_the_thread(redis_url: str) -> None:
    """A follow-up turn's answer is written into the turn's message (an update, which does not
    clear the thread's status line as a post does): the line set while the turn worked, after
    its message was posted, is cleared by the bot when the run ends."""
    ledger = Ledger()
    started, release = asyncio.Event(), asyncio.Event()
    agent, _ = ops_agent(
        [
            [assistant_message("Logs look noisy.")],
            [function_call("delete_logs", {"path": "/var/log/noisy"}, call_id="c2")],
            [function_call("slow_check", {"host": "web-1"}, call_id="c3")],
            [assistant_message("Deleted them; web-1 is fine.")],
        ],
        ledger,
        extra_tools=[slow_check(ledger, started, release)],
    )
    async with BotHarness(redis_url, agent, POLICY) as bot:
        await bot.slack.command("look at the logs", user="U1", channel="C1")
        await wait_until(lambda: in_thread(bot, "Logs look noisy."), what="the first answer")
        await say(bot, "delete the noisy ones")
        [card] = await bot.wait_for_approvals(1)
        [turn] = await wait_until(
            lambda: in_thread(bot, "waiting for 1 approval_: <"), what="turn 2's message"
        )
        run = bot.run_message()
        slack = bot.slack_api
        said = len(slack.statuses.get((run.channel, run.ts), []))
        await bot.click(card, APPROVE, user="U2")
        await wait_until(started.is_set, what="the turn's slow check")
        # The turn's message is in the thread already: nothing posted there clears this line.
        await wait_until(
            lambda: (
                len(slack.statuses[(run.channel, run.ts)]) > said
                and slack.status_of(run.channel, run.ts)
            ),
            what="a status line said after the decision",
        )
        release.set()
        await bot.wait_for_status("finished")
        await bot.idle()
        [answer] = in_thread(bot, "Deleted them; web-1 is fine.")
        assert answer.ts == turn.ts  # written into the turn's message: no post in the thread
        assert slack.status_of(run.channel, run.ts) == ""
    assert ledger.names() == ["delete_logs", "slow_check"]


async def test_a_restart_between_turns_keeps_the_conversation(
    redis_url: str, slack_api: FakeSlackAPI
) -> None:
    first, _ = ops_agent([[assistant_message("The build number is 7781.")]], Ledger())
    async with BotHarness(redis_url, first, POLICY, slack=slack_api) as bot:
        await bot.slack.command("which build is live?", user="U1", channel="C1")
        await wait_until(lambda: in_thread(bot, "7781"), what="the first answer")
        await bot.idle()
    # A new process, with its agent (and model) built afresh: only Redis remembers.
    again, model = ops_agent([[assistant_message("Rolling back from 7781.")]], Ledger())
    async with BotHarness(redis_url, again, POLICY, slack=slack_api) as bot:
        await say(bot, "roll it back")
        await wait_until(lambda: in_thread(bot, "Rolling back from 7781."), what="turn 2")
    assert "The build number is 7781." in json.dumps(model.calls[0].input)


async def test_a_reply_to_a_failed_run_is_refused(redis_url: str, tmp_path: Path) -> None:
    agent, _ = ops_agent([RuntimeError("the model is down")], Ledger())
    async with BotHarness(redis_url, agent, POLICY) as bot:
        await bot.slack.command("anything", user="U1", channel="C1")
        await bot.wait_for_status("failed")
        await say(bot, "try again?")
        told = await wait_until(lambda: bot.slack_api.ephemeral_to("U1"), what="U1 told")
        assert "This run failed, so it cannot go on" in told[0]


async def test_a_reply_to_a_cancelled_run_is_refused_with_who_cancelled_it(
    redis_url: str,
) -> None:
    """A cancelled run cannot go on either: its author is told why (and by whom), privately,
    and the agent never hears it (#29, item 9: the reply was dropped without a word)."""
    agent, model = ops_agent(
        [[function_call("restart_service", {"service": "api"}, call_id="c1")]], Ledger()
    )
    async with BotHarness(redis_url, agent, POLICY) as bot:
        await bot.start_and_wait("restart api", user="U1")
        run_id = status_line(bot.run_message()).split("run `", 1)[1].split("`", 1)[0]
        await bot.slack.command(f"cancel {run_id}", user="U2", channel="C1")
        await bot.wait_for_status("cancelled")
        await bot.idle()
        await say(bot, "why did you stop?", user="U1")
        told = await wait_until(lambda: bot.slack_api.ephemeral_to("U1"), what="U1 told")
        assert "This run was cancelled by <@U2>, so it cannot go on" in told[-1]
        await bot.idle()
    assert len(model.calls) == 1  # the agent never heard it
    audit = await bot.audit()
    [refused] = [e for e in audit if e["kind"] == "follow_up_refused"]
    assert refused["user"] == "U1" and "cancelled" in refused["detail"]


@pytest.mark.parametrize("mention_first", [True, False], ids=["mention-first", "message-first"])
async def test_a_mention_in_a_run_thread_is_one_follow_up(
    redis_url: str, mention_first: bool
) -> None:
    """Slack sends a mention in a thread twice (`message` and `app_mention`, one ts) in either
    order: the agent hears it once. Handled second, the `app_mention` is a duplicate of a
    follow-up, not a task for a run of its own (it used to start one: a third model call, seen
    under load)."""
    agent, model = ops_agent(
        [[assistant_message("Three hosts.")], [assistant_message("web1, web2, web3.")]], Ledger()
    )
    async with BotHarness(redis_url, agent, POLICY) as bot:
        await bot.slack.command("how many hosts?", user="U1", channel="C1")
        await wait_until(lambda: in_thread(bot, "Three hosts."), what="the first answer")
        run, ts = bot.run_message(), "1796400000.000100"

        async def mention() -> None:
            await bot.slack.mention("name them", user="U1", channel="C1", thread_ts=run.ts, ts=ts)

        if mention_first:
            await mention()
        await bot.slack.thread_reply(
            "<@UBOT> name them", user="U1", channel="C1", thread_ts=run.ts, ts=ts
        )
        await wait_until(lambda: in_thread(bot, "web1, web2, web3."), what="turn 2")
        await bot.idle()
        if not mention_first:
            await mention()
            await bot.idle()
    assert len(model.calls) == 2
    assert "name them" in json.dumps(model.calls[1].input)
    assert "<@UBOT>" not in json.dumps(model.calls[1].input)
    assert not [m for m in bot.slack_api.messages if "Mention me" in str(m)]
    assert len({e["run_id"] for e in await bot.audit() if e.get("run_id")}) == 1


async def test_a_mention_outside_a_run_thread_starts_a_run(redis_url: str) -> None:
    ledger = Ledger()
    agent, model = ops_agent(
        [
            [function_call("restart_service", {"service": "api"}, call_id="c1")],
            [assistant_message("Restarted.")],
        ],
        ledger,
    )
    async with BotHarness(redis_url, agent, POLICY) as bot:
        sent = await bot.slack.mention("restart the api", user="U1", channel="C1")
        assert sent.status == 200
        [card] = await bot.wait_for_approvals(1)
        assert "restart the api" in json.dumps(model.calls[0].input)
        await bot.click(card, APPROVE, user="U2")
        await bot.wait_for_status("finished")
        # The same checks as /agent: a channel the policy does not list runs nothing.
        await bot.slack.mention("restart everything", user="U1", channel="C9")
        told = await wait_until(lambda: bot.slack_api.ephemeral_to("U1"), what="U1 told")
        assert "not enabled in this channel" in told[-1]
    assert ledger.names() == ["restart_service"]


def target(call: Any) -> str:
    """Which of a run's messages a post is (the bot tags each with metadata)."""
    return str((call.params.get("metadata") or {}).get("event_payload", {}).get("target", ""))


async def test_an_answer_is_streamed_with_slacks_streaming_then_finalized(
    redis_url: str,
) -> None:
    """Where the workspace offers chat streaming: one message, opened with the first words
    (`chat.startStream`), extended as the model writes (`chat.appendStream`, only what is
    new), ended with the rest (`chat.stopStream`): what Slack then holds is the answer."""
    answer = "The deploy went out at **14:02**.\n\nNo errors since; ping <@U9> @here if not."
    model = SlowWriter([[assistant_message(answer)]], pieces=6, gap=0.6)
    agent = Agent(name="ops", instructions="You operate servers.", model=model)
    async with BotHarness(redis_url, agent, POLICY, settings={"stream_answers": True}) as bot:
        await bot.slack.command("how did the deploy go?", user="U1", channel="C1")
        [live] = await wait_until(
            lambda: [m for m in in_thread(bot, "The deploy") if m.streaming],
            timeout=30,
            what="the answer streaming",
        )
        assert "if not." not in live.text
        await bot.wait_for_status("finished")
        await bot.idle()
        [final] = in_thread(bot, "The deploy went out")
        calls = {
            m: bot.slack_api.calls_to(f"chat.{m}")
            for m in ("startStream", "appendStream", "stopStream")
        }
    assert final.ts == live.ts and not final.streaming and final.markdown
    # The agent's words as they are, but no mention or ping can come from them.
    assert final.text == answer.replace("<@", "<\u200b@").replace("@here", "@\u200bhere")
    assert len(calls["startStream"]) == 1 and len(calls["stopStream"]) == 1
    assert 1 <= len(calls["appendStream"]) <= 4  # only what was new, at most every 2 s
    sent = "".join(
        str(c.params.get("markdown_text") or "")
        for c in calls["startStream"] + calls["appendStream"] + calls["stopStream"]
    )
    assert sent == final.text  # nothing sent twice
    assert not [c for c in bot.slack_api.calls_to("chat.postMessage") if target(c) == "result"]


async def test_a_stream_whose_start_went_unanswered_is_found_not_opened_twice(
    redis_url: str,
) -> None:
    """Slack opened the stream but its answer was lost (a 502): the next attempt finds the
    stream in the thread (what it holds is exactly what the start sent) and carries on with
    it. One message, the whole answer, no second stream."""
    answer = "The deploy went out at 14:02.\n\nNo errors since; latency is back to normal."
    model = SlowWriter([[assistant_message(answer)]], pieces=6, gap=0.6)
    agent = Agent(name="ops", instructions="You operate servers.", model=model)
    slack = FakeSlackAPI()
    slack.lose_response("chat.startStream", 1, 502)
    settings = {"stream_answers": True}
    async with BotHarness(redis_url, agent, POLICY, slack=slack, settings=settings) as bot:
        await bot.slack.command("how did the deploy go?", user="U1", channel="C1")
        await bot.wait_for_status("finished")
        await bot.idle()
        [final] = in_thread(bot, "The deploy")
    assert final.text == answer and not final.streaming
    assert len(slack.calls_to("chat.startStream")) == 1
    assert not [c for c in slack.calls_to("chat.postMessage") if target(c) == "result"]


async def test_an_answer_is_shown_while_it_is_written_then_finalized(redis_url: str) -> None:
    """Where it does not (the stand-in answers `unknown_method`): the answer so far is posted,
    said to be unfinished, updated at most every 2 s, then finalized in the same message."""
    answer = "The deploy went out at 14:02.\n\nNo errors since; latency is back to normal."
    model = SlowWriter([[assistant_message(answer)]], pieces=6, gap=0.6)
    agent = Agent(name="ops", instructions="You operate servers.", model=model)
    slack = FakeSlackAPI()
    slack.streams = False
    settings = {"stream_answers": True}
    async with BotHarness(redis_url, agent, POLICY, slack=slack, settings=settings) as bot:
        await bot.slack.command("how did the deploy go?", user="U1", channel="C1")
        writing = await wait_until(
            lambda: in_thread(bot, "still writing"), timeout=30, what="the answer so far"
        )
        shown = writing[0].all_text()
        assert shown.startswith("The deploy") and "latency is back to normal" not in shown
        await bot.wait_for_status("finished")
        await bot.idle()
        [final] = in_thread(bot, "The deploy went out")
        assert final.all_text() == answer  # the same message, finalized: nothing left unsaid
        posts = [c for c in bot.slack_api.calls_to("chat.postMessage") if target(c) == "result"]
        updates = [c for c in bot.slack_api.calls_to("chat.update") if c.params["ts"] == final.ts]
    assert len(posts) == 1  # one message for the answer
    assert 1 <= len(updates) <= 3  # updated as it grew (at most every 2 s), then finalized
    assert len(bot.slack_api.calls_to("chat.startStream")) == 1  # asked once, then not again
    assert len(bot.slack_api.calls_to("assistant.threads.setStatus")) == 1  # the same


LONG = "\n\n".join(
    f"Step {n}: " + " ".join(f"check{n}-{k}" for k in range(60)) for n in range(1, 19)
)  # about 11,000 characters: four messages


@pytest.mark.parametrize("streams", [False, True], ids=["posted", "slack-streaming"])
async def test_a_long_answer_is_split_between_paragraphs(redis_url: str, streams: bool) -> None:
    """Too long for one message (a posted one holds 3,900 characters, a stream 12,000): the
    first message shows the answer as it is written, then holds its first part; the rest
    follows in order, each within Slack's limit and beginning with a paragraph. Nothing is
    lost or said twice."""
    answer = LONG if not streams else "\n\n".join([LONG, LONG])  # 11,000 or 22,000
    model = SlowWriter([[assistant_message(answer)]], pieces=4, gap=0.4)
    agent = Agent(name="ops", instructions="You operate servers.", model=model)
    slack = FakeSlackAPI()
    slack.streams = streams
    settings = {"stream_answers": True}
    async with BotHarness(redis_url, agent, POLICY, slack=slack, settings=settings) as bot:
        await bot.slack.command("write the runbook", user="U1", channel="C1")
        await bot.wait_for_status("finished", timeout=30)
        count = len(split_answer(answer, 3900, 10))
        await wait_until(lambda: len(in_thread(bot, "Step ")) == count, what=f"{count} parts")
        await bot.idle()
        texts = [m.all_text() for m in in_thread(bot, "Step ")]
        assert not [m for m in in_thread(bot, "Step ") if m.streaming]
        assert all(len(t) <= 3900 and t.startswith("Step ") for t in texts)
        assert "\n\n".join(texts) == answer  # in order, whole
        posts = bot.slack_api.calls_to("chat.postMessage")
        assert (
            [target(c) for c in posts if target(c).startswith("result")]
            == [f"result:#{n}" for n in range(2, count + 1)]
            if streams
            else ["result"] + [f"result:#{n}" for n in range(2, count + 1)]
        )


async def test_an_answer_a_stream_holds_is_one_message(redis_url: str) -> None:
    """With Slack's streaming, an answer of 11,000 characters stays one message."""
    model = SlowWriter([[assistant_message(LONG)]], pieces=4, gap=0.4)
    agent = Agent(name="ops", instructions="You operate servers.", model=model)
    async with BotHarness(redis_url, agent, POLICY, settings={"stream_answers": True}) as bot:
        await bot.slack.command("write the runbook", user="U1", channel="C1")
        await bot.wait_for_status("finished", timeout=30)
        await bot.idle()
        [whole] = in_thread(bot, "Step ")
        assert whole.text == LONG and not whole.streaming
