"""Run the whole bot in-process against a real Redis and the Slack Web API stand-in, and act on
it as people would: type `/agent`, click buttons, fill modals, reply in threads.

    async with BotHarness(redis_url, agents, policy) as bot:        # or the `bot_harness` fixture
        card = await bot.start_and_wait("delete the logs", user="U1", channel="C1")
        await bot.click(card, "approval_approve", user="U2")
        await bot.wait_for_status("finished")

Everything between the signed HTTP request and the Web API call is the real bot. Every wait
has a bound, and a wait that times out says what the run is waiting on (its status, its pending
calls and questions, the cards Slack shows, what people were told privately).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aioredis
from agents import Agent
from aiohttp import web
from pydantic import SecretStr

from bot.clock import SYSTEM_CLOCK, Clock
from bot.config import Settings
from bot.engine.questions import QUESTION_KIND
from bot.engine.registry import AgentRegistry
from bot.runtime import BotRuntime
from bot.service.policy.source import PolicySource
from bot.slack import blocks as ids
from bot.slack.blocks import (
    ALWAYS_REJECT,
    EDIT,
    EDIT_INPUT,
    REASON_BLOCK,
    REASON_INPUT,
    REJECT,
    SHOW_CONVERSATION,
)
from bot.store.records import ENDED, CallStatus
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


Explain = Callable[[], Awaitable[str]]

WAIT = 30.0
"""Seconds a wait for proof may take before the test fails: a bound, not a measure. A test
that passes never waits it out, and a loaded machine (CI, a suite on more workers than cores)
can take many times a quiet one's time: at 10 s, waits for a card, a DM or a quiet bot timed
out in a run on a machine loaded tenfold."""


async def wait_until(
    condition: Callable[[], Any],
    *,
    timeout: float = WAIT,
    what: str = "condition",
    explain: Explain | None = None,
) -> Any:
    """Poll `condition` (sync or async) every 20 ms until it returns something truthy; return
    that. After `timeout` seconds raise `TimeoutError` naming `what`, and what `explain()` says
    (a `BotHarness`'s waits pass `waiting_on`: the state of the runs)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            message = f"timed out after {timeout}s waiting for {what}"
            if explain is not None:
                try:
                    message += ". " + await explain()
                except Exception as exc:  # the explanation must not hide the timeout
                    message += f" (and could not read the bot's state: {exc!r})"
            raise TimeoutError(message)
        await asyncio.sleep(0.02)


async def settle(
    runtime: BotRuntime, timeout: float = WAIT, explain: Explain | None = None
) -> None:
    """Wait until `runtime` is quiet: no background task, no queued or running job, nothing
    for its projector to show; twice in a row, as a task's end may queue the next. The proof
    that whatever a request started has been handled to the end, for a test that then says
    what did not happen (the harness's `idle`, the sandbox's `/api/settled`)."""
    service, worker, queue = runtime.service, runtime.worker, runtime.queue

    async def quiet() -> bool:
        await service.drain(timeout)
        busy = worker.busy if worker is not None else 0
        return (
            not service._tasks
            and busy == 0
            and await queue.backlog() == 0
            and await runtime.projector.idle()
        )

    async def settled() -> bool:
        return await quiet() and await quiet()

    await wait_until(settled, timeout=timeout, what="the bot to be idle", explain=explain)


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
    """The whole bot in this process (its HTTP endpoint, worker, projector and timers) on
    `redis_url`, serving `agents` (an `Agent`, a `dict[str, Agent]`, a callable returning one,
    or an `AgentRegistry`) under `policy` (the policy's YAML text, or a `PolicySource`), and
    the Slack stand-in it talks to (`slack_api`, a `FakeSlackAPI`; one is started if not given).

    Use it as `async with BotHarness(...) as bot:`. Options: `settings` overrides `Settings`
    fields by name (`{"user_start_burst": 0}`; the windows default to `FAST_WINDOWS`), `clock`
    a `bot.testing.clock.SkippingClock` for timer tests, `rejection_text` and `data_dir`,
    `advisor` an agent that gives a second opinion on each card (`bot.testing.advisors`).

    Acting: `bot.slack` (a `SlackRequests`) sends any signed request: `command`, `click`,
    `submit`, `thread_reply`, `mention`. The harness's own methods do what a person does in
    one step: `start_and_wait`, `click`, `reject`, `answer`, `open_edit`, `reply`.
    Looking: `wait_for_cards`, `wait_for_approvals`, `wait_for_questions`, `wait_for_status`,
    `run_message`, `run_thread`, `audit`, `idle`, `waiting_on`; and `slack_api` for
    everything Slack was sent (`messages`, `calls`, `ephemeral_to(user)`, `views`).
    """

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
        advisor: Agent[Any] | None = None,
    ) -> None:
        self.redis_url = redis_url
        self.advisor = advisor  # a second opinion on each card (e.g. `scripted_advisor`)
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
            self.settings(),
            registry=registry,
            policies=self.policies,
            clock=self.clock,
            advisor=self.advisor,
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
        await self._end_the_workers_wait()
        await self.runtime.stop()

    async def _end_the_workers_wait(self) -> None:
        """Stopping, the worker lets its blocking read of the job stream end (up to 200 ms,
        nothing lost); ended at once here (`CLIENT UNBLOCK`: as if its wait ran out) once it
        reads no more. Every test's bot stops: a tenth of a second each, on average. A
        standalone server only; elsewhere the read ends by itself."""
        worker = self.runtime.worker
        if worker is None or self.runtime.redis_kind != "standalone":
            return
        worker._stopping.set()  # no read after the one under way
        client = aioredis.Redis.from_url(self.redis_url)
        try:
            for found in await client.client_list():
                if found.get("cmd") == "xreadgroup" and "b" in found.get("flags", ""):
                    await client.client_unblock(int(found["id"]))
        except redis.RedisError:
            pass  # (the read ends by itself)
        finally:
            await client.aclose()
        if self._own_slack:
            await self.slack_api.stop()

    # Waiting for what people would see ----------------------------------------------------

    async def waiting_on(self) -> str:
        """What the bot is at, in a few sentences, for a test that timed out: the latest runs'
        status, agent and pending calls and questions (or their error), a refused start, the
        cards Slack shows with buttons, and the last things people were told privately."""
        store = self.runtime.service.store
        entries = await self.audit()
        started = [
            e["run_id"] for e in entries if e.get("kind") == "run_started" and e.get("run_id")
        ]
        parts = [] if started else ["No run was started"]
        for run in [r for r in await store.get_runs(started[-3:]) if r is not None]:
            line = f"Run {run.run_id} (agent {run.agent_name}, by {run.user_id} in "
            line += f"{run.channel_id}) is {run.status}"
            if run.status in ENDED:
                line += f": {run.error}" if run.error else ""
            else:
                pending = [
                    f"{'a question' if c.kind == QUESTION_KIND else 'approval of'} {c.tool} "
                    f"({c.approval_id})"
                    for c in await store.pause_calls(run.run_id)
                    if c.status == CallStatus.PENDING
                ]
                line += f", waiting on {', '.join(pending)}" if pending else ""
            parts.append(line)
        refused = [e for e in entries if e.get("kind") == "start_refused"]
        if refused:
            parts.append(f"A start was refused: {refused[-1].get('detail', '')}")
        approvals = [m for m in self.slack_api.approval_messages() if m.action_ids()]
        questions = [m for m in self.slack_api.question_messages() if m.action_ids()]
        parts.append(
            f"Slack shows {len(approvals)} approval card(s) and {len(questions)} question "
            "card(s) with buttons"
        )
        told = [(str(e.get("user")), str(e.get("text", ""))) for e in self.slack_api.ephemeral]
        told += [("the sender", str(r.get("text", ""))) for r in self.slack_api.responses]
        if told:
            said = [f"{user}: {text[:160]!r}" for user, text in told[-3:]]
            parts.append("Told privately: " + "; ".join(said))
        return ". ".join(part.rstrip(". ") for part in parts) + "."

    def pending_cards(self) -> list[Message]:
        """The cards showing buttons now: approval requests and the agents' questions, oldest
        first."""
        cards = [
            m
            for m in [*self.slack_api.approval_messages(), *self.slack_api.question_messages()]
            if m.action_ids()
        ]
        return sorted(cards, key=lambda m: float(m.ts))

    async def wait_for_cards(
        self, count: int = 1, *, timeout: float = WAIT, since: int | None = None
    ) -> list[Message]:
        """Wait until at least `count` cards (approval requests or questions) show their
        buttons, and the bot is idle again (the pause posted everything); return every card
        showing buttons, oldest first. With `since` (a count of audit entries taken before
        acting), a start refused or a run ended after it fails the wait at once, saying why."""

        async def shown() -> list[Message] | None:
            found = self.pending_cards()
            if len(found) >= count:
                return found
            if since is not None:
                await self._fail_if_ended(since, f"{count} card(s)")
            return None

        await wait_until(
            shown, timeout=timeout, what=f"{count} pending card(s)", explain=self.waiting_on
        )
        await self.idle(timeout)  # and everything that pause does after posting them
        return self.pending_cards()

    async def wait_for_approvals(self, count: int, *, timeout: float = WAIT) -> list[Message]:
        """Wait until `count` approval messages with buttons are showing; return them."""

        def pending() -> list[Message] | None:
            found = [m for m in self.slack_api.approval_messages() if m.action_ids()]
            return found if len(found) >= count else None

        await wait_until(
            pending,
            timeout=timeout,
            what=f"{count} pending approval message(s)",
            explain=self.waiting_on,
        )
        await self.idle(timeout)  # and everything that pause does after posting them
        return pending() or []

    async def wait_for_questions(self, count: int, *, timeout: float = WAIT) -> list[Message]:
        """Wait until `count` question cards (`ask_human`) with their Answer button are
        showing; return them."""

        def pending() -> list[Message] | None:
            found = [m for m in self.slack_api.question_messages() if m.action_ids()]
            return found if len(found) >= count else None

        await wait_until(
            pending, timeout=timeout, what=f"{count} question card(s)", explain=self.waiting_on
        )
        await self.idle(timeout)
        return pending() or []

    def run_message(self) -> Message:
        """The latest run message (the one a run posts when it starts, updated as it goes)."""
        runs = [m for m in self.slack_api.top_level() if "started agent" in m.all_text()]
        assert runs, "no run message was posted"
        return runs[-1]

    async def wait_for_status(self, word: str, *, timeout: float = WAIT) -> Message:
        """Wait until the latest run message's status contains `word` (finished, failed...);
        return that message."""

        def status() -> Message | None:
            runs = [m for m in self.slack_api.top_level() if "started agent" in m.all_text()]
            return runs[-1] if runs and word in status_line(runs[-1]) else None

        result: Message = await wait_until(
            status, timeout=timeout, what=f"run status {word!r}", explain=self.waiting_on
        )
        return result

    def run_thread(self) -> list[Message]:
        """The messages in the latest run's thread (its output, notes, follow-up answers)."""
        run = self.run_message()
        return self.slack_api.thread(run.channel, run.ts)

    async def start_and_wait(self, task: str, *, user: str, channel: str = "C1") -> Message:
        """`user` types `/agent <task>` in `channel`; returns the card the run then waits on:
        an approval request, or a question (`ask_human`) when the agent asks first. A start
        the bot refuses, a run that ends without waiting, and a run that waits on several cards
        at once fail here, saying so (for several: `bot.slack.command`, then
        `wait_for_cards(n)`)."""
        mark = len(await self.audit())
        await self.slack.command(task, user=user, channel=channel)
        cards = await self.wait_for_cards(1, since=mark)
        if len(cards) != 1:
            raise AssertionError(
                f"the run waits on {len(cards)} cards, not one: use wait_for_cards({len(cards)}). "
                + await self.waiting_on()
            )
        return cards[0]

    async def _fail_if_ended(self, since: int, what: str) -> None:
        """While waiting for `what`: a start refused, or a run started and ended (finished,
        failed, cancelled), after the audit's first `since` entries will not show it."""
        entries = (await self.audit())[since:]
        if any(e.get("kind") == "start_refused" for e in entries):
            raise AssertionError(
                f"waiting for {what}, but the start was refused. " + await self.waiting_on()
            )
        for entry in entries:
            if entry.get("kind") == "run_started":
                run = await self.runtime.service.store.get_run(entry.get("run_id", ""))
                if run is not None and run.status in ENDED:
                    raise AssertionError(
                        f"waiting for {what}, but the run ended. " + await self.waiting_on()
                    )

    # Acting as people would ----------------------------------------------------------------

    async def click(self, message: Message, action_id: str, *, user: str) -> Sent:
        """`user` clicks the button `action_id` of a message the bot posted (or chooses the
        option of its More menu that stands for that button)."""
        menu = message.menu_of(action_id)
        if menu is not None:
            return await self.slack.choose(
                *menu, user=user, channel=message.channel, message_ts=message.ts
            )
        return await self.slack.click(
            action_id,
            message.button_value(action_id),
            user=user,
            channel=message.channel,
            message_ts=message.ts,
        )

    async def modal(self, message: Message, action_id: str, *, user: str) -> dict[str, Any]:
        """`user` clicks the button `action_id` of a message; the modal the bot opened (as
        views.open got it)."""
        opened = len(self.slack_api.views)
        sent = await self.click(message, action_id, user=user)
        assert sent.status == 200, sent
        await wait_until(
            lambda: len(self.slack_api.views) > opened,
            what=f"the modal of {action_id}",
            explain=self.waiting_on,
        )
        view: dict[str, Any] = self.slack_api.views[-1]["view"]
        return view

    async def reject(
        self, message: Message, *, user: str, reason: str = "", always: bool = False
    ) -> Sent:
        """`user` clicks Reject (or Always reject), then submits the modal with `reason`."""
        view = await self.modal(message, ALWAYS_REJECT if always else REJECT, user=user)
        values = {REASON_BLOCK: {REASON_INPUT: {"type": "plain_text_input", "value": reason}}}
        return await self.slack.submit(view, values, user=user)

    async def answer(self, message: Message, *, user: str, text: str) -> Sent:
        """`user` clicks Answer on a question's card, then submits the modal with `text`."""
        view = await self.modal(message, ids.ANSWER, user=user)
        field = {"type": "plain_text_input", "value": text}
        values = {ids.ANSWER_BLOCK: {ids.ANSWER_INPUT: field}}
        return await self.slack.submit(view, values, user=user)

    async def open_edit(self, message: Message, *, user: str) -> dict[str, Any]:
        """`user` clicks Edit on a card; returns the modal the bot opened (as views.open got it)."""
        return await self.modal(message, EDIT, user=user)

    async def edit(self, message: Message, *, user: str, **arguments: str) -> Sent:
        """`user` clicks Edit on a card, changes the named arguments in the modal (as typed:
        `path="/var/log/app"`, `replicas="3"`) and submits it; the bot's answer says what it
        refused, if anything (`sent.json()["errors"]`). For a modal with one JSON text, or to
        look at the modal first: `open_edit`, `edit_values` and `bot.slack.submit`."""
        view = await self.open_edit(message, user=user)
        changed = {f"field:{name}": value for name, value in arguments.items()}
        return await self.slack.submit(view, edit_values(view, changed), user=user)

    async def reply(self, message: Message, text: str, *, user: str) -> Sent:
        """`user` replies `text` in the thread of `message` (a card: `reject: <reason>` there
        rejects, a reply to a question answers it; the run message: a follow-up turn)."""
        return await self.slack.thread_reply(
            text, user=user, channel=message.channel, thread_ts=message.ts
        )

    async def details(self, message: Message, *, user: str) -> str:
        """`user` opens a card's details (its More menu: the digest, policy, rule, timers and
        the conversation); returns the modal's text."""
        view = await self.modal(message, SHOW_CONVERSATION, user=user)
        return Message("", "", "", list(view.get("blocks") or [])).all_text()

    async def audit(self) -> list[dict[str, str]]:
        """The audit trail so far, oldest first."""
        return [entry async for entry in self.runtime.service.audit_log.read()]

    async def idle(self, timeout: float = WAIT) -> None:
        """Wait until the bot is quiet: no queued or running job, no background task."""
        await settle(self.runtime, timeout, explain=self.waiting_on)
