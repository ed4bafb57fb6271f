"""Run the whole bot in-process against a real Redis and the fake Slack Web API.

    async with BotHarness(redis_url, agents, policy) as bot:
        await bot.slack.command("delete the logs", user="U1", channel="C1")
        approval = await bot.wait_for_approvals(1)
        await bot.slack.click("approval_approve", approval.button_value("approval_approve"), ...)

Everything between the signed HTTP request and the Web API call is the real bot.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from pydantic import SecretStr

from bot.clock import SYSTEM_CLOCK, Clock
from bot.config import Settings
from bot.engine.registry import AgentRegistry
from bot.runtime import BotRuntime
from bot.service.policy_source import PolicySource
from bot.slack import question_blocks
from bot.slack.blocks import (
    ALWAYS_REJECT,
    EDIT,
    EDIT_INPUT,
    REASON_BLOCK,
    REASON_INPUT,
    REJECT,
)
from bot.testing.requests import Sent, SlackRequests
from bot.testing.slack_api import FakeSlackAPI, Message

SIGNING_SECRET = "test-signing-secret"
BOT_TOKEN = "xoxb-test-token"

# The bot's windows and polls, short, so that tests do not wait them out (production's are
# seconds: see `Settings`). A test of one of them (pacing, coalescing, a poll) sets it itself.
FAST_WINDOWS: dict[str, float] = {
    # (The projector's poll stays production's 0.05 s: a process's own changes wake it, and
    # shorter polls only add load when several bot processes share a test machine.)
    "projector_coalesce_seconds": 0.05,
    "progress_due_seconds": 0.05,
    "policy_check_seconds": 0.05,
    "home_poll_seconds": 0.05,
    "timers_poll_seconds": 0.1,
    "slack_posts_per_second": 50.0,
    "slack_updates_per_minute": 3000.0,
}
# The same settings at production's values: for figures about the bot as it runs (benchmarks)
# and for a test of one of them.
PRODUCTION_WINDOWS: dict[str, float] = {
    name: float(Settings.model_fields[name].default) for name in FAST_WINDOWS
}


def fast_environment(**overrides: float) -> dict[str, str]:
    """`FAST_WINDOWS` (and `overrides`, by setting name) as the APPROVAL_BOT_* environment of
    a bot started as a process."""
    windows = {**FAST_WINDOWS, **overrides}
    return {str(Settings.model_fields[name].alias): f"{value:g}" for name, value in windows.items()}


async def wait_until(
    condition: Callable[[], Any], *, timeout: float = 10.0, what: str = "condition"
) -> Any:
    """Poll `condition` (sync or async) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


def edit_values(
    view: dict[str, Any], changed: dict[str, str] | None = None, *, json_text: str | None = None
) -> dict[str, dict[str, Any]]:
    """The state Slack submits for the Edit modal `view` (as passed to views.open) when a
    person changes the inputs of `changed` (block id -> text, or a choice's value) or the JSON
    text, and leaves every other input as it was pre-filled."""
    values: dict[str, dict[str, Any]] = {}
    for block in view.get("blocks", []):
        if block.get("type") != "input":
            continue
        block_id, element = str(block["block_id"]), block["element"]
        wanted = (changed or {}).get(block_id)
        if json_text is not None and element.get("type") == "plain_text_input" and not changed:
            wanted = json_text
        if element.get("type") == "static_select":
            initial = (element.get("initial_option") or {}).get("value")
            value = wanted if wanted is not None else initial
            text = {"type": "plain_text", "text": value}
            option = None if value is None else {"value": value, "text": text}
            values[block_id] = {EDIT_INPUT: {"type": "static_select", "selected_option": option}}
        else:
            value = wanted if wanted is not None else element.get("initial_value")
            values[block_id] = {EDIT_INPUT: {"type": "plain_text_input", "value": value}}
    return values


def status_line(message: Message) -> str:
    """The `Status: ...` line of a run message."""
    for line in message.all_text().splitlines():
        if line.startswith("*Status:*"):
            return line
    return ""


class BotHarness:
    """One bot process (in-process), its HTTP endpoint, and the fake Slack it talks to."""

    def __init__(
        self,
        redis_url: str,
        agents: Any,
        policy: PolicySource | str,
        *,
        slack: FakeSlackAPI | None = None,
        rejection_text: str | None = None,
        data_dir: Path | None = None,
        settings: dict[str, Any] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.redis_url = redis_url
        self.clock = clock  # e.g. a `bot.testing.clock.SkippingClock`, for timer tests
        self.registry = agents if isinstance(agents, AgentRegistry) else None
        self.agents = agents
        self.policies = PolicySource.from_text(policy) if isinstance(policy, str) else policy
        self.slack_api = slack or FakeSlackAPI()
        self._own_slack = False  # started here (also a given one not yet running): stopped here
        self.rejection_text = rejection_text
        self.data_dir = data_dir
        self.overrides = settings or {}  # Settings fields, e.g. {"user_start_burst": 0}
        self._runner: web.AppRunner | None = None
        self.url = ""
        self.runtime: BotRuntime
        self.slack: SlackRequests

    def settings(self) -> Settings:
        # Short windows by default, so tests need not wait (override them to test bursts).
        extra: dict[str, Any] = {
            "requester_notice_seconds": 0.2,
            "home_refresh_seconds": 0.2,
            # The SDK's ScriptedModel cannot stream every item kind (MCP approval requests,
            # shell calls): a test of streamed answers asks for them.
            "stream_answers": False,
            **FAST_WINDOWS,
            **self.overrides,
        }
        if self.rejection_text is not None:
            extra["rejection_text"] = self.rejection_text
        if self.data_dir is not None:
            extra["data_dir"] = self.data_dir
        fields: dict[str, Any] = {
            "slack_bot_token": SecretStr(BOT_TOKEN),  # None, with OAuth distribution's settings
            "slack_signing_secret": SecretStr(SIGNING_SECRET),
            "slack_api_url": self.slack_api.url,
            "redis_url": self.redis_url,
        }
        return Settings(_env_file=None, **{**fields, **extra})  # type: ignore[call-arg]

    async def __aenter__(self) -> BotHarness:
        if not self.slack_api.running:
            await self.slack_api.start()
            self._own_slack = True
        registry = self.registry or AgentRegistry.from_value(self.agents)
        self.runtime = BotRuntime(
            self.settings(), registry=registry, policies=self.policies, clock=self.clock
        )
        await self.runtime.start()
        self._runner = web.AppRunner(self.runtime.web_app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        self.slack = await SlackRequests(
            f"{self.url}/slack/events", SIGNING_SECRET, team_id=self.slack_api.team_id
        ).__aenter__()
        self.slack.hooks = self.slack_api.hooks_url
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.slack.__aexit__()
        if self._runner is not None:
            await self._runner.cleanup()
        await self.runtime.stop()
        if self._own_slack:
            await self.slack_api.stop()

    # Waiting for what people would see ----------------------------------------------------

    async def wait_for_approvals(self, count: int, *, timeout: float = 10.0) -> list[Message]:
        """Wait until `count` approval messages with buttons are showing; return them."""

        def pending() -> list[Message] | None:
            found = [m for m in self.slack_api.approval_messages() if m.action_ids()]
            return found if len(found) >= count else None

        await wait_until(pending, timeout=timeout, what=f"{count} pending approval message(s)")
        await self.idle(timeout)  # and everything that pause does after posting them
        return pending() or []

    async def wait_for_questions(self, count: int, *, timeout: float = 10.0) -> list[Message]:
        """Wait until `count` question cards (`ask_human`) with their Answer button are
        showing; return them."""

        def pending() -> list[Message] | None:
            found = [m for m in self.slack_api.question_messages() if m.action_ids()]
            return found if len(found) >= count else None

        await wait_until(pending, timeout=timeout, what=f"{count} question card(s)")
        await self.idle(timeout)
        return pending() or []

    def run_message(self) -> Message:
        runs = [m for m in self.slack_api.top_level() if "started agent" in m.all_text()]
        assert runs, "no run message was posted"
        return runs[-1]

    async def wait_for_status(self, word: str, *, timeout: float = 10.0) -> Message:
        """Wait until the latest run message's status contains `word` (finished, failed...)."""

        def status() -> Message | None:
            runs = [m for m in self.slack_api.top_level() if "started agent" in m.all_text()]
            return runs[-1] if runs and word in status_line(runs[-1]) else None

        result: Message = await wait_until(status, timeout=timeout, what=f"run status {word!r}")
        return result

    def run_thread(self) -> list[Message]:
        run = self.run_message()
        return self.slack_api.thread(run.channel, run.ts)

    async def start_and_wait(self, task: str, *, user: str, channel: str = "C1") -> Message:
        """`user` types `/agent <task>`; returns the one approval message the run pauses on."""
        await self.slack.command(task, user=user, channel=channel)
        [approval] = await self.wait_for_approvals(1)
        return approval

    # Acting as people would ----------------------------------------------------------------

    async def click(self, message: Message, action_id: str, *, user: str) -> Sent:
        """`user` clicks the button `action_id` of a message the bot posted."""
        return await self.slack.click(
            action_id,
            message.button_value(action_id),
            user=user,
            channel=message.channel,
            message_ts=message.ts,
        )

    async def reject(
        self, message: Message, *, user: str, reason: str = "", always: bool = False
    ) -> Sent:
        """`user` clicks Reject (or Always reject), then submits the modal with `reason`."""
        opened = len(self.slack_api.views)
        sent = await self.click(message, ALWAYS_REJECT if always else REJECT, user=user)
        assert sent.status == 200, sent
        await wait_until(lambda: len(self.slack_api.views) > opened, what="the reject modal")
        view = self.slack_api.views[-1]["view"]
        values = {REASON_BLOCK: {REASON_INPUT: {"type": "plain_text_input", "value": reason}}}
        return await self.slack.submit(view, values, user=user)

    async def answer(self, message: Message, *, user: str, text: str) -> Sent:
        """`user` clicks Answer on a question's card, then submits the modal with `text`."""
        opened = len(self.slack_api.views)
        sent = await self.click(message, question_blocks.ANSWER, user=user)
        assert sent.status == 200, sent
        await wait_until(lambda: len(self.slack_api.views) > opened, what="the answer modal")
        view = self.slack_api.views[-1]["view"]
        field = {"type": "plain_text_input", "value": text}
        values = {question_blocks.ANSWER_BLOCK: {question_blocks.ANSWER_INPUT: field}}
        return await self.slack.submit(view, values, user=user)

    async def open_edit(self, message: Message, *, user: str) -> dict[str, Any]:
        """`user` clicks Edit on a card; returns the modal the bot opened (as views.open got it)."""
        opened = len(self.slack_api.views)
        sent = await self.click(message, EDIT, user=user)
        assert sent.status == 200, sent
        await wait_until(lambda: len(self.slack_api.views) > opened, what="the edit modal")
        view: dict[str, Any] = self.slack_api.views[-1]["view"]
        return view

    async def audit(self) -> list[dict[str, str]]:
        """The audit trail so far, oldest first."""
        return [entry async for entry in self.runtime.service.audit_log.read()]

    async def idle(self, timeout: float = 30.0) -> None:
        """Wait until the bot is quiet: no queued or running job, no background task."""
        service, worker, queue = self.runtime.service, self.runtime.worker, self.runtime.queue

        async def quiet() -> bool:
            await service.drain(timeout)
            busy = worker.busy if worker is not None else 0
            return (
                not service._tasks
                and busy == 0
                and await queue.backlog() == 0
                and await self.runtime.projector.idle()
            )

        async def settled() -> bool:
            return await quiet() and await quiet()

        await wait_until(settled, timeout=timeout, what="the bot to be idle")
