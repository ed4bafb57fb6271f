"""Slack's request is answered within the ack budget whatever Redis or Slack do.

Slack counts an answer later than three seconds as a failure (and retries events). Each test
stalls something the bot depends on (a SIGSTOPped redis-server, a `usergroups.list` or
`views.open` that never answers, a storm of clicks on a cold group cache), sends the signed
HTTP request into the real Bolt app, then checks that the work was still done, exactly once,
and that the clicker was told what happened.

What proves that an answer did not wait is the order of events, not a stopwatch (on a busy
machine anything takes longer): it came while the stall still held (the test ends it only
later), or before what the ack budget sets off when it runs out (the note that the click is
still being worked on). The budget itself is below Slack's limit (`test_the_ack_budget_...`);
how fast the answers are is measured by `benchmarks/decisions.py`.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import aiohttp
from agents import Agent, function_tool
from pydantic import Field
from slack_sdk.web.async_client import AsyncWebClient

from bot.config import Settings
from bot.service.ports import GroupLookupError
from bot.slack.app import FORM_FAILED, FORM_LATE, STILL_WORKING, STILL_WORKING_COMMAND
from bot.slack.blocks import APPROVE, REJECT
from bot.slack.directory.groups import SlackGroups
from bot.slack.listeners.views import STILL_WORKING_EDIT
from bot.store.connection import EmbeddedRedis
from bot.testing.harness import BotHarness, edit_values, wait_until
from bot.testing.slack_api import FakeSlackAPI, Message
from tests.agents_for_tests import POLICY, Ledger, function_call, ops_agent
from tests.stateless_agents import StatelessModel

SLACK_LIMIT = 3.0  # seconds: Slack's own limit for an answer
BUDGET = 1.5  # the default APPROVAL_BOT_ACK_BUDGET_SECONDS
FAST = {
    # Many runs start at once in these tests: no start limits, and Slack's pace for posts and
    # updates raised so that their cards show quickly.
    "user_start_burst": 0,
    "channel_start_burst": 0,
    "user_open_runs": 0,
    "channel_open_runs": 0,
    "slack_posts_per_second": 100.0,
    "slack_updates_per_minute": 6000.0,
}
GROUP_POLICY = """
defaults:
  allow_self_approval: false
channels:
  C1:
    starters: ["*"]
    approvers: ["@sre"]
"""


def stateless_agent(executed: list[str]) -> Agent[Any]:
    """An agent that asks to delete the path it was given (from its input alone, so any number
    of runs can share it) and records each real deletion."""

    @function_tool(needs_approval=True)
    async def delete_logs(path: str) -> str:
        """Delete logs under a path."""
        executed.append(path)
        return f"deleted {path}"

    return Agent(name="ops", model=StatelessModel(), tools=[delete_logs])


def test_the_ack_budget_is_below_slacks_limit() -> None:
    assert Settings.model_fields["ack_budget_seconds"].default == BUDGET < SLACK_LIMIT


async def get(http: aiohttp.ClientSession, url: str) -> int:
    async with http.get(url) as response:
        return response.status


@contextmanager
def stalled(redis: EmbeddedRedis) -> Iterator[None]:
    """The redis-server stops answering (SIGSTOP: connections stay open, nothing is read)."""
    assert redis.process is not None
    redis.process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        redis.process.send_signal(signal.SIGCONT)


def decided(message: Message) -> bool:
    return not message.action_ids()


async def test_a_redis_stall_holds_no_answer(slack_api: FakeSlackAPI, tmp_path: Path) -> None:
    own = EmbeddedRedis(tmp_path / "redis")
    await own.start()
    executed: list[str] = []
    try:
        async with (
            BotHarness(own.url, stateless_agent(executed), POLICY, slack=slack_api) as bot,
            aiohttp.ClientSession() as http,
        ):
            card = await bot.start_and_wait("/var/log/a", user="U1")
            # Every answer below comes while Redis is stalled: none waited for it.
            with stalled(own):
                click = await bot.click(card, APPROVE, user="U2")
                # At once: before the budget ran out and its note was sent.
                noted_before_the_ack = list(slack_api.ephemeral_to("U2", interim=True))
                command = await bot.slack.command("/var/log/b", user="U1", channel="C1")
                reply = await bot.slack.thread_reply(
                    "looks right to me", user="U3", channel="C1", thread_ts=card.ts
                )
                healthz = await get(http, f"{bot.url}/healthz")
                readyz = await get(http, f"{bot.url}/readyz")
                # The click could not be recorded yet: its clicker hears that it is in hand.
                await wait_until(
                    lambda: STILL_WORKING in slack_api.ephemeral_to("U2", interim=True),
                    what="the still-working note",
                )
                assert executed == [] and not decided(card)
            assert (click.status, command.status, reply.status) == (200, 200, 200)
            # A click is answered at once (it never waits for the budget); the command at the
            # budget, saying it is still being worked on.
            assert noted_before_the_ack == []
            assert STILL_WORKING_COMMAND in command.text
            assert healthz == 200 and readyz == 503
            # Redis is back: the click is applied, once; the command's run starts and pauses.
            await wait_until(lambda: executed == ["/var/log/a"], what="the tool")
            await wait_until(
                lambda: (
                    len([m for m in slack_api.approval_messages() if m.action_ids()]) == 1
                    and len(slack_api.approval_messages()) == 2
                ),
                what="the second run's card",
            )
            await bot.idle()
            assert await get(http, f"{bot.url}/readyz") == 200
            audit = await bot.audit()
    finally:
        own.stop()
    assert executed == ["/var/log/a"]
    assert [(e["user"], e["decision"]) for e in audit if e["kind"] == "decided"] == [
        ("U2", "approve")
    ]
    assert [e["kind"] for e in audit].count("run_started") == 2
    assert "Approved by <@U2>" in card.all_text()
    # Told once that the click was in hand, and nothing went wrong.
    assert slack_api.ephemeral_to("U2", interim=True) == [STILL_WORKING]
    assert slack_api.ephemeral_to("U1") == []  # the command's run started: nothing to tell
    assert not any("went wrong" in str(e.get("text")) for e in slack_api.ephemeral)


async def test_a_hanging_group_lookup_holds_no_click(
    slack_api: FakeSlackAPI, redis_url: str
) -> None:
    slack_api.usergroups = {"S0SRE": ("sre", ["U2"])}
    slack_api.hang("usergroups.list")
    executed: list[str] = []
    async with BotHarness(
        redis_url, stateless_agent(executed), GROUP_POLICY, slack=slack_api
    ) as bot:
        card = await bot.start_and_wait("/var/log/a", user="U1")
        click = await bot.click(card, APPROVE, user="U2")
        # At once, not at the budget: before the note the budget sets off.
        assert click.status == 200 and slack_api.ephemeral_to("U2", interim=True) == []
        # Slack does not answer: the click is refused, closed, with the reason.
        refusal = await wait_until(
            lambda: [t for t in slack_api.ephemeral_to("U2") if "could not check" in t],
            what="the refusal",
        )
        assert "`@sre` (Slack did not list the user groups within" in refusal[0]
        assert (
            slack_api.ephemeral_to("U2", interim=True)[0] == STILL_WORKING
        )  # said once, before the answer
        assert not decided(card) and executed == []
        # Slack answers at last: the same lookup fills the cache, and the next click counts.
        slack_api.release()
        await bot.idle()
        await bot.click(card, APPROVE, user="U2")
        await wait_until(lambda: executed == ["/var/log/a"], what="the tool")
        await bot.idle()
    assert len(slack_api.calls_to("usergroups.list")) == 1
    assert "Approved by <@U2>" in card.all_text()


async def test_a_hanging_views_open_holds_no_reject_click(
    slack_api: FakeSlackAPI, redis_url: str
) -> None:
    executed: list[str] = []
    async with BotHarness(redis_url, stateless_agent(executed), POLICY, slack=slack_api) as bot:
        card = await bot.start_and_wait("/var/log/a", user="U1")
        slack_api.hang("views.open")
        click = await bot.click(card, REJECT, user="U2")
        # At once, not at the budget: before the note the budget sets off.
        assert click.status == 200 and slack_api.ephemeral_to("U2", interim=True) == []
        await wait_until(
            lambda: slack_api.ephemeral_to("U2", interim=True) == [FORM_LATE], what="the note"
        )
        assert slack_api.hanging == 1  # told while Slack still holds the call
        slack_api.release()
        await wait_until(lambda: slack_api.hanging == 0, what="the release")
        # Slack refuses the form: said so too.
        slack_api.fail_methods.add("views.open")
        await bot.click(card, REJECT, user="U2")
        await wait_until(
            lambda: len(slack_api.ephemeral_to("U2", interim=True)) == 2, what="the refusal"
        )
        assert slack_api.ephemeral_to("U2", interim=True)[1] == FORM_FAILED.format(
            error="fatal_error"
        )
        slack_api.fail_methods.clear()
        assert not decided(card)
        # Clicked again, the form opens and the rejection is applied.
        sent = await bot.reject(card, user="U2", reason="not today")
        assert sent.status == 200 and sent.text == ""
        await wait_until(lambda: decided(card), what="the card to show the rejection")
        await bot.idle()
    assert executed == []
    assert "Rejected by <@U2>" in card.all_text()


async def start_runs(bot: BotHarness, count: int) -> list[Message]:
    for i in range(count):
        sent = await bot.slack.command(f"/srv/{i}", user="U1", channel="C1")
        assert sent.status == 200
    return await bot.wait_for_approvals(count, timeout=60)


async def test_a_storm_of_clicks_on_a_cold_group_cache_makes_one_lookup(
    slack_api: FakeSlackAPI, redis_url: str
) -> None:
    approvers = [f"U{100 + i}" for i in range(20)]
    slack_api.usergroups = {"S0SRE": ("sre", approvers)}
    executed: list[str] = []
    agent = stateless_agent(executed)
    async with BotHarness(redis_url, agent, GROUP_POLICY, slack=slack_api, settings=FAST) as bot:
        cards = await start_runs(bot, 20)
        assert slack_api.calls_to("usergroups.list") == []  # cold
        sent = await asyncio.gather(
            *(
                bot.click(card, APPROVE, user=user)
                for card, user in zip(cards, approvers, strict=True)
            )
        )
        assert [s.status for s in sent] == [200] * 20
        await wait_until(lambda: len(executed) == 20, timeout=60, what="every tool")
        await bot.idle()
        audit = await bot.audit()
    assert len(slack_api.calls_to("usergroups.list")) == 1
    assert sorted(executed) == sorted(f"/srv/{i}" for i in range(20))
    deciders = sorted(e["user"] for e in audit if e["kind"] == "decided")
    assert deciders == sorted(approvers)
    assert all(decided(card) for card in cards)
    # nobody was refused (on a loaded machine a click may be told it is still being worked on)
    assert [e for e in slack_api.ephemeral if e["text"] != STILL_WORKING] == []


async def test_a_storm_of_clicks_while_slack_rate_limits_groups_makes_one_lookup(
    slack_api: FakeSlackAPI, redis_url: str
) -> None:
    approvers = [f"U{100 + i}" for i in range(20)]
    slack_api.usergroups = {"S0SRE": ("sre", approvers)}
    slack_api.rate_limited.add("usergroups.list")  # 429, Retry-After: 1, every time
    executed: list[str] = []
    agent = stateless_agent(executed)
    async with BotHarness(redis_url, agent, GROUP_POLICY, slack=slack_api) as bot:
        # Slack's answer (429 again after the SDK's one retry, a second later) is what the
        # clickers are told, not the lookup's 2 s wait running out first on a loaded machine.
        bot.runtime.groups.lookup.wait = 60.0
        card = await bot.start_and_wait("/var/log/a", user="U1")
        await asyncio.gather(*(bot.click(card, APPROVE, user=user) for user in approvers))
        await bot.idle()
        audit = await bot.audit()
    # One lookup (and the one retry slack_sdk makes after Retry-After), not twenty.
    assert 1 <= len(slack_api.calls_to("usergroups.list")) <= 2
    assert executed == [] and not decided(card)
    for user in approvers:
        [answer] = slack_api.ephemeral_to(user)
        assert "could not check your membership of `@sre`" in answer and "ratelimited" in answer
    assert [e["kind"] for e in audit].count("refused") == 20


async def test_group_lookups_are_shared_cached_and_refreshed_in_the_background() -> None:
    async with FakeSlackAPI() as slack:
        slack.usergroups = {"S0SRE": ("sre", ["U2"])}
        client = AsyncWebClient(token="xoxb-t", base_url=slack.url)
        # Stale for a long while after 0.3 s, and a caller waits for a lookup up to a minute:
        # a stale answer that came at all while the refresh hangs did not wait for it.
        groups = SlackGroups(client, ttl=0.3, failure_ttl=0.3, max_stale=600.0, wait=60.0)

        def lookups() -> int:
            return len(slack.calls_to("usergroups.list"))

        # Cold: concurrent callers share one lookup.
        found = await asyncio.gather(*(groups.members("T1", "@sre") for _ in range(10)))
        assert found == [frozenset({"U2"})] * 10 and lookups() == 1
        # Stale: answered at once with what is known while one refresh runs.
        await asyncio.sleep(0.35)
        slack.usergroups = {"S0SRE": ("sre", ["U2", "U3"])}
        slack.hang("usergroups.list")
        stale = await asyncio.wait_for(
            asyncio.gather(*(groups.members("T1", "@sre") for _ in range(10))), 30
        )
        assert stale == [frozenset({"U2"})] * 10
        await wait_until(lambda: slack.hanging == 1, what="the refresh")
        slack.release()
        await wait_until(lambda: lookups() == 2, what="the refresh's answer")

        async def refreshed() -> bool:
            return "U3" in await groups.members("T1", "@sre")

        await wait_until(refreshed, what="the refreshed members")
        assert lookups() == 2
        # A failed lookup is remembered: callers get its reason without another call.
        groups.forget()
        slack.fail_methods.add("usergroups.list")
        for _ in range(5):
            try:
                await groups.members("T1", "@sre")
            except GroupLookupError as exc:
                assert "fatal_error" in str(exc)
            else:
                raise AssertionError("a failed lookup granted membership")
        assert lookups() == 3
        await groups.close()
        # Slack slow on a cold cache: refused after the wait, closed, while Slack still hangs.
        groups = SlackGroups(client, ttl=0.3, failure_ttl=0.3, max_stale=2.0, wait=0.5)
        slack.fail_methods.clear()
        slack.hang("usergroups.list")
        try:
            await asyncio.wait_for(groups.members("T1", "@sre"), 30)
        except GroupLookupError as exc:
            assert "within 0.5 s" in str(exc)
        else:
            raise AssertionError("a hanging lookup granted membership")
        assert slack.hanging >= 1
        slack.release()
        await groups.close()


async def test_no_request_waits_for_bolt_to_ask_slack_who_the_bot_is(
    slack_api: FakeSlackAPI, redis_url: str
) -> None:
    """Bolt asks `auth.test` on the first request it handles unless it is told the answer the
    bot got at start-up: with Slack hanging then, that request would be lost."""
    executed: list[str] = []
    async with BotHarness(redis_url, stateless_agent(executed), POLICY, slack=slack_api) as bot:
        slack_api.hang("auth.test")
        # (Had it asked, the answer would wait for as long as auth.test hangs: for ever.)
        sent = await asyncio.wait_for(bot.slack.command("/var/log/a", user="U1", channel="C1"), 30)
        assert sent.status == 200 and len(slack_api.calls_to("auth.test")) == 1
        [card] = await bot.wait_for_approvals(1)
        await bot.click(card, APPROVE, user="U2")
        await wait_until(lambda: executed == ["/var/log/a"], what="the tool")
        assert slack_api.hanging == 0
        await bot.idle()
    assert len(slack_api.calls_to("auth.test")) == 1  # the bot's own, at start-up


async def test_an_edit_answered_late_tells_its_errors_escaped(
    slack_api: FakeSlackAPI, tmp_path: Path
) -> None:
    """An edit whose answer misses the ack budget (Redis stalled) is told privately once it is
    checked; the errors quote what was typed, so they are escaped like any untrusted text."""
    own = EmbeddedRedis(tmp_path / "redis")
    await own.start()
    ledger = Ledger()

    @function_tool(needs_approval=True)
    def tag(label: Annotated[str, Field(max_length=5)]) -> str:
        """Tag the deployment."""
        ledger.executed.append(("tag", {"label": label}))
        return f"tagged {label}"

    steps = [[function_call("tag", {"label": "v1"}, call_id="c1")]]
    agent, _ = ops_agent(steps, ledger, extra_tools=[tag])
    try:
        async with BotHarness(own.url, agent, POLICY, slack=slack_api) as bot:
            card = await bot.start_and_wait("tag it", user="U1")
            view = await bot.open_edit(card, user="U2")
            typed = edit_values(view, {"field:label": "<!channel> <@U9>"})
            with stalled(own):  # answered at the budget, the modal closed: nothing said yet
                sent = await bot.slack.submit(view, typed, user="U2")
            assert sent.status == 200 and "errors" not in sent.text
            [told] = await wait_until(
                lambda: [t for t in slack_api.ephemeral_to("U2") if "too long" in t],
                what="the edit's errors, told late",
            )
            assert "&lt;!channel&gt;" in told and "<!channel>" not in told
            assert "&lt;@U9&gt;" in told and "<@U9>" not in told
            # Said once the ack was sent and the call read (after the stall, as the errors
            # are): either may come first.
            await wait_until(
                lambda: STILL_WORKING_EDIT in slack_api.ephemeral_to("U2", interim=True),
                what="the note that the edit is still being checked",
            )
            assert ledger.executed == [] and not decided(card)
    finally:
        own.stop()
