"""The Slack listeners (bot/slack/listeners) as Slack drives them: signed HTTP requests into the
real Bolt app, the real service on a real redis-server, the Slack Web API stand-in.

Every command, button, form and event has its listener; each acks first and works in the
background, takes the actor from the signed request, answers "still working" past the ack
budget and the outcome when it comes, says "try again" when Redis fails it, and routes each
action to its own service call. A slow or failing dependency is a fault at the edge: a
redis-server stopped (SIGSTOP: what waits on it is slow) or refusing a command (its ACL:
NOPERM), a Slack method that hangs or fails.

Elsewhere, end to end too: a click decided within the lull while a request stays in flight
(tests/test_acks_first.py), the gate itself step by step (tests/test_foreground.py), a stall
that holds no answer (tests/test_stalls.py), a reply author's own workspace
(tests/test_reactions.py, tests/test_hostile_leftovers.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import redis
import redis.asyncio as aioredis

from bot.slack import blocks
from bot.slack.listeners.actions import FORM_FAILED
from bot.slack.listeners.commands import STILL_WORKING_COMMAND
from bot.slack.listeners.shared import STILL_WORKING, TRY_AGAIN
from bot.slack.listeners.views import STILL_WORKING_REJECTION
from bot.store.connection import EmbeddedRedis
from bot.testing.harness import BotHarness, wait_until
from bot.testing.requests import Sent
from bot.testing.slack_api import FakeSlackAPI, Message
from tests.agents_for_tests import POLICY as BASE_POLICY
from tests.test_stalls import stalled, stateless_agent

# The tests' usual policy (C1: anyone starts, U2 or U3 approves), and two channels more.
POLICY = (
    BASE_POLICY
    + """  C2:
    starters: [U2]
    approvers: [U2]
  C3:
    starters: ["@sre"]
    approvers: [U2]
"""
)
# A budget short enough that the tests of slow answers do not wait long for it, and a lull
# below it (`Settings`: the lull must be shorter).
SHORT = {"ack_budget_seconds": 0.3, "lull_max_seconds": 0.05}


@asynccontextmanager
async def bot_on(
    redis_url: str, slack_api: FakeSlackAPI, executed: list[str], **settings: float
) -> AsyncIterator[BotHarness]:
    """The whole bot, serving two agents (`ops`, the default, and `db`) that ask to delete the
    path they are given (each deletion recorded in `executed`)."""
    agents = {"ops": stateless_agent(executed), "db": stateless_agent(executed)}
    async with BotHarness(redis_url, agents, POLICY, slack=slack_api, settings=settings) as bot:
        yield bot


@contextmanager
def refusing(redis_url: str, *commands: str) -> Iterator[None]:
    """The redis-server refuses these commands (NOPERM: its ACL no longer lets the bot run
    them); the rest goes on, the blocking reads of the bot's worker included."""
    client = redis.Redis.from_url(redis_url)
    client.execute_command("ACL", "SETUSER", "default", *(f"-{c}" for c in commands))
    try:
        yield
    finally:
        client.execute_command("ACL", "SETUSER", "default", *(f"+{c}" for c in commands))
        client.close()


@asynccontextmanager
async def monitored(redis_url: str) -> AsyncIterator[list[str]]:
    """Every command the redis-server runs meanwhile, in its order (MONITOR)."""
    client = aioredis.Redis.from_url(redis_url)
    seen: list[str] = []

    async def listen() -> None:
        async with client.monitor() as monitor:
            async for command in monitor.listen():
                seen.append(str(command.get("command", "")))

    listening = asyncio.create_task(listen())
    try:
        await mark(client, seen, "monitoring")
        yield seen
    finally:
        listening.cancel()
        await asyncio.gather(listening, return_exceptions=True)
        await client.aclose()


async def mark(client: aioredis.Redis, seen: list[str], marker: str) -> list[str]:
    """What Redis ran before `marker`, a command of the test's own, once MONITOR shows it
    (sent again until it does: MONITOR may not have started yet)."""

    async def shown() -> bool:
        if not any(marker in command for command in seen):
            await client.echo(marker)
        return any(marker in command for command in seen)

    await wait_until(shown, what=f"Redis to run {marker!r}")
    return seen[: next(i for i, c in enumerate(seen) if marker in c)]


async def start(bot: BotHarness, *paths: str) -> list[Message]:
    """U1 starts a run on each path in C1, one after the other; the card of each."""
    cards = []
    for path in paths:
        shown = {card.ts for card in bot.pending_cards()}
        await bot.slack.command(path, user="U1", channel="C1")
        waiting = await bot.wait_for_cards(len(shown) + 1)
        cards += [card for card in waiting if card.ts not in shown]
    return cards


async def entries(bot: BotHarness, kind: str) -> list[dict[str, str]]:
    return [e for e in await bot.audit() if e["kind"] == kind]


async def told(bot: BotHarness, user: str, count: int = 1, *, interim: bool = False) -> list[str]:
    """What `user` was told privately, once it is `count` things. (Without the harness's
    explanation of a timeout: it reads Redis, which may be stopped.)"""
    await wait_until(
        lambda: len(bot.slack_api.ephemeral_to(user, interim=interim)) >= count,
        what=f"{count} private message(s) to {user}",
    )
    return bot.slack_api.ephemeral_to(user, interim=interim)


def ephemeral_of(bot: BotHarness, user: str) -> list[dict[str, Any]]:
    return [e for e in bot.slack_api.ephemeral if e.get("user") == user]


def answer(sent: Sent) -> dict[str, Any]:
    """The body of an ack ({} for an empty one)."""
    assert sent.status == 200, sent
    return dict(sent.json()) if sent.text else {}


async def test_every_command_button_form_and_event_has_its_listener(
    slack_api: FakeSlackAPI, redis_url: str
) -> None:
    """Bolt answers 404 to what no listener takes: every id the bot's messages, forms and
    manifest use is taken (answered, or refused as malformed: these carry made-up values), and
    ids nobody uses are not."""
    actions = [
        *blocks.DECISION_ACTIONS, blocks.CANCEL_RUN, blocks.REVIEW_DONE, blocks.REVIEW_RERUN,
        blocks.REPLY_REJECT, blocks.REPLY_KEEP, blocks.SHOW_ALL, blocks.SHOW_CONVERSATION,
        blocks.MORE, blocks.EDIT, blocks.GRANT_REVOKE, *blocks.BATCH_ACTIONS, blocks.HOME_PICK,
    ]  # fmt: skip
    views = [
        blocks.REJECT_MODAL, blocks.CONFIRM_MODAL, blocks.EDIT_MODAL, blocks.GRANT_MODAL,
        blocks.BATCH_MODAL,
    ]  # fmt: skip
    events = ["app_home_opened", "message", "app_mention", "reaction_added"]
    async with bot_on(redis_url, slack_api, []) as bot:
        slack = bot.slack

        async def event(kind: str) -> int:
            body = {"type": kind, "user": "U3", "channel": "C1", "ts": "1.0", "text": "hi"}
            return (await slack.send_json(slack.event_payload(body))).status

        for action_id in [*actions, "no_such_button"]:
            sent = await slack.click(action_id, "gone", user="U3", channel="C1")
            assert (sent.status == 404) == (action_id == "no_such_button"), (action_id, sent)
        for callback_id in [*views, "no_such_form"]:
            form = {"callback_id": callback_id, "private_metadata": "{}"}
            sent = await slack.submit(form, {}, user="U3")
            assert (sent.status == 404) == (callback_id == "no_such_form"), (callback_id, sent)
        for kind in [*events, "pin_added"]:
            assert (await event(kind) == 404) == (kind == "pin_added"), kind
        assert (await slack.command("help", user="U3", channel="C1")).status == 200
        await bot.idle()


async def test_the_agent_command(slack_api: FakeSlackAPI, redis_url: str) -> None:
    """Help at once, without the service; a run started for the signed user and acked empty;
    a refusal and a question's answer in the ack; "try again" when Redis refuses."""
    executed: list[str] = []
    async with bot_on(redis_url, slack_api, executed) as bot:
        helped = answer(await bot.slack.command("help", user="U1", channel="C1"))
        assert helped["response_type"] == "ephemeral"
        assert "Agents: `ops`, `db`" in helped["text"]
        assert await bot.audit() == []  # nothing asked of the service

        assert answer(await bot.slack.command("run db /var/log/a", user="U1", channel="C1")) == {}
        [started] = await entries(bot, "run_started")
        assert (started["user"], started["agent"], started["text"]) == ("U1", "db", "/var/log/a")
        await bot.wait_for_cards(1)

        refused = answer(await bot.slack.command("/var/log/b", user="U1", channel="C2"))
        [refusal] = await entries(bot, "start_refused")
        assert refused == {"response_type": "ephemeral", "text": refusal["detail"]}
        assert refusal["user"] == "U1" and len(await entries(bot, "run_started")) == 1

        run_id = started["run_id"]
        cancelled = answer(await bot.slack.command(f"cancel {run_id}", user="U1", channel="C1"))
        assert cancelled["response_type"] == "ephemeral"
        assert cancelled["text"].startswith(f"Cancelled run `{run_id}`"), cancelled
        await bot.idle()

        with refusing(redis_url, "evalsha", "eval"):  # a start's admission is a script
            failed = answer(await bot.slack.command("/var/log/c", user="U1", channel="C1"))
        assert failed == {"response_type": "ephemeral", "text": TRY_AGAIN}
        await bot.idle()
    assert executed == [] and slack_api.ephemeral == []


async def test_slow_answers_say_still_working_then_the_outcome(
    slack_api: FakeSlackAPI, redis_url: str, redis_server: EmbeddedRedis
) -> None:
    """Past the ack budget: a command is answered "still working" and its outcome told later;
    a click's clicker is told "still working" once, then the outcome; a quick decision says
    nothing; a rejection form closes at once and says it is still being worked on."""
    executed: list[str] = []
    slack_api.usergroups = {"S0SRE": ("sre", ["U7"])}
    async with bot_on(redis_url, slack_api, executed, **SHORT) as bot:
        # A start whose starters' group Slack does not name in time.
        slack_api.hang("usergroups.list")
        slow = answer(await bot.slack.command("/var/log/z", user="U1", channel="C3"))
        assert slow == {"response_type": "ephemeral", "text": STILL_WORKING_COMMAND}
        slack_api.release()  # Slack names the group now: U1 is not in it
        [refusal] = await told(bot, "U1")
        assert refusal == (await entries(bot, "start_refused"))[0]["detail"]

        # A question Redis answers late.
        with stalled(redis_server):
            late = answer(await bot.slack.command("cancel 0123456789abcdef", user="U1",
                                                  channel="C1"))  # fmt: skip
        assert late == {"response_type": "ephemeral", "text": STILL_WORKING_COMMAND}
        [_, posted] = await told(bot, "U1", 2)
        assert "0123456789abcdef" in posted

        quick, slow_card, rejected = await start(bot, "/a", "/b", "/c")
        await bot.click(quick, blocks.APPROVE, user="U2")
        await wait_until(lambda: executed == ["/a"], what="the quick decision's tool")

        # A click Redis answers late, by someone the policy refuses.
        with stalled(redis_server):
            sent = await bot.click(slow_card, blocks.APPROVE, user="U4")
            assert sent.status == 200
            assert await told(bot, "U4", interim=True) == [STILL_WORKING]
        [note, outcome] = await told(bot, "U4", 2, interim=True)
        assert note == STILL_WORKING and "not among the approvers" in outcome
        # That note came past the budget of a click made after the quick one's: the quick
        # decision's note was due before it, and never sent.
        assert bot.slack_api.ephemeral_to("U2", interim=True) == []

        form = await bot.modal(rejected, blocks.REJECT, user="U3")
        reason = {blocks.REASON_BLOCK: {blocks.REASON_INPUT: {"value": "too late"}}}
        with stalled(redis_server):
            closed = answer(await bot.slack.submit(form, reason, user="U3"))
            assert closed == {}
            assert await told(bot, "U3", interim=True) == [STILL_WORKING_REJECTION]
        await wait_until(lambda: "Rejected by <@U3>" in rejected.all_text(), what="the rejection")
        await bot.idle()
    assert executed == ["/a"]
    assert slack_api.ephemeral_to("U3", interim=True) == [STILL_WORKING_REJECTION]


async def test_a_click_acks_first_and_is_decided_for_the_clicker(
    slack_api: FakeSlackAPI, redis_url: str, redis_server: EmbeddedRedis
) -> None:
    """Acked while Redis cannot have recorded anything; decided for the signed clicker
    (Approve, Always approve); refusals told privately, a person as a mention; "try again"
    when Redis refuses the click's read."""
    executed: list[str] = []
    async with bot_on(redis_url, slack_api, executed) as bot:
        first, always, refused, failing = await start(bot, "/a", "/b", "/c", "/d")
        with stalled(redis_server):
            sent = await bot.click(first, blocks.APPROVE, user="U2")
            assert sent.status == 200 and sent.text == ""  # acked, nothing decided yet
        await wait_until(lambda: executed == ["/a"], what="the first tool")
        await bot.click(always, blocks.ALWAYS_APPROVE, user="U3")
        await wait_until(lambda: executed == ["/a", "/b"], what="the second tool")
        decided = [(e["user"], e["decision"]) for e in await entries(bot, "decided")]
        assert decided == [("U2", "approve"), ("U3", "always_approve")]
        await bot.idle()
        assert slack_api.ephemeral == []  # a decision made shows on the card

        approve = refused.button_value(blocks.APPROVE)
        await bot.click(refused, blocks.APPROVE, user="U4")
        assert (await told(bot, "U4"))[0].startswith("You are not among the approvers")
        await bot.click(refused, blocks.APPROVE, user="U2")
        await wait_until(lambda: len(executed) == 3, what="the third tool")
        await bot.slack.click(blocks.APPROVE, approve, user="U3", channel="C1")
        assert "already approved by <@U2>" in (await told(bot, "U3"))[0]

        with refusing(redis_url, "hgetall"):  # the click's read of its call and run
            assert (await bot.click(failing, blocks.APPROVE, user="U2")).status == 200
            assert await told(bot, "U2") == [TRY_AGAIN]
        await bot.idle()
    assert executed == ["/a", "/b", "/c"]  # the failed click decided nothing


async def test_the_reject_form(slack_api: FakeSlackAPI, redis_url: str) -> None:
    """Reject opens the form with the click's own trigger; refused, it is told and not
    opened; Slack refusing it is told with Slack's error; submitted, the rejection is decided
    for the signed submitter and the form closes, or the refusal is shown in the form."""
    async with bot_on(redis_url, slack_api, []) as bot:
        card = await bot.start_and_wait("/var/log/a", user="U1")
        payload = bot.slack.click_payload(
            blocks.REJECT, card.button_value(blocks.REJECT), user="U2", channel="C1",
            message_ts=card.ts,
        )  # fmt: skip
        assert (await bot.slack.send_interaction(payload)).status == 200
        await wait_until(lambda: slack_api.views, what="the reject form")
        [opened] = slack_api.views
        assert opened["trigger_id"] == payload["trigger_id"]
        meta = json.loads(opened["view"]["private_metadata"])
        assert meta == {"approval_id": card.button_value(blocks.REJECT), "always": False,
                        "channel": "C1"}  # fmt: skip
        always = await bot.modal(card, blocks.ALWAYS_REJECT, user="U2")
        assert json.loads(always["private_metadata"])["always"] is True

        await bot.click(card, blocks.REJECT, user="U4")
        assert (await told(bot, "U4"))[0].startswith("You are not among the approvers")
        slack_api.fail_methods.add("views.open")
        slack_api.fail_error = "expired_trigger_id"
        await bot.click(card, blocks.REJECT, user="U3")
        assert await told(bot, "U3") == [FORM_FAILED.format(error="expired_trigger_id")]
        slack_api.fail_methods.clear()
        assert len(slack_api.views) == 2  # neither opened one

        reason = {blocks.REASON_BLOCK: {blocks.REASON_INPUT: {"value": "risky"}}}
        garbled = {**always, "private_metadata": "{not json"}  # refused before any listener
        unreadable = await bot.slack.submit(garbled, reason, user="U2")
        assert (unreadable.status, unreadable.text) == (
            400,
            "`view.private_metadata` is not valid JSON",
        )
        assert await entries(bot, "decided") == []

        assert answer(await bot.slack.submit(always, reason, user="U2")) == {}
        [decided] = await entries(bot, "decided")
        assert (decided["user"], decided["decision"]) == ("U2", "always_reject")
        again = answer(await bot.slack.submit(opened["view"], reason, user="U3"))
        assert again["response_action"] == "errors"
        assert "already rejected" in again["errors"][blocks.REASON_BLOCK]
        await bot.idle()


async def test_events_and_private_buttons(slack_api: FakeSlackAPI, redis_url: str) -> None:
    """A thread reply decides for its signed author; what is not one is ignored; an
    ambiguous one is asked about privately in its thread, and a refusal told there; the same
    event twice is done once; each private button goes to its own service call and answers
    its clicker only; a cancel that worked says nothing; the App Home is published when
    opened."""
    executed: list[str] = []
    async with bot_on(redis_url, slack_api, executed) as bot:
        card = await bot.start_and_wait("/var/log/a", user="U1")
        before = len(await bot.audit())
        for event in (
            {"channel": "C1", "user": "U2", "text": "reject: no", "ts": "2.0"},  # no thread
            {"channel": "C1", "bot_id": "B1", "text": "reject: x", "ts": "2.1",
             "thread_ts": card.ts},
            {"channel": "C1", "subtype": "message_changed", "ts": "2.2", "thread_ts": card.ts},
        ):  # fmt: skip
            payload = bot.slack.event_payload({"type": "message", **event})
            assert (await bot.slack.send_json(payload)).status == 200
        await bot.idle()
        assert len(await bot.audit()) == before and slack_api.ephemeral == []

        await bot.reply(card, "reject this", user="U2")
        [asked] = await wait_until(lambda: ephemeral_of(bot, "U2"), what="the question")
        assert asked["thread_ts"] == card.ts and asked["channel"] == "C1"
        buttons = Message("C1", "", "", asked["blocks"])
        keep = buttons.button_value(blocks.REPLY_KEEP)
        await bot.slack.click(blocks.REPLY_KEEP, keep, user="U2", channel="C1")
        [_, kept] = await told(bot, "U2", 2)
        assert "comment" in kept.lower()

        for _ in range(2):  # Slack sends an event again when it was not acked in time
            await bot.slack.thread_reply("reject: no", user="U4", channel="C1",
                                         thread_ts=card.ts, event_id="EvTWICE")  # fmt: skip
        await bot.idle()
        [refusal] = ephemeral_of(bot, "U4")
        assert refusal["thread_ts"] == card.ts and "not among" in refusal["text"]

        for action_id in (blocks.REVIEW_DONE, blocks.REVIEW_RERUN, blocks.REPLY_REJECT):
            await bot.slack.click(action_id, "gone", user="U5", channel="C1")
        await bot.idle()
        review_done, review_rerun, reply_reject = slack_api.ephemeral_to("U5")
        assert review_done == review_rerun != reply_reject, (review_done, reply_reject)
        assert "review" in review_done.lower() and "review" not in reply_reject.lower()

        await bot.reply(card, "reject: not &lt;now&gt;", user="U3")
        [decided] = await wait_until(lambda: entries(bot, "decided"), what="the rejection")
        assert (decided["user"], decided["decision"]) == ("U3", "reject")
        assert decided["text"] == "not <now>"  # as the author wrote it (Slack escapes <>)

        second = await bot.start_and_wait("/var/log/b", user="U1")
        run = bot.run_message()
        await bot.click(run, blocks.CANCEL_RUN, user="U1")
        await bot.wait_for_status("cancel")
        await bot.idle()
        assert slack_api.ephemeral_to("U1") == [] and not second.action_ids()

        for tab in ("messages", "home"):
            event = {"type": "app_home_opened", "user": "U6", "tab": tab}
            await bot.slack.send_json(bot.slack.event_payload(event))
        await wait_until(lambda: "U6" in slack_api.home_views, what="the App Home")
        await bot.idle()
        assert slack_api.home_publishes["U6"] == 1
    assert executed == []


async def test_a_click_among_other_requests_reads_nothing_before_the_lull(
    slack_api: FakeSlackAPI, redis_url: str
) -> None:
    """Acks first (#32): with another Slack request in flight, nothing of a click's decision,
    its read of the call and run included, reaches Redis before the lull (a click alone has
    that read sent while its ack is written: `Foreground.alone`, tests/test_foreground.py)."""
    executed: list[str] = []
    slack_api.usergroups = {"S0SRE": ("sre", ["U1"])}
    held = {"ack_budget_seconds": 2.5, "lull_max_seconds": 2.4}  # the longest there can be
    async with bot_on(redis_url, slack_api, executed, **held) as bot:
        [card] = await start(bot, "/a")
        [started] = await entries(bot, "run_started")
        # A command in flight: its starters' group is being looked up.
        slack_api.hang("usergroups.list")
        command = asyncio.create_task(bot.slack.command("/b", user="U1", channel="C3"))
        await wait_until(lambda: slack_api.hanging == 1, what="the command in flight")
        async with monitored(redis_url) as seen:
            assert (await bot.click(card, blocks.APPROVE, user="U2")).status == 200
            # A whole request answered since the ack: a read sent with it would be in Redis.
            await bot.slack.command("help", user="U2", channel="C1")
            client = aioredis.Redis.from_url(redis_url)
            before = await mark(client, seen, "acked")
            await client.aclose()
            assert not command.done()  # (so no lull yet)
        assert [c for c in before if started["run_id"] in c] == []
        slack_api.release()
        assert (await command).status == 200
        await wait_until(lambda: executed == ["/a"], what="the decision after the lull")
        await bot.idle()
