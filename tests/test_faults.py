"""Fault injection with real processes: a `serve --no-worker` process takes Slack's requests,
`worker` processes run the jobs, and the test SIGKILLs them (or redis-server) at each stage.

Each test ends with: every pending approval still decidable, no tool executed twice, and no
run left without a message saying where it stands.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import aiohttp
import pytest

from bot.slack.blocks import APPROVE, REVIEW_DONE, REVIEW_RERUN
from bot.store import keys
from bot.store.connection import EmbeddedRedis
from bot.store.delivery.outbox import Shown
from bot.store.trail.audit import AUDIT_STREAM
from bot.testing.cluster import redis_for
from bot.testing.harness import SIGNING_SECRET, status_line, wait_until
from bot.testing.requests import SlackRequests
from bot.testing.slack_api import FakeSlackAPI, Message
from tests.agents_for_tests import POLICY
from tests.processes import (
    bot_env,
    executions,
    free_port,
    ledger,
    running_bot,
    start_process,
    stop_process,
)

LEASE = "1"


@pytest.fixture
def env(slack: FakeSlackAPI, tmp_path: Path, redis_url: str) -> dict[str, str]:
    policy = tmp_path / "policy.yml"
    policy.write_text(POLICY)
    return bot_env(
        slack, policy, tmp_path, REDIS_URL=redis_url, APPROVAL_BOT_JOB_LEASE_SECONDS=LEASE,
        # One person starts a dozen runs at once here: no start limits.
        APPROVAL_BOT_USER_START_BURST="0", APPROVAL_BOT_CHANNEL_START_BURST="0",
        APPROVAL_BOT_USER_OPEN_RUNS="0",
    )  # fmt: skip


def outputs(slack: FakeSlackAPI) -> list[str]:
    """The runs' outputs Slack shows whole: a streamed one once its stream is stopped, a posted
    one once it no longer says it is still being written (waiting for an output's first words
    and then stopping the bot left a loaded run asserting on half of one)."""
    return [
        m.text
        for m in slack.messages.values()
        if m.text.startswith("tool said:") and not m.streaming and "still writing" not in m.text
    ]


async def audited(redis_url: str, kind: str, user: str) -> int:
    """How many `kind` entries by `user` the audit trail holds (proof a click was handled)."""
    client = await redis_for(redis_url, decode_responses=True)
    try:
        entries = await client.xrange(AUDIT_STREAM)
    finally:
        await client.aclose()
    return sum(1 for _, e in entries if e.get("kind") == kind and e.get("user") == user)


def review_messages(slack: FakeSlackAPI) -> list[Message]:
    return [m for m in slack.messages.values() if REVIEW_DONE in m.action_ids()]


async def approve_one(
    requests: SlackRequests, slack: FakeSlackAPI, path: str, approvers: tuple[str, ...] = ("U2",)
) -> None:
    await requests.command(path, user="U1", channel="C1")
    [approval] = await wait_until(
        lambda: [m for m in slack.approval_messages() if path in m.all_text()],
        what="the approval message",
    )
    for user in approvers:
        sent = await requests.click(
            APPROVE, approval.button_value(APPROVE), user=user, channel="C1"
        )
        assert sent.status == 200


@pytest.mark.parametrize("stage", ["before_tool", "after_tool"])
@pytest.mark.cluster_too
async def test_a_worker_killed_where_a_retry_is_safe_is_replaced(
    stage: str, slack: FakeSlackAPI, env: dict[str, str], tmp_path: Path
) -> None:
    port = free_port()
    async with (
        running_bot(env, port, "--no-worker"),
        SlackRequests(f"http://127.0.0.1:{port}/slack/events", SIGNING_SECRET) as requests,
    ):
        doomed = start_process(["worker"], {**env, "TEST_BLOCK": stage})
        try:
            await approve_one(requests, slack, "/var/log/a")
            await wait_until(
                lambda: any(e["event"] == "blocked" for e in ledger(tmp_path)),
                what=f"the worker to reach {stage}",
            )
            doomed.send_signal(signal.SIGKILL)
        finally:
            stop_process(doomed)
        rescuer = start_process(["worker"], env)
        try:
            # The whole output: an answer streamed to Slack shows its first words first.
            await wait_until(
                lambda: any(o.endswith("/var/log/a") for o in outputs(slack)),
                timeout=30,
                what="the run's whole output",
            )
        finally:
            stop_process(rescuer)
    assert executions(tmp_path) == [("start", "/var/log/a"), ("end", "/var/log/a")]
    assert outputs(slack) == ["tool said: deleted /var/log/a"]
    assert review_messages(slack) == []


QUORUM = POLICY + "tools:\n  - match: delete_logs\n    required_approvals: 2\n"


@pytest.mark.parametrize(
    ("choice", "policy"),
    [(REVIEW_DONE, POLICY), (REVIEW_RERUN, POLICY), (REVIEW_RERUN, QUORUM)],
    ids=["mark-done", "run-again", "run-again-with-quorum"],
)
async def test_a_worker_killed_during_the_tool_leaves_it_to_a_person(
    choice: str,
    policy: str,
    slack: FakeSlackAPI,
    env: dict[str, str],
    tmp_path: Path,
    redis_url: str,
) -> None:
    (tmp_path / "policy.yml").write_text(policy)
    quorum = policy is QUORUM
    port = free_port()
    async with (
        running_bot(env, port, "--no-worker"),
        SlackRequests(f"http://127.0.0.1:{port}/slack/events", SIGNING_SECRET) as requests,
    ):
        doomed = start_process(["worker"], {**env, "TEST_BLOCK": "during_tool"})
        try:
            await approve_one(requests, slack, "/var/log/b", ("U2", "U3") if quorum else ("U2",))
            await wait_until(
                lambda: any(e["event"] == "blocked" for e in ledger(tmp_path)),
                what="the tool to start",
            )
            doomed.send_signal(signal.SIGKILL)
        finally:
            stop_process(doomed)
        rescuer = start_process(["worker"], env)
        try:
            [review] = await wait_until(
                lambda: review_messages(slack), timeout=30, what="a review request"
            )
            assert "`delete_logs` (call `call_1`) was executing" in review.all_text()
            assert "stopped (or stalled)" in review.all_text()
            mark_done = review.button_value(REVIEW_DONE)
            await wait_until(
                lambda: any(
                    "needs review" in m.all_text()
                    for m in slack.top_level()
                    if "started agent" in m.all_text()
                ),
                timeout=30,
                what="the run message to say it needs review",
            )
            # Not by someone who may not decide this tool; then by an approver.
            denied = await requests.click(
                choice, review.button_value(choice), user="U9", channel="C1"
            )
            assert denied.status == 200
            await requests.click(choice, review.button_value(choice), user="U2", channel="C1")
            if quorum:  # running it again is approving it again: a second approver is needed

                async def u2_voted(times: int) -> bool:
                    return await audited(redis_url, "review_vote", "U2") >= times

                await wait_until(lambda: u2_voted(1), what="U2's vote to be counted")
                assert executions(tmp_path) == [("start", "/var/log/b")]
                await requests.click(
                    choice, review.button_value(choice), user="U2", channel="C1"
                )  # the same person again counts once
                await wait_until(lambda: u2_voted(2), what="U2's second click to be handled")
                assert executions(tmp_path) == [("start", "/var/log/b")]
                await requests.click(choice, review.button_value(choice), user="U3", channel="C1")
            # The whole output: an answer streamed to Slack shows its first words first.
            await wait_until(
                lambda: any(
                    o.endswith("/var/log/b") or "marked it done" in o for o in outputs(slack)
                ),
                timeout=30,
                what="the run's whole output",
            )
            # Settled: the review shows who chose what (a real mention), and no buttons.
            await wait_until(
                lambda: not review.action_ids(), timeout=30, what="the review to show its outcome"
            )
            assert "<@U" in review.all_text() and "&lt;@" not in review.all_text()
            again = await requests.click(REVIEW_DONE, mark_done, user="U3", channel="C1")
            assert again.status == 200
            await wait_until(  # handled: told so, privately (and nothing runs again, below)
                lambda: [t for t in slack.ephemeral_to("U3") if "already settled" in t],
                what="the late click's answer",
            )
        finally:
            stop_process(rescuer)
    if choice == REVIEW_DONE:  # started once, by the killed worker; never run again
        assert executions(tmp_path) == [("start", "/var/log/b")]
        assert len(outputs(slack)) == 1 and "marked it done" in outputs(slack)[0]
    else:  # a person chose to run it again: exactly once more
        assert executions(tmp_path) == [
            ("start", "/var/log/b"), ("start", "/var/log/b"), ("end", "/var/log/b"),
        ]  # fmt: skip
        assert outputs(slack) == ["tool said: deleted /var/log/b"]
    assert any("not among the approvers" in t for t in slack.ephemeral_to("U9"))
    assert any("already settled" in t for t in slack.ephemeral_to("U3"))


async def test_two_workers_compete_and_every_tool_runs_once(
    slack: FakeSlackAPI, env: dict[str, str], tmp_path: Path
) -> None:
    port = free_port()
    paths = [f"/srv/{i}" for i in range(12)]
    # What this test proves is exactly-once across two workers; run messages held while their
    # resumes queue (busy coalescing, 60 s in production) are kept out of it by a short hold.
    env = {**env, "APPROVAL_BOT_PROJECTOR_BUSY_COALESCE_SECONDS": "1"}
    async with (
        running_bot(env, port, "--no-worker"),
        SlackRequests(f"http://127.0.0.1:{port}/slack/events", SIGNING_SECRET) as requests,
    ):
        workers = [start_process(["worker"], env) for _ in range(2)]
        try:
            for path in paths:
                await requests.command(path, user="U1", channel="C1")
            approvals = await wait_until(
                lambda: (
                    (m := [a for a in slack.approval_messages() if a.action_ids()])
                    and len(m) == len(paths)
                    and m
                ),
                timeout=30,
                what="all approval messages",
            )
            await asyncio.gather(
                *(
                    requests.click(APPROVE, a.button_value(APPROVE), user=u, channel="C1")
                    for a in approvals
                    for u in ("U2", "U3")
                )
            )
            # (Outputs that never came here on a loaded machine were a projector pass hung on a
            # lost cancellation: see `bot.stopping`.)
            await wait_until(
                lambda: len(outputs(slack)) == len(paths), timeout=60, what="all runs to finish"
            )
        finally:
            for worker in workers:
                stop_process(worker)
    done = executions(tmp_path)
    assert sorted(p for e, p in done if e == "start") == sorted(paths)
    assert sorted(p for e, p in done if e == "end") == sorted(paths)
    assert len({e["pid"] for e in ledger(tmp_path)}) == 2  # both workers took jobs


async def test_redis_killed_and_restarted_while_runs_wait(
    slack: FakeSlackAPI, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yml"
    policy.write_text(POLICY)
    redis_dir = tmp_path / "redis"
    own = EmbeddedRedis(redis_dir)
    await own.start()
    env = bot_env(slack, policy, tmp_path, REDIS_URL=own.url, APPROVAL_BOT_JOB_LEASE_SECONDS=LEASE)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    try:
        async with (
            running_bot(env, port),
            SlackRequests(f"{url}/slack/events", SIGNING_SECRET) as requests,
            aiohttp.ClientSession() as http,
        ):
            await requests.command("/var/log/c", user="U1", channel="C1")
            [approval] = await wait_until(lambda: slack.approval_messages())
            # The pause on disk before the kill (appendfsync everysec: Redis may hold back
            # the write while a background fsync runs): the call's key in the AOF.
            call = keys.call_key(approval.button_value(APPROVE).split(":")[0]).encode()
            await wait_until(
                lambda: any(call in aof.read_bytes() for aof in redis_dir.rglob("*.aof")),
                timeout=30,
                what="the pause in Redis's append-only file",
            )
            assert own.process is not None
            own.process.send_signal(signal.SIGKILL)
            own.process.wait(timeout=10)
            # While Redis is down: clicks are answered, nothing crashes, /readyz says so.
            sent = await requests.click(
                APPROVE, approval.button_value(APPROVE), user="U2", channel="C1"
            )
            assert sent.status == 200
            # (A "still working" note may come first, when Redis takes long to refuse.)
            await wait_until(
                lambda: [t for t in slack.ephemeral_to("U2") if "Try again in a moment" in t],
                what="a private reply",
            )
            async with http.get(f"{url}/readyz") as response:
                assert response.status == 503
            # Redis comes back with its AOF: the same click now works.
            again = EmbeddedRedis(redis_dir, port=own.port)
            await again.start()
            own = again
            await wait_until(lambda: _ready(http, url), what="/readyz to recover")
            await requests.click(APPROVE, approval.button_value(APPROVE), user="U2", channel="C1")
            await wait_until(lambda: outputs(slack), timeout=30, what="the run to finish")
    finally:
        own.stop()
    assert executions(tmp_path) == [("start", "/var/log/c"), ("end", "/var/log/c")]


async def _ready(http: aiohttp.ClientSession, url: str) -> bool:
    async with http.get(f"{url}/readyz") as response:
        return response.status == 200


async def test_a_process_killed_while_posting_a_card_leaves_no_long_claim(
    slack: FakeSlackAPI, env: dict[str, str], tmp_path: Path
) -> None:
    """The card's post hangs in Slack; the process posting it is SIGKILLed. Another process
    takes the run's messages over once their lease (1 s here) lapses, finds that the post never
    happened, and posts the card: exactly one, decidable."""
    slack.hang("chat.postMessage", when=lambda p: "Approval needed" in str(p.get("text")))
    first, second = free_port(), free_port()
    async with running_bot(env, first) as doomed:
        async with SlackRequests(
            f"http://127.0.0.1:{first}/slack/events", SIGNING_SECRET
        ) as requests:
            await requests.command("/var/log/k", user="U1", channel="C1")
            await wait_until(lambda: slack.hanging == 1, what="the card's post")
        doomed.send_signal(signal.SIGKILL)
        await asyncio.to_thread(doomed.wait, 10)
    async with (
        running_bot(env, second),
        SlackRequests(f"http://127.0.0.1:{second}/slack/events", SIGNING_SECRET) as requests,
    ):
        # Once the lease lapses (1 s), not at some later sweep: bounded by the wait itself.
        [card] = await wait_until(
            lambda: [m for m in slack.approval_messages() if m.action_ids()],
            timeout=20,
            what="the card, posted by the surviving process",
        )
        await requests.click(APPROVE, card.button_value(APPROVE), user="U2", channel="C1")
        await wait_until(lambda: outputs(slack), timeout=30, what="the run to finish")
    assert len(slack.approval_messages()) == 1
    assert executions(tmp_path) == [("start", "/var/log/k"), ("end", "/var/log/k")]


@pytest.mark.parametrize("streams", [False, True], ids=["posted", "slack-streaming"])
async def test_a_worker_killed_mid_answer_leaves_no_answer_that_looks_complete(
    slack: FakeSlackAPI, env: dict[str, str], tmp_path: Path, streams: bool
) -> None:
    """The worker dies with half of the answer written (and shown): the message says it is
    still being written (posted: in its words; with Slack's streaming: its stream is open,
    which Slack shows as being written) until another worker's retry finishes it, in the
    same message."""
    slack.streams = streams
    port = free_port()
    whole = "tool said: deleted /var/log/c"

    def half_shown() -> list[Message]:
        return [
            m for m in slack.messages.values()
            if ("still writing" in m.text or m.streaming) and m.text.startswith("tool said")
        ]  # fmt: skip

    async with (
        running_bot(env, port, "--no-worker"),
        SlackRequests(f"http://127.0.0.1:{port}/slack/events", SIGNING_SECRET) as requests,
    ):
        doomed = start_process(["worker"], {**env, "TEST_BLOCK": "during_answer"})
        try:
            await approve_one(requests, slack, "/var/log/c")
            [half] = await wait_until(half_shown, what="half of the answer shown")
            assert whole not in half.text and half.text.startswith("tool said")
            assert half.streaming == streams
            doomed.send_signal(signal.SIGKILL)
        finally:
            stop_process(doomed)
        rescuer = start_process(["worker"], env)
        try:
            await wait_until(
                lambda: (
                    slack.messages[(half.channel, half.ts)].text == whole
                    and not slack.messages[(half.channel, half.ts)].streaming
                ),
                timeout=30,
                what="the same message finished",
            )
        except TimeoutError:
            raise AssertionError(
                [(m.ts, m.text, m.streaming) for m in slack.messages.values() if m.thread_ts]
                + [(c.method, c.params) for c in slack.calls if c.method.startswith("chat.")]
            ) from None
        finally:
            stop_process(rescuer)
    assert not half_shown()
    assert outputs(slack) == [whole]
    assert executions(tmp_path) == [("start", "/var/log/c"), ("end", "/var/log/c")]


async def test_a_process_killed_between_its_outputs_token_and_its_post_posts_it_once_later(
    slack: FakeSlackAPI, env: dict[str, str], redis_url: str
) -> None:
    """One decision at a time, the run's end takes its output's Slack token and records its
    post as attempted in its own round trip (#32). The output's post then hangs, never
    reaching Slack, and the process is SIGKILLed: for Redis and for Slack, a process that died
    between the take and the post. The surviving process takes the run over once its lease
    (1 s) lapses, looks the output up (not there), and posts it: exactly once."""
    slack.hang("chat.postMessage", when=lambda p: str(p.get("text")).startswith("tool said:"))
    first, second = free_port(), free_port()
    client = await redis_for(redis_url)
    try:
        async with running_bot(env, first) as doomed:
            async with SlackRequests(
                f"http://127.0.0.1:{first}/slack/events", SIGNING_SECRET
            ) as requests:
                await approve_one(requests, slack, "/var/log/t")
                await wait_until(lambda: slack.hanging == 1, what="the output's post")
            [shown] = [k async for k in client.scan_iter(match=keys.shown_key("*"))]
            record = await client.hget(shown, "result")
            assert record is not None and not Shown.decode(record.decode()).ts  # tried, no ts
            doomed.send_signal(signal.SIGKILL)
            await asyncio.to_thread(doomed.wait, 10)
        lookups = len(slack.calls_to("conversations.replies"))
        async with running_bot(env, second):
            await wait_until(lambda: outputs(slack), timeout=30, what="the output, posted")
            await wait_until(
                lambda: [m for m in slack.top_level() if "finished" in status_line(m)],
                what="the run message's update, after the output in the same pass",
            )
    finally:
        await client.aclose()
    assert len(outputs(slack)) == 1
    assert len(slack.calls_to("conversations.replies")) > lookups  # looked up before posting
