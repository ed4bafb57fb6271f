"""Decision webhooks (#19, item 4): every audit entry POSTed, signed, to a receiver on
127.0.0.1, at least once, in order, with its idempotency key; retried through failures, kept
across a restart, and never in a decision's way."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import signal
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from aiohttp import web

from bot import ask_human
from bot.slack.blocks import APPROVE
from bot.store.trail.audit import AUDIT_STREAM
from bot.store.trail.webhooks import WebhookOutbox
from bot.testing.clock import SkippingClock
from bot.testing.harness import SIGNING_SECRET, BotHarness, wait_until
from bot.testing.requests import SlackRequests
from bot.testing.slack_api import FakeSlackAPI
from tests.agents_for_tests import (
    POLICY,
    Ledger,
    assistant_message,
    delete_then_say,
    function_call,
    ops_agent,
)
from tests.docs_samples import DOCS, blocks
from tests.processes import bot_env, free_port, running_bot, take_socket

SECRET = "webhook-secret-for-tests-0123456789"
# The bot's webhook timeout in these tests: longer than any answer takes on a busy machine
# (0.3 s was not: an answer given at once came too late, and was sent again), and a "timeout"
# answer waits for the bot to give up on it rather than for a time.
TIMEOUT = 3.0


def receiver_check() -> Callable[[bytes, Any, bytes], bool]:
    """The receiver's check exactly as docs/webhooks.md prints it (not the bot's own code)."""
    [source] = [
        b for b in blocks((DOCS / "webhooks.md").read_text(), "python") if "# verify.py" in b
    ]
    namespace: dict[str, Any] = {}
    exec(compile(source, "docs/webhooks.md", "exec"), namespace)
    check: Callable[[bytes, Any, bytes], bool] = namespace["verified"]
    return check


verified = receiver_check()


class Receiver:
    """A webhook receiver on 127.0.0.1 that answers its first requests from `failures`
    ("500", "timeout", "hang": until told to accept), then accepts, once per idempotency key.
    It serves on `sock` (a port the test named before it was up) or on a port of its own."""

    def __init__(
        self, failures: list[str] | None = None, sock: socket.socket | None = None
    ) -> None:
        self.failures = list(failures or [])
        self.sock = sock
        self.port = 0
        self.attempts: list[str] = []  # the idempotency key of every request, in order
        self.accepted: list[dict[str, Any]] = []  # bodies answered 200 the first time
        self.duplicates = 0
        self.unsigned = 0
        self.hang = asyncio.Event()  # set: "hang" requests answer
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def __aenter__(self) -> Receiver:
        app = web.Application()
        app.add_routes([web.post("/hook", self._handle)])
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site: web.BaseSite
        if self.sock is not None:
            site = web.SockSite(self._runner, self.sock)
        else:
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.hang.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        key = request.headers.get("Idempotency-Key", "")
        self.attempts.append(key)
        if not verified(SECRET.encode(), request.headers, body):
            self.unsigned += 1
            return web.Response(status=401)
        if self.failures:
            failure = self.failures.pop(0)
            if failure == "timeout":
                await wait_until(
                    lambda: request.transport is None or request.transport.is_closing(),
                    timeout=60,
                    what="the bot to give up on the request",
                )
                return web.Response(status=200)  # too late: the bot has given up on it
            if failure == "hang":
                self.failures.insert(0, "hang")
                await self.hang.wait()
                self.failures = [f for f in self.failures if f != "hang"]
                return web.Response(status=503)
            return web.Response(status=int(failure))
        if key in {e["id"] for e in self.accepted}:
            self.duplicates += 1
        else:
            event = json.loads(body)
            assert event["id"] == key == request.headers["X-Approval-Bot-Event-Id"]
            self.accepted.append(event)
        return web.Response(status=200)

    def ids(self) -> list[str]:
        return [e["id"] for e in self.accepted]


def webhook_settings(url: str, **extra: Any) -> dict[str, Any]:
    return {
        "webhook_url": url,
        "webhook_secret": SECRET,
        "webhook_timeout_seconds": TIMEOUT,
        "webhook_retry_seconds": 0.05,
        "webhook_retry_max_seconds": 0.2,
        **extra,
    }


def two_calls_agent(ledger: Ledger) -> Any:
    agent, _ = ops_agent(
        [
            [function_call("delete_logs", {"path": "/var/log/a"}, call_id="c1")],
            [assistant_message("Deleted a.")],
            [function_call("delete_logs", {"path": "/var/log/b"}, call_id="c2")],
            [assistant_message("Deleted b.")],
        ],
        ledger,
    )
    return agent


async def metrics_text(bot: BotHarness) -> str:
    async with aiohttp.ClientSession() as session, session.get(f"{bot.url}/metrics") as response:
        return await response.text()


async def delivered_all(bot: BotHarness, receiver: Receiver) -> list[dict[str, str]]:
    """Wait until the receiver holds every audit entry and the outbox's cursor is past the
    last (the sender sends only what comes after it: nothing is sent again, whatever comes
    next); return the audit trail."""
    outbox = WebhookOutbox(bot.runtime.redis)

    async def done() -> list[dict[str, str]] | None:
        audit = await bot.audit()
        if not audit or receiver.ids() != [e["id"] for e in audit]:
            return None
        return audit if await outbox.cursor() == audit[-1]["id"] else None

    found: list[dict[str, str]] = await wait_until(
        done, what="every audit entry at the receiver, and recorded as sent"
    )
    return found


async def test_events_are_signed_retried_through_three_failures_and_delivered_once_in_order(
    redis_url: str, slack_api: FakeSlackAPI
) -> None:
    ledger = Ledger()
    async with Receiver(["500", "timeout", "500"]) as receiver:
        settings = webhook_settings(receiver.url)
        async with BotHarness(
            redis_url, two_calls_agent(ledger), POLICY, slack=slack_api, settings=settings
        ) as bot:
            for path in ("/var/log/a", "/var/log/b"):
                await bot.slack.command(f"clean {path}", user="U1", channel="C1")
                approval = next(m for m in await bot.wait_for_approvals(1) if path in m.all_text())
                assert (await bot.click(approval, APPROVE, user="U2")).status == 200
                await bot.wait_for_status("finished")
            audit = await delivered_all(bot, receiver)  # nothing is sent again once accepted
    assert receiver.unsigned == 0 and receiver.duplicates == 0
    assert receiver.ids() == [e["id"] for e in audit]  # every entry, once, in the trail's order
    # The first entry took four attempts (500, timeout, 500, accepted); every other, one.
    first = audit[0]["id"]
    assert receiver.attempts[:4] == [first] * 4
    assert receiver.attempts[4:] == receiver.ids()[1:]
    # The body is the audit entry: its kind, time and fields.
    by_run: dict[str, list[str]] = {}
    for event, entry in zip(receiver.accepted, audit, strict=True):
        assert event["kind"] == entry["kind"] and event["time"] == float(entry["time"])
        assert event.get("run_id") == entry.get("run_id")
        by_run.setdefault(event.get("run_id", ""), []).append(event["kind"])
    runs = [kinds for run_id, kinds in by_run.items() if run_id]
    assert len(runs) == 2
    for kinds in runs:  # in order per run (a card's card_shown comes when it is posted)
        kinds = [k for k in kinds if k != "card_shown"]
        assert kinds[:3] == ["run_started", "paused", "decided"], kinds
        assert kinds[-1] == "run_finished", kinds
    assert ledger.names() == ["delete_logs", "delete_logs"]


async def test_a_receiver_that_hangs_delays_delivery_never_a_decision(
    redis_url: str, slack_api: FakeSlackAPI
) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(delete_then_say("/var/log/app", "Deleted."), ledger)
    async with Receiver(["hang"]) as receiver:
        # A minute's timeout: the one POST in flight hangs for all of the run below (a run
        # that waited for it would not finish within the wait's bound, on any machine).
        settings = webhook_settings(receiver.url, webhook_timeout_seconds=60.0)
        async with BotHarness(redis_url, agent, POLICY, slack=slack_api, settings=settings) as bot:
            approval = await bot.start_and_wait("clean up", user="U1")
            await bot.click(approval, APPROVE, user="U2")
            await bot.wait_for_status("finished", timeout=30)
            assert len(receiver.attempts) == 1  # still the first POST: it neither ended nor retried
            assert ledger.names() == ["delete_logs"]
            assert receiver.accepted == []  # nothing got through meanwhile
            text = await metrics_text(bot)
            [age] = [
                float(line.split()[-1])
                for line in text.splitlines()
                if line.startswith("approval_bot_webhook_backlog_age_seconds ")
            ]
            assert age > 0
            receiver.hang.set()  # the receiver is back
            await delivered_all(bot, receiver)
            text = await metrics_text(bot)
            assert "approval_bot_webhook_backlog_age_seconds 0.0" in text
    assert receiver.duplicates == 0 and receiver.unsigned == 0


async def test_undelivered_events_survive_a_restart(
    slack: FakeSlackAPI, policy_file: Path, tmp_path: Path, redis_url: str
) -> None:
    hook_port = free_port()  # nothing listens there yet: every attempt is refused
    env = bot_env(
        slack,
        policy_file,
        tmp_path,
        REDIS_URL=redis_url,
        APPROVAL_BOT_JOB_LEASE_SECONDS="2",  # the killed process's lease lapses soon
        APPROVAL_BOT_WEBHOOK_URL=f"http://127.0.0.1:{hook_port}/hook",
        APPROVAL_BOT_WEBHOOK_SECRET=SECRET,
        APPROVAL_BOT_WEBHOOK_RETRY_SECONDS="0.05",
        APPROVAL_BOT_WEBHOOK_RETRY_MAX_SECONDS="0.2",
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}/slack/events"
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        async with running_bot(env, port) as first, SlackRequests(url, SIGNING_SECRET) as sent:
            assert (await sent.command("/var/log/app", user="U1", channel="C1")).status == 200
            [approval] = await wait_until(lambda: slack.approval_messages(), what="the card")
            first.send_signal(signal.SIGKILL)
            await asyncio.to_thread(first.wait, 10)
        before = [entry_id for entry_id, _ in await client.xrange(AUDIT_STREAM)]
        assert len(before) >= 2  # run_started, paused: never delivered
        port = free_port()  # the new process's
        url = f"http://127.0.0.1:{port}/slack/events"
        async with (
            Receiver(sock=take_socket(hook_port)) as receiver,
            running_bot(env, port),
            SlackRequests(url, SIGNING_SECRET) as sent,
        ):
            await wait_until(lambda: receiver.ids()[: len(before)] == before, timeout=30,
                             what="the events from before the restart")  # fmt: skip
            await sent.click(APPROVE, approval.button_value(APPROVE), user="U2", channel="C1")

            async def finished() -> bool:
                return "run_finished" in [e["kind"] for e in receiver.accepted]

            await wait_until(finished, timeout=30, what="the run's end at the receiver")
        audit = [entry_id for entry_id, _ in await client.xrange(AUDIT_STREAM)]
    finally:
        await client.aclose()
    assert receiver.ids() == audit and receiver.duplicates == 0 and receiver.unsigned == 0


async def test_entries_past_the_bound_are_skipped_and_the_skip_is_delivered(
    redis_url: str, slack_api: FakeSlackAPI
) -> None:
    ledger = Ledger()
    agent, _ = ops_agent(delete_then_say("/var/log/app", "Deleted."), ledger)
    clock = SkippingClock()
    async with Receiver(["hang"]) as receiver:
        # The hung POST is given up on soon (nothing here counts attempts or duplicates).
        settings = webhook_settings(
            receiver.url, webhook_max_age_hours=1.0, webhook_timeout_seconds=0.3
        )
        async with BotHarness(
            redis_url, agent, POLICY, slack=slack_api, settings=settings, clock=clock
        ) as bot:
            await bot.start_and_wait("clean up", user="U1")
            stale = [e["id"] for e in await bot.audit()]
            clock.advance(3601)  # the receiver has been down for over an hour

            async def audited() -> bool:
                return "webhook_skipped" in [e["kind"] for e in await bot.audit()]

            await wait_until(audited, what="the skip in the audit trail")
            receiver.hang.set()  # back: what waited over an hour is not sent, the skip is

            async def skipped() -> dict[str, Any] | None:
                kinds = {e["kind"]: e for e in receiver.accepted}
                return kinds.get("webhook_skipped")

            event = await wait_until(skipped, what="the skip at the receiver")
    assert event["decision"] == str(len(stale))
    assert event["detail"] == f"{stale[0]}..{stale[-1]}"
    assert not set(stale) & set(receiver.ids())  # past the bound: skipped, not sent late


def test_a_webhook_needs_a_secret_an_http_url_and_a_bound_within_the_audit_retention() -> None:
    from bot.config import Settings

    def problems(**fields: Any) -> list[str]:
        settings = Settings(_env_file=None, **fields)  # type: ignore[call-arg]
        return settings.webhook_problems()

    assert problems() == [] and problems(webhook_url="") == []  # off
    assert problems(webhook_url="https://siem.example/hook", webhook_secret=SECRET) == []
    [missing] = problems(webhook_url="https://siem.example/hook")
    assert "APPROVAL_BOT_WEBHOOK_SECRET must be set" in missing
    short = problems(webhook_url="ftp://siem.example/hook", webhook_secret="short-secret")
    assert len(short) == 2 and "http:// or https://" in short[0]
    assert "short-secret" not in " ".join(short)  # a secret is never echoed
    [bound] = problems(
        webhook_url="https://siem.example/hook", webhook_secret=SECRET,
        webhook_max_age_hours=48, audit_retention_days=1,
    )  # fmt: skip
    assert "APPROVAL_BOT_WEBHOOK_MAX_AGE_HOURS=48 is longer than" in bound


# What free text leaves the bot (#29, item 12) ---------------------------------------------------

SAID = {  # free text of each kind, each with a secret the receiver must not get as it is
    "task": "rotate the keys; the old one is sk-TASKSECRET0123456789",
    "question": "Which disk? QUESTIONSECRET",
    "answer": "the second one, ANSWERSECRET",
    "edit": "/var/log/EDITSECRET",
    "reason": "not today, REASONSECRET",
    "output": "Done; the new password is OUTPUTSECRET",
    "follow_up": "and the db? FOLLOWUPSECRET",
}
ORIGINAL = "/var/log/ORIGINALSECRET"  # the agent's own arguments: never sent
SECRETS = ["TASKSECRET", "QUESTIONSECRET", "ANSWERSECRET", "EDITSECRET", "REASONSECRET",
           "OUTPUTSECRET", "FOLLOWUPSECRET"]  # fmt: skip


def every_kind_of_free_text() -> tuple[Any, Any]:
    """A run whose task, question and answer, edited arguments, rejection reason, output and
    follow-up each carry a secret; the agent's original arguments carry one too."""
    agent, model = ops_agent(
        [
            [function_call("ask_human", {"question": SAID["question"]}, call_id="q1")],
            [function_call("delete_logs", {"path": ORIGINAL}, call_id="c1")],
            [function_call("delete_logs", {"path": SAID["edit"]}, call_id="c2")],
            [function_call("restart_service", {"service": "db"}, call_id="c3")],
            [assistant_message(SAID["output"])],
            [assistant_message("The db is fine.")],
        ],
        Ledger(),
        extra_tools=[ask_human],
    )
    return agent, model


async def free_text_run(bot: BotHarness) -> None:
    await bot.slack.command(SAID["task"], user="U1", channel="C1")
    [question] = await bot.wait_for_questions(1)
    await bot.answer(question, user="U2", text=SAID["answer"])
    [card] = await bot.wait_for_approvals(1)
    sent = await bot.edit(card, user="U2", path=SAID["edit"])
    assert sent.status == 200, sent.text
    [restart] = await wait_until(
        lambda: [c for c in bot.pending_cards() if "restart_service" in c.all_text()] or None,
        what="the restart's card",
    )
    await bot.reject(restart, user="U3", reason=SAID["reason"])
    await bot.wait_for_status("finished")
    await bot.reply(bot.run_message(), SAID["follow_up"], user="U1")
    await wait_until(
        lambda: [m for m in bot.run_thread() if "The db is fine." in m.all_text()],
        what="the follow-up's answer",
    )
    await bot.idle()


def keyed(text: str) -> str:
    return hmac.new(SECRET.encode(), text.encode(), hashlib.sha256).hexdigest()


@pytest.mark.parametrize("free_text", [False, True], ids=["default", "free-text-on"])
async def test_free_text_leaves_as_a_digest_unless_the_operator_says_otherwise(
    redis_url: str, slack_api: FakeSlackAPI, free_text: bool
) -> None:
    """By default no free text leaves (its length and keyed digest do); with
    APPROVAL_BOT_WEBHOOK_FREE_TEXT=true it does, credentials masked. The agent's own
    arguments never leave, either way."""
    agent, _ = every_kind_of_free_text()
    async with Receiver() as receiver:
        settings = webhook_settings(receiver.url, webhook_free_text=free_text)
        async with BotHarness(redis_url, agent, POLICY, slack=slack_api, settings=settings) as bot:
            await free_text_run(bot)
            audit = await delivered_all(bot, receiver)
    sent = json.dumps(receiver.accepted, ensure_ascii=False)
    assert ORIGINAL not in sent and "ORIGINALSECRET" not in sent
    texts = {(e["kind"], e.get("decision", ""), e["text"]) for e in audit if e.get("text")}
    # Each kind of free text is in the audit trail's `text` (the operator's), and only there.
    assert {
        ("run_started", "", SAID["task"]), ("asked", "", SAID["question"]),
        ("answered", "answer", SAID["answer"]),
        ("edited", "edit", json.dumps({"path": SAID["edit"]}, separators=(",", ":"))),
        ("decided", "reject", SAID["reason"]), ("run_finished", "", SAID["output"]),
        ("turn_started", "", SAID["follow_up"]),
    } <= texts, texts  # fmt: skip
    assert not [e for e in audit if any(s in e.get("detail", "") for s in SECRETS)]
    events = {e["id"]: e for e in receiver.accepted}
    for entry in (e for e in audit if e.get("text")):
        event = events[entry["id"]]
        assert event["text_chars"] == len(entry["text"])
        assert event["text_hmac"] == keyed(entry["text"])
        if free_text:
            assert event["text"] == entry["text"].replace("sk-TASKSECRET0123456789", "***")
        else:
            assert "text" not in event
    leaked = [s for s in SECRETS if s in sent]
    if free_text:  # every kind sent, but the credential masked as the logs mask it
        assert leaked == SECRETS[1:] and "sk-TASKSECRET" not in sent
    else:
        assert leaked == []
