"""Acks first, through signed HTTP into the real app: a click's decision waits for a lull in
Slack's requests, no longer than APPROVAL_BOT_LULL_MAX_SECONDS; the resume it sets off waits
for it (and for the next lull).

A `/agent` command in a channel whose starters are a user group stays in flight while Slack
does not answer `usergroups.list` (until the ack budget); a click on another run's card
meanwhile is acked at once and decided after the lull's maximum, while the command is still
unanswered. With nothing in flight the same click is decided, and its tool run, at once.

What is asserted is the order of events and lower bounds (a busy machine only makes things
later): the ack before the decision, the decision after the lull's maximum and before the
command's answer (the ack budget at its longest, 2.5 s, leaves two seconds between them). That
a lull comes at once with nothing in flight is `tests/test_foreground.py`'s, step by step; how
long acks and decisions take is measured by `benchmarks/decisions.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import AsyncIterator
from typing import Any

from slack_bolt.middleware.async_custom_middleware import AsyncCustomMiddleware

from bot.service.foreground import GC_HELD_MAX
from bot.slack.app import STILL_WORKING, STILL_WORKING_COMMAND
from bot.slack.blocks import APPROVE
from bot.slack.listeners.middleware import DropDuplicateEvents
from bot.testing.harness import BotHarness, wait_until
from bot.testing.slack_api import FakeSlackAPI
from tests.test_stalls import stateless_agent

LULL = 0.5
POLICY = """
defaults:
  allow_self_approval: false
channels:
  C1:
    starters: ["*"]
    approvers: ["U2"]
  C2:
    starters: ["@sre"]
    approvers: ["U2"]
"""


async def decided_at(bot: BotHarness, count: int) -> float:
    """When (Unix time) the `count`-th decision was recorded."""

    async def decisions() -> list[dict[str, str]]:
        entries = [e for e in await bot.audit() if e["kind"] == "decided"]
        return entries if len(entries) >= count else []

    entries = await wait_until(decisions, timeout=30, what=f"decision {count}")
    return float(entries[count - 1]["time"])


async def test_a_click_is_decided_within_the_lull_while_a_request_stays_in_flight(
    slack_api: FakeSlackAPI, redis_url: str
) -> None:
    slack_api.usergroups = {"S0SRE": ("sre", ["U1"])}
    executed: list[str] = []
    settings = {"lull_max_seconds": LULL, "ack_budget_seconds": 2.5}
    async with BotHarness(
        redis_url, stateless_agent(executed), POLICY, slack=slack_api, settings=settings
    ) as bot:
        first = await bot.start_and_wait("/var/log/a", user="U1")
        await bot.slack.command("/var/log/b", user="U1", channel="C1")
        [second] = [c for c in await bot.wait_for_approvals(2) if c.ts != first.ts]

        # Nothing in flight: the click is decided and its tool run.
        clicked = time.time()
        sent = await bot.click(first, APPROVE, user="U2")
        assert sent.status == 200
        await wait_until(lambda: executed == ["/var/log/a"], what="the first tool")
        assert await decided_at(bot, 1) >= clicked
        await bot.idle()

        # A command stays in flight (its starter's group is being looked up) ...
        slack_api.hang("usergroups.list")
        command = asyncio.create_task(bot.slack.command("/var/log/c", user="U1", channel="C2"))
        await wait_until(lambda: slack_api.hanging == 1, what="the command to be in flight")
        # ... while a click on the other card is acked at once and decided after the lull's
        # maximum, before the command is answered; its tool runs after the decision.
        clicked = time.time()
        sent = await bot.click(second, APPROVE, user="U2")
        undecided_at_the_ack = len([e for e in await bot.audit() if e["kind"] == "decided"]) == 1
        assert sent.status == 200 and undecided_at_the_ack  # acked before it was decided
        decided = await decided_at(bot, 2) - clicked
        assert not command.done()  # decided while the command is still in flight
        answer = await command
        answered = time.time() - clicked
        assert LULL * 0.9 <= decided < answered, (decided, answered)
        # Answered once the lookup's own bound ran out (the group is not known) or, had it
        # been longer than the ack budget, saying the command is still being worked on.
        told = answer.text
        assert answer.status == 200 and (STILL_WORKING_COMMAND in told or "@sre" in told), told
        await wait_until(lambda: len(executed) == 2, what="the second tool")
        assert time.time() - clicked >= decided
        slack_api.release()
        await bot.idle()
    assert executed == ["/var/log/a", "/var/log/b"]
    # The deferral brought no note.
    assert STILL_WORKING not in slack_api.ephemeral_to("U2", interim=True)
    assert "Approved by <@U2>" in second.all_text()


def cyclic_garbage(count: int) -> None:
    """`count` container objects that only the cyclic GC frees (each list holds itself)."""
    for _ in range(count):
        each: list[object] = []
        each.append(each)


@contextlib.asynccontextmanager
async def collections_counted_with_a_command_in_flight(
    slack_api: FakeSlackAPI, redis_url: str
) -> AsyncIterator[tuple[BotHarness, asyncio.Task[Any], list[int]]]:
    """A bot with a command held in flight (its directory lookup hangs until released), and
    the generations of the cyclic GC's collections from then on."""
    slack_api.usergroups = {"S0SRE": ("sre", ["U1"])}
    collections: list[int] = []

    def counted(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    settings = {"ack_budget_seconds": 2.5}
    async with BotHarness(
        redis_url, stateless_agent([]), POLICY, slack=slack_api, settings=settings
    ) as bot:
        await bot.idle()
        slack_api.hang("usergroups.list")
        command = asyncio.create_task(bot.slack.command("/var/log/c", user="U1", channel="C2"))
        await wait_until(lambda: slack_api.hanging == 1, what="the command to be in flight")
        gc.callbacks.append(counted)
        try:
            yield bot, command, collections
        finally:
            gc.callbacks.remove(counted)
            slack_api.release()
        await command
        await bot.idle()


async def test_no_collection_stops_a_request_in_flight_what_is_due_is_collected_at_the_lull(
    slack_api: FakeSlackAPI, redis_url: str
) -> None:
    """The cyclic GC's collections wait for a lull in Slack's requests (#32): while a command
    is in flight, three young generations' worth of garbage is made and nothing is collected;
    once it is answered, collections go on."""
    young = gc.get_threshold()[0]
    async with collections_counted_with_a_command_in_flight(slack_api, redis_url) as (
        _, command, collections,
    ):  # fmt: skip
        cyclic_garbage(3 * young)
        held = list(collections)
        slack_api.release()
        assert (await command).status == 200
        await asyncio.sleep(0)  # the first loop iteration with nothing in flight
        cyclic_garbage(3 * young)
        assert gc.isenabled()
    assert held == []  # nothing collected while the command was in flight
    assert collections  # collected once it was answered


async def test_collections_go_on_when_too_much_is_left_uncollected(
    slack_api: FakeSlackAPI, redis_url: str
) -> None:
    """The hold is bounded: a request that starts with more than `GC_HELD_MAX` new objects
    uncollected turns the collector on again, while requests are still in flight."""
    async with collections_counted_with_a_command_in_flight(slack_api, redis_url) as (
        bot, _, collections,
    ):  # fmt: skip
        cyclic_garbage(GC_HELD_MAX + 1000)
        assert collections == [] and not gc.isenabled()  # held meanwhile
        # another request starts (a command anyone may give here: answered at once)
        second = await bot.slack.command("/var/log/d", user="U1", channel="C1")
        assert second.status == 200 and slack_api.hanging == 1  # the first still in flight
        assert gc.isenabled()  # on again at the second's start
        cyclic_garbage(gc.get_threshold()[0] + 1)
        assert collections  # collected with the first command still in flight


async def test_bolt_builds_no_arguments_per_request_for_the_bots_middleware(
    slack_api: FakeSlackAPI, redis_url: str
) -> None:
    """Every request passes the bot's middleware (the duplicate events' check) before its
    listener: Bolt calls it as it is, without building the arguments a function middleware
    names for each request (#32: a tenth of Bolt's CPU for a click)."""
    async with BotHarness(redis_url, stateless_agent([]), POLICY, slack=slack_api) as bot:
        chain = bot.runtime.app._async_middleware_list
        assert not [m for m in chain if isinstance(m, AsyncCustomMiddleware)]
        assert [m for m in chain if isinstance(m, DropDuplicateEvents)]
