"""`approval-bot sandbox`: the real bot, an embedded Redis and the Slack stand-in, with a web page
that plays a Slack channel, so anyone can see and click approval cards without a Slack app.

Everything between the page and the stand-in is the real thing: the page's actions become
correctly signed Slack requests (commands, button clicks, modal submissions, thread replies) sent
over HTTP to the bot's own `/slack/events`, and what the bot posts through the Web API is what
the page shows. A small cast of people, each a real principal of the policy and labelled with
what it lets them do (a starter, two approvers, an outsider), lets you see the policy at work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import tempfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from agents import set_tracing_disabled
from aiohttp import web
from pydantic import SecretStr

from bot.config import Settings
from bot.engine.registry import AgentRegistry
from bot.listening import start_site
from bot.runtime import BotRuntime
from bot.sandbox.learning import SHADOW_RULES, report_page
from bot.service.policy.rules import ChannelRule
from bot.service.policy.source import PolicySource
from bot.slack.blocks import EDIT_MODAL, REASON_BLOCK, REASON_INPUT
from bot.testing.advisors import demo_advisor
from bot.testing.harness import edit_values, settle
from bot.testing.models import DemoModel, use_model
from bot.testing.requests import SlackRequests
from bot.testing.slack_api import FakeSlackAPI

log = logging.getLogger(__name__)

CHANNEL = "C0SANDBOX"
TEAM = "T0TEST"
SECRET = "sandbox-signing-secret"


@dataclass(frozen=True)
class Person:
    user_id: str
    name: str
    role: str


STARTERS = ("U0ALICE", "U0BOB", "U0CAROL")


def _user_ids(principals: list[str]) -> list[str]:
    return [p for p in principals if p[:1] in "UW"]


def cast(rule: ChannelRule) -> list[Person]:
    """The page's people, each a real principal of the channel's rule, labelled with what the
    rule lets them do: Bob and Carol are its first two approvers (Carol only if there is a
    second), Alice a starter who does not approve, Mallory someone the rule does not name
    (who may start runs only if anyone may)."""
    approvers = _user_ids(list(rule.approvers))
    anyone = "*" in rule.starters
    starters = _user_ids(list(rule.starters))

    def role(user: str) -> str:
        if user in approvers:
            return "approver"
        return "starter" if anyone or user in starters else "outsider"

    people = []
    alice = next((u for u in starters if u not in approvers), "U0ALICE" if anyone else "")
    if alice:
        people.append(Person(alice, "Alice", role(alice)))
    for user, name in zip(approvers, ("Bob", "Carol"), strict=False):
        people.append(Person(user, name, role(user)))
    people.append(Person("U0MALLORY", "Mallory", role("U0MALLORY")))
    return people


def sandbox_policy(channel: str = CHANNEL) -> str:
    return (
        "# The sandbox's policy: Alice, Bob and Carol may start runs here (and continue them\n"
        "# in their threads); Bob and Carol approve; Mallory may do nothing.\n"
        "channels:\n"
        f"  {channel}:\n"
        f"    starters: [{', '.join(STARTERS)}]\n"
        "    approvers: [U0BOB, U0CAROL]\n"
    ) + SHADOW_RULES


@dataclass
class Surface:
    """What the page shows beyond the stand-in's messages: private notes and open modals."""

    private: list[dict[str, Any]] = field(default_factory=list)  # {user, text, blocks, ts, ...}
    triggers: dict[str, str] = field(default_factory=dict)  # trigger id -> user
    closed: set[int] = field(default_factory=set)  # indexes of views closed or submitted
    errors: dict[int, str] = field(default_factory=dict)  # view index -> error to show
    updated: dict[int, dict[str, Any]] = field(default_factory=dict)  # index -> view shown now
    said: list[dict[str, Any]] = field(default_factory=list)  # people's messages {user, text, ts}


class Sandbox:
    """The bot, the stand-in and the page, in one process."""

    def __init__(
        self,
        *,
        agents: str,
        policy_file: Path | None,
        offline: bool,
        data_dir: Path,
        write_gap: float = 0.12,
    ) -> None:
        self.agents = agents
        self.write_gap = write_gap
        self.policy_file = policy_file
        self.offline = offline
        self.data_dir = data_dir
        self.slack = FakeSlackAPI(team_id=TEAM)
        self.surface = Surface()
        self.channel = CHANNEL
        self.people: list[Person] = []
        self.runtime: BotRuntime
        self.requests: SlackRequests
        self._bot_runner: web.AppRunner | None = None

    async def start(self) -> None:
        await self.slack.start()
        if self.policy_file is not None:
            policies = PolicySource.from_file(self.policy_file)
        else:
            policies = PolicySource.from_text(sandbox_policy())
        policy = policies.current().policy
        self.channel = next(iter(policy.channels))
        self.people = cast(policy.channels[self.channel])
        # Who is in the channel (`"*"` among approvers or followers): all but the outsider.
        self.slack.channel_members[self.channel] = [
            p.user_id for p in self.people if p.role != "outsider"
        ]
        registry = AgentRegistry.load(self.agents)
        if self.offline:
            use_model(registry.agents.values(), DemoModel(write_gap=self.write_gap))
            set_tracing_disabled(True)  # nowhere to send traces offline; say nothing about it
        settings = Settings(
            _env_file=None,  # type: ignore[call-arg]
            slack_bot_token=SecretStr("xoxb-sandbox"),
            slack_signing_secret=SecretStr(SECRET),
            slack_api_url=self.slack.url,
            redis_url=None,
            data_dir=self.data_dir,
        )
        # A second opinion on each card: the offline demo advisor, unless one is named.
        advisor = None if settings.advisor else demo_advisor()
        self.runtime = BotRuntime(settings, registry=registry, policies=policies, advisor=advisor)
        await self.runtime.start()
        self._bot_runner = web.AppRunner(self.runtime.web_app(), access_log=None)
        await self._bot_runner.setup()
        site = web.TCPSite(self._bot_runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.requests = await SlackRequests(
            f"http://127.0.0.1:{port}/slack/events", SECRET, team_id=TEAM
        ).__aenter__()

    async def stop(self) -> None:
        """Undo whatever `start` got to, so a failed start leaves nothing running either."""
        if hasattr(self, "requests"):
            with contextlib.suppress(Exception):
                await self.requests.__aexit__()
        if self._bot_runner is not None:
            await self._bot_runner.cleanup()
        if hasattr(self, "runtime"):
            if hasattr(self.runtime, "redis"):
                await self.runtime.stop()
            elif self.runtime.embedded is not None:  # Redis started, the rest did not
                self.runtime.embedded.stop()
        await self.slack.stop()

    # What the page asks for ----------------------------------------------------------------

    def state(self, user: str) -> dict[str, Any]:
        messages = sorted(self.slack.messages.values(), key=lambda m: m.ts)
        shown = [
            {
                "ts": m.ts,
                "text": m.text,
                "blocks": m.blocks,
                "thread_ts": m.thread_ts,
                "updates": m.updates,
                "streaming": m.streaming,  # Slack's chat streaming: open, being written
                "markdown": m.markdown,
            }
            for m in messages
            if m.channel == self.channel
        ]
        # People's own thread replies reach the bot as events, not through the Web API, so
        # the stand-in never sees them; the page shows them where Slack would.
        shown = sorted([*shown, *self.surface.said], key=lambda m: str(m["ts"]))
        # What the bot shows one person only (command answers, ephemerals): from the bot, in
        # their place among the messages.
        private = [p for p in self.surface.private if p["to"] == user]
        for e in self.slack.ephemeral:
            if e.get("user") == user and e.get("channel") == self.channel:
                private.append(
                    {
                        "to": user,
                        "text": str(e.get("text", "")),
                        "blocks": e.get("blocks") or [],
                        "thread_ts": e.get("thread_ts"),
                        "ts": str(e.get("message_ts", "")),
                    }
                )
        private.sort(key=lambda p: str(p["ts"]))
        modal = None
        for index, opened in enumerate(self.slack.views):
            owner = self.surface.triggers.get(str(opened.get("trigger_id", "")))
            if owner == user and index not in self.surface.closed:
                modal = {
                    "index": index,
                    "view": self.surface.updated.get(index) or opened.get("view") or {},
                    "error": self.surface.errors.get(index, ""),
                    "updated": index in self.surface.updated,  # (e.g. what a batch did)
                }
        return {
            "channel": self.channel,
            "bot": self.slack.bot_user_id,
            "me": user,
            "people": [p.__dict__ for p in self.people],
            "messages": shown,
            "private": private,
            "modal": modal,
        }

    async def command(self, user: str, text: str) -> None:
        """`/agent <text>`: its answer, text and blocks, is shown to `user` only."""
        sent = await self.requests.command(text, user=user, channel=self.channel)
        reply = sent.json() if sent.text else None
        if isinstance(reply, dict) and (reply.get("text") or reply.get("blocks")):
            self.surface.private.append(
                {
                    "to": user,
                    "text": str(reply.get("text", "")),
                    "blocks": reply.get("blocks") or [],
                    "thread_ts": None,
                    "ts": self.slack._next_ts(),
                }
            )

    async def say(self, user: str, text: str) -> None:
        """`user` posts `text` in the channel. As in Slack, a plain message is only a message;
        one that mentions the bot (`@approval-bot`) is also an `app_mention`, which starts a
        run."""
        ts = self.slack._next_ts()
        mention = f"<@{self.slack.bot_user_id}>"
        shown = re.sub(r"@approval-bot\b", mention, text)
        self.surface.said.append({"user": user, "text": shown, "ts": ts, "thread_ts": None})
        event = {
            "type": "message",
            "channel": self.channel,
            "user": user,
            "team": TEAM,
            "text": shown,
            "ts": ts,
            "channel_type": "channel",
        }
        await self.requests.send_json(self.requests.event_payload(event))
        if mention in shown:
            await self.requests.send_json(
                self.requests.event_payload({**event, "type": "app_mention"})
            )

    async def choose(self, user: str, menu: str, option: str, ts: str) -> None:
        """`user` picks `option` in a message's menu (an overflow)."""
        payload = self.requests.choose_payload(
            menu, option, user=user, channel=self.channel, message_ts=ts
        )
        self.surface.triggers[payload["trigger_id"]] = user
        await self.requests.send_interaction(payload)

    async def click(self, user: str, action_id: str, value: str, ts: str) -> None:
        payload = self.requests.click_payload(
            action_id, value, user=user, channel=self.channel, message_ts=ts
        )
        self.surface.triggers[payload["trigger_id"]] = user
        await self.requests.send_interaction(payload)

    async def reply(self, user: str, thread_ts: str, text: str) -> None:
        """`user` posts `text` in a thread: shown on the page, sent to the bot as Slack would."""
        ts = self.slack._next_ts()  # the stand-in's clock, so the thread stays in order
        self.surface.said.append({"user": user, "text": text, "ts": ts, "thread_ts": thread_ts})
        event = {
            "type": "message",
            "channel": self.channel,
            "user": user,
            "team": TEAM,
            "text": text,
            "ts": ts,
            "thread_ts": thread_ts,
            "channel_type": "channel",
        }
        await self.requests.send_json(self.requests.event_payload(event))

    async def submit(
        self, user: str, index: int, reason: str, inputs: dict[str, str] | None = None
    ) -> None:
        """Submit modal `index`: the reject form with `reason`; the Edit form with `inputs`
        (block id -> text or choice, as the page holds them)."""
        if not 0 <= index < len(self.slack.views):
            raise IndexError(f"no modal number {index}")
        view = self.slack.views[index].get("view") or {}
        block, element = _text_input(view)
        values = {block: {element: {"type": "plain_text_input", "value": reason}}}
        if view.get("callback_id") == EDIT_MODAL:
            values = edit_values(view, inputs or {})
        sent = await self.requests.submit(view, values, user=user)
        answer = sent.json() if sent.text else None
        if isinstance(answer, dict) and answer.get("response_action") == "errors":
            self.surface.errors[index] = " ".join(str(v) for v in answer["errors"].values())
        elif isinstance(answer, dict) and answer.get("response_action") == "update":
            self.surface.updated[index] = dict(answer.get("view") or {})  # shown in its place
        else:
            self.surface.closed.add(index)

    def close(self, index: int) -> None:
        self.surface.closed.add(index)


def _text_input(view: dict[str, Any]) -> tuple[str, str]:
    """The (block id, action id) of a modal's text input: the page's one text box (the reject
    form's reason, the answer to a question)."""
    for block in view.get("blocks") or []:
        element = block.get("element") or {}
        if block.get("type") == "input" and element.get("action_id"):
            return str(block.get("block_id", "")), str(element["action_id"])
    return REASON_BLOCK, REASON_INPUT


def page() -> str:
    return (resources.files("bot.sandbox") / "page.html").read_text(encoding="utf-8")


def web_app(sandbox: Sandbox) -> web.Application:
    """The page and the small JSON API its buttons call."""

    async def index(_: web.Request) -> web.Response:
        return web.Response(text=page(), content_type="text/html")

    async def state(request: web.Request) -> web.Response:
        return web.json_response(sandbox.state(request.query.get("user", "U0ALICE")))

    async def settled(_: web.Request) -> web.Response:
        # Answered once the bot is quiet (no task, job or delivery left): what the page's
        # actions started has been handled to the end, so what the page shows next is final
        # until someone acts again (the browser tests' proof that something did not happen).
        try:
            await settle(sandbox.runtime, timeout=60)
        except TimeoutError as exc:
            return web.json_response({"ok": False, "error": str(exc)}, status=503)
        return web.json_response({"ok": True})

    async def act(request: web.Request) -> web.Response:
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError("expected a JSON object")
            return await perform(request.match_info["what"], body)
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            problem = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            return web.json_response({"ok": False, "error": f"bad request: {problem}"}, status=400)

    async def perform(what: str, body: dict[str, Any]) -> web.Response:
        user = str(body.get("user", ""))
        if user not in {p.user_id for p in sandbox.people}:
            return web.json_response({"ok": False, "error": "unknown person"}, status=400)
        if what == "command":
            await sandbox.command(user, str(body.get("text", "")))
        elif what == "say":
            await sandbox.say(user, str(body.get("text", "")))
        elif what == "choose":
            await sandbox.choose(
                user, str(body["action_id"]), str(body["option"]), str(body.get("ts", ""))
            )
        elif what == "click":
            await sandbox.click(
                user, str(body["action_id"]), str(body["value"]), str(body.get("ts", ""))
            )
        elif what == "reply":
            await sandbox.reply(user, str(body["thread_ts"]), str(body.get("text", "")))
        elif what == "submit":
            given = body.get("values")
            inputs = {str(k): str(v) for k, v in given.items()} if isinstance(given, dict) else {}
            await sandbox.submit(user, int(body["index"]), str(body.get("reason", "")), inputs)
        elif what == "close":
            sandbox.close(int(body["index"]))
        else:
            return web.json_response({"ok": False, "error": "unknown action"}, status=404)
        return web.json_response({"ok": True})

    app = web.Application()
    app.add_routes(
        [
            web.get("/", index),
            web.get("/api/state", state),
            web.get("/api/settled", settled),
            web.post("/api/{what}", act),
            web.get("/report", report_page(lambda: sandbox.runtime.service.audit_log)),
        ]
    )
    return app


async def serve(
    *,
    host: str,
    port: int,
    agents: str,
    policy_file: Path | None,
    offline: bool,
    stop: asyncio.Event,
    ready: asyncio.Future[int] | None = None,
    write_gap: float = 0.12,
) -> None:
    """Run the sandbox until `stop` is set; `ready` gets the page's port once it is served
    (the kernel's choice when `port` is 0). `write_gap`: seconds between two words of the
    offline demo model's answers (written as a model writes; 0: each answer at once)."""
    with tempfile.TemporaryDirectory(prefix="approval-bot-sandbox-") as tmp:
        sandbox = Sandbox(
            agents=agents,
            policy_file=policy_file,
            offline=offline,
            data_dir=Path(tmp),
            write_gap=write_gap,
        )
        runner = web.AppRunner(web_app(sandbox), access_log=None)
        try:
            await sandbox.start()
            await runner.setup()
            port = await start_site(runner, host, port)
            mode = "an offline demo model" if offline else "the agents' own models"
            print(
                f"Sandbox ready: open http://{host}:{port} (agents {agents}, {mode}; "
                "Ctrl-C stops it)",
                flush=True,
            )
            if ready is not None:
                ready.set_result(port)
            await stop.wait()
        finally:
            await runner.cleanup()
            await sandbox.stop()


def wants_offline(explicit: bool) -> bool:
    """Offline (the demo model) when asked, or when no OpenAI key is set."""
    return explicit or not os.environ.get("OPENAI_API_KEY")
