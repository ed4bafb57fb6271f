"""A stand-in for Slack's Web API, for tests: the network edge, nothing more.

Point the bot's `SLACK_API_URL` at `FakeSlackAPI.url`. It answers the methods the bot uses,
records every call, and keeps the latest version of every message so tests can read what people
would see. Knobs for Slack's bad days (each counts down per call of one method):

- `rate_limit(method, times, retry_after)`: answer HTTP 429 with `Retry-After`, not performed;
- `lose_response(method, times, status)`: perform the call, then answer a 5xx (a lost response);
- `hang(method, times)`: never answer until `release()` (the call is not performed);
- `fail_when` / `fail_methods` / `fail_error`: answer `ok: false` with `fail_error`;
- `enforce_limits(...)`: Slack's own rate limits (`chat.postMessage` per channel,
  `chat.update` per workspace, `views.publish` per workspace), a token bucket each, answering
  HTTP 429 with the `Retry-After` of the next free token beyond them (`limited` lists those).

OAuth distribution: `install_as(team)` says which workspace the next installer approves for;
`GET /oauth/v2/authorize` (Slack's authorize page, approved at once) sends them back to the
`redirect_uri` with a code, which `oauth.v2.access` exchanges for a bot token of that team
(with a refresh token and an expiry when `rotation_seconds` is set; a refresh gives a new
token, the old one good until it expires). Once any workspace is installed, every call's
token is checked: one that was never issued, or whose workspace uninstalled the app
(`uninstall(team)`), is answered `invalid_auth` / `token_revoked`; `ApiCall.team` is the
workspace a call was for. An installation's token has the scopes its authorize link asked
for (`granted`), and a method that needs another (`users.info`: `users:read`) is answered
`missing_scope`, as Slack does.

Chat streaming (`chat.startStream` / `appendStream` / `stopStream`) keeps a message whose
text grows, and `assistant.threads.setStatus` a thread's status line (`statuses`, cleared by
a post in the thread as Slack does); `streams = False` answers them `unknown_method`, as a
workspace without them.

Use it to test your own agents and policies too:

    async with FakeSlackAPI() as slack:
        ...  # run the bot with SLACK_API_URL=slack.url, then inspect slack.calls / slack.messages
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import math
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from bot.slack.listeners.commands import STILL_WORKING_COMMAND
from bot.slack.listeners.questions import STILL_WORKING_ANSWER
from bot.slack.listeners.shared import STILL_WORKING
from bot.slack.listeners.views import (
    STILL_WORKING_APPROVAL,
    STILL_WORKING_BATCH,
    STILL_WORKING_EDIT,
    STILL_WORKING_REJECTION,
)

Picker = Callable[[dict[str, Any]], bool]  # picks the calls a knob applies to, by their params


# The scope a method needs beyond those every installation has (checked for OAuth tokens).
NEEDS_SCOPE = {"users.info": "users:read"}

# The notes a slow answer is preceded by (`ephemeral_to` leaves them out unless asked).
INTERIM_NOTES = frozenset(
    {
        STILL_WORKING,
        STILL_WORKING_ANSWER,
        STILL_WORKING_APPROVAL,
        STILL_WORKING_BATCH,
        STILL_WORKING_COMMAND,
        STILL_WORKING_EDIT,
        STILL_WORKING_REJECTION,
    }
)


class _SlackError(Exception):
    """An error Slack would answer with `ok: false`."""


@dataclass
class ApiCall:
    """One Web API request as the bot sent it."""

    method: str
    params: dict[str, Any]
    token: str = ""
    at: float = field(default_factory=time.monotonic)
    team: str = ""  # the workspace of `token` (OAuth distribution; '' otherwise)


@dataclass
class Limit:
    """One of Slack's rate limits as the stand-in enforces it: `burst` calls, then `rate` per
    second, per scope (a channel or a workspace)."""

    rate: float
    burst: float
    buckets: dict[str, tuple[float, float]] = field(default_factory=dict)

    def take(self, scope: str, now: float) -> float:
        """0 when a call is allowed now (a token taken), else the seconds until one is free."""
        tokens, last = self.buckets.get(scope, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        if tokens >= 1:
            self.buckets[scope] = (tokens - 1, now)
            return 0.0
        self.buckets[scope] = (tokens, now)
        return (1 - tokens) / self.rate


@dataclass
class Message:
    """A message as it currently stands in the fake workspace."""

    channel: str
    ts: str
    text: str
    blocks: list[dict[str, Any]] = field(default_factory=list)
    thread_ts: str | None = None
    updates: int = 0
    metadata: dict[str, Any] | None = None
    # Slack's chat streaming (chat.startStream): True while the stream is open (Slack shows
    # it as being written); `markdown`: its text is Slack markdown, not mrkdwn.
    streaming: bool = False
    markdown: bool = False

    def all_text(self) -> str:
        """The fallback text and every text field of every block, concatenated."""
        found: list[str] = [self.text]

        def visit(value: Any) -> None:
            if isinstance(value, dict):
                for key, item in value.items():
                    if key == "text" and isinstance(item, str):
                        found.append(item)
                    else:
                        visit(item)
            elif isinstance(value, list):
                for item in value:
                    visit(item)

        visit(self.blocks)
        return "\n".join(found)

    def _controls(self) -> list[tuple[str, str, str]]:
        """(action id, value, menu) of every control in the message's actions blocks, in
        order; a menu's options stand for the buttons they name (`menu` is the menu's action
        id, '' for a button)."""
        found: list[tuple[str, str, str]] = []
        for block in self.blocks:
            for element in block.get("elements", []) if block.get("type") == "actions" else []:
                if element.get("type") == "overflow":
                    for option in element.get("options", []):
                        action_id, _, value = str(option.get("value", "")).partition(" ")
                        found.append((action_id, value, str(element["action_id"])))
                else:
                    found.append((element["action_id"], str(element.get("value", "")), ""))
        return found

    def action_ids(self) -> list[str]:
        """The action ids of its buttons, and of the buttons its menus' options stand for."""
        return [action_id for action_id, _, _ in self._controls()]

    def menu_of(self, action_id: str) -> tuple[str, str] | None:
        """(the menu's action id, the option's value) when `action_id` is a menu option."""
        for found, value, menu in self._controls():
            if found == action_id and menu:
                return menu, f"{action_id} {value}"
        return None

    def accessory_value(self, action_id: str) -> str:
        """The value of a section's accessory button (Show all)."""
        for block in self.blocks:
            accessory = block.get("accessory") or {}
            if accessory.get("action_id") == action_id:
                return str(accessory["value"])
        raise KeyError(action_id)

    def button_value(self, action_id: str) -> str:
        """The value of the button `action_id` (or of the button a menu option stands for)."""
        for found, value, _ in self._controls():
            if found == action_id:
                return value
        raise KeyError(action_id)


class FakeSlackAPI:
    """An aiohttp server on loopback that behaves like the parts of Slack's Web API we call."""

    def __init__(
        self, *, team_id: str = "T0TEST", bot_user_id: str = "UBOT", enterprise_id: str = ""
    ) -> None:
        self.team_id = team_id
        self.enterprise_id = enterprise_id  # set for a workspace of an Enterprise Grid org
        self.bot_user_id = bot_user_id
        self.calls: list[ApiCall] = []
        self.messages: dict[tuple[str, str], Message] = {}
        self.ephemeral: list[dict[str, Any]] = []
        self.views: list[dict[str, Any]] = []
        # App Home tabs: user id -> the view last published (views.publish), and how many times.
        self.home_views: dict[str, dict[str, Any]] = {}
        self.home_publishes: dict[str, int] = {}
        self.fail_methods: set[str] = set()
        # Fail only the calls this predicate picks: (method, params) -> True to fail.
        self.fail_when: Callable[[str, dict[str, Any]], bool] | None = None
        # Methods answered with HTTP 429 (rate limited, Retry-After: 1), as Slack does.
        self.rate_limited: set[str] = set()
        # Slack's limits, when `enforce_limits` set them: method -> (limit, what scopes it).
        self.limits: dict[str, Limit] = {}
        self.limited: list[ApiCall] = []  # calls answered 429 for going beyond `limits`
        self.fail_error = "fatal_error"
        # Bad days: method -> (calls left, argument, which calls) (see the module docstring).
        self._rate_limited: dict[str, list[Any]] = {}
        self._lost: dict[str, list[Any]] = {}
        self._hung: dict[str, list[Any]] = {}
        self._release = asyncio.Event()
        self.hanging = 0  # calls waiting for `release()` right now
        # OAuth distribution (see the module docstring).
        self.responses: list[dict[str, Any]] = []  # posted to a response_url (`hooks_url`)
        self.hooks_url = ""
        self.installing = ""  # the team the next installer approves for
        self.codes: dict[str, str] = {}  # code -> team
        self.code_scopes: dict[str, list[str]] = {}  # code -> the scopes its link asked for
        self.granted: dict[str, list[str]] = {}  # bot token -> its scopes (OAuth installs)
        self.issued: dict[str, str] = {}  # bot token -> team (those still good)
        self.revoked: set[str] = set()  # tokens revoked: by a refresh or an uninstall
        self.refresh_tokens: dict[str, str] = {}  # refresh token -> team
        self.rotation_seconds = 0  # > 0: tokens expire this long after being installed
        self.refreshed_seconds = 43200  # and this long after a refresh (Slack: 12 h)
        self.refreshes = 0  # oauth.v2.access calls with a refresh token
        self.client_secret = ""  # set: oauth.v2.access checks the client's secret
        self.streams = True  # chat.startStream and its kin answered (False: unknown_method)
        # assistant.threads.setStatus: (channel, thread ts) -> the statuses set, in order ('':
        # cleared); Slack clears it itself when the bot posts in the thread (the last None).
        self.statuses: dict[tuple[str, str], list[str | None]] = {}
        # User groups for usergroups.list: id -> (handle, member ids).
        self.usergroups: dict[str, tuple[str, list[str]]] = {}
        # Channel members for conversations.members: channel id -> member ids. A channel not
        # set here is answered `channel_not_found` (the bot is not in it).
        self.channel_members: dict[str, list[str]] = {}
        # users.info: the bot users among the people (another app's bot reacting), and the
        # team of those not of this workspace (a shared channel's guests).
        self.bot_users: set[str] = set()
        self.user_teams: dict[str, str] = {}
        self.members_page = 200  # the most members one page holds (Slack: `limit`, <= 1000)
        self._ts = itertools.count(1)
        self._last_ts = 0.0
        self._runner: web.AppRunner | None = None
        self.url = ""
        self.changed = asyncio.Event()
        # Socket Mode: the open websockets, and the acks awaited by envelope id.
        self.sockets: list[web.WebSocketResponse] = []
        self._acks: dict[str, asyncio.Future[dict[str, Any]]] = {}

    async def __aenter__(self) -> FakeSlackAPI:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        app = web.Application(client_max_size=10 * 1024 * 1024)
        app.router.add_post("/api/{method}", self._handle)
        app.router.add_get("/api/{method}", self._handle)
        app.router.add_get("/socket", self._socket)
        app.router.add_get("/oauth/v2/authorize", self._authorize)
        app.router.add_post("/hooks/{rest:.*}", self._hook)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/api/"
        self.hooks_url = f"http://127.0.0.1:{port}/hooks/"
        self.socket_url = f"ws://127.0.0.1:{port}/socket"

    @property
    def running(self) -> bool:
        return self._runner is not None

    async def stop(self) -> None:
        self._release.set()
        for socket in self.sockets:
            await socket.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # Socket Mode --------------------------------------------------------------------------

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        self.sockets.append(socket)
        await socket.send_json({"type": "hello", "num_connections": len(self.sockets)})
        async for message in socket:
            if message.type != WSMsgType.TEXT:
                continue
            data = json.loads(message.data)
            future = self._acks.pop(str(data.get("envelope_id", "")), None)
            if future is not None and not future.done():
                future.set_result(data)
        self.sockets.remove(socket)
        return socket

    async def socket_send(
        self, kind: str, payload: dict[str, Any], *, timeout: float = 10.0
    ) -> dict[str, Any]:
        """Deliver an envelope (`slash_commands`, `interactive`, `events_api`) over Socket Mode
        and return the app's acknowledgement."""
        assert self.sockets, "no Socket Mode connection is open"
        envelope_id = f"env-{next(self._ts)}"
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._acks[envelope_id] = future
        await self.sockets[-1].send_json(
            {"envelope_id": envelope_id, "type": kind, "payload": payload,
             "accepts_response_payload": kind != "events_api"}
        )  # fmt: skip
        return await asyncio.wait_for(future, timeout)

    # Bad days ------------------------------------------------------------------------------

    def rate_limit(
        self, method: str, times: int, retry_after: int = 1, *, when: Picker | None = None
    ) -> None:
        """The next `times` calls of `method` (that `when` picks, if given) get HTTP 429 with
        `Retry-After: retry_after`, and are not performed."""
        self._rate_limited[method] = [times, retry_after, when]

    def enforce_limits(
        self,
        *,
        posts_per_second: float = 1.0,
        post_burst: float = 6,
        updates_per_minute: float = 50.0,
        update_burst: float = 12,
        publishes_per_minute: float = 100.0,
        publish_burst: float = 24,
    ) -> None:
        """Enforce Slack's limits from now on: `chat.postMessage` per channel (about one a
        second, short bursts allowed), `chat.update` (Tier 3) and `views.publish` (Tier 4) per
        workspace. A call beyond them gets HTTP 429 with `Retry-After` (whole seconds, as
        Slack sends it) and is not performed."""
        self.limits = {
            "chat.postMessage": Limit(posts_per_second, post_burst),
            "chat.update": Limit(updates_per_minute / 60, update_burst),
            "views.publish": Limit(publishes_per_minute / 60, publish_burst),
        }

    def _beyond_limit(self, method: str, params: dict[str, Any]) -> float:
        limit = self.limits.get(method)
        if limit is None:
            return 0.0
        scope = str(params.get("channel", "")) if method == "chat.postMessage" else self.team_id
        return limit.take(scope, time.monotonic())

    def lose_response(
        self, method: str, times: int = 1, status: int = 502, *, when: Picker | None = None
    ) -> None:
        """The next `times` calls of `method` (that `when` picks) are performed, then answered
        with HTTP `status`: the caller cannot know they took effect."""
        self._lost[method] = [times, status, when]

    def hang(self, method: str, times: int = 1, *, when: Picker | None = None) -> None:
        """The next `times` calls of `method` (that `when` picks) get no answer until
        `release()`; released, they are performed and answered."""
        self._hung[method] = [times, None, when]

    def release(self) -> None:
        """Let every hanging call go on (it is then performed and answered)."""
        self._release.set()
        self._release = asyncio.Event()

    @staticmethod
    def _take(knob: dict[str, list[Any]], method: str, params: dict[str, Any]) -> bool:
        left = knob.get(method)
        if not left or left[0] <= 0 or (left[2] is not None and not left[2](params)):
            return False
        left[0] -= 1
        return True

    # Queries used by tests ----------------------------------------------------------------

    def calls_to(self, method: str) -> list[ApiCall]:
        return [c for c in self.calls if c.method == method]

    def top_level(self, channel: str | None = None) -> list[Message]:
        """Top-level messages of `channel`, or of every channel (direct messages apart: see
        `dms`)."""
        return [
            m
            for m in self.messages.values()
            if m.thread_ts is None
            and (m.channel == channel if channel is not None else not m.channel.startswith("D"))
        ]

    def dms(self, user: str) -> list[Message]:
        """The bot's direct messages to `user` (conversations.open, then chat.postMessage)."""
        return [m for m in self.messages.values() if m.channel == self.dm_channel(user)]

    @staticmethod
    def dm_channel(user: str) -> str:
        return f"D{user}"

    def thread(self, channel: str, ts: str) -> list[Message]:
        return [m for m in self.messages.values() if m.channel == channel and m.thread_ts == ts]

    def card_messages(self) -> list[Message]:
        """The bot's cards (approvals and questions), in any state: the messages whose
        metadata names a card target."""
        return [
            m
            for m in self.top_level()
            if str(((m.metadata or {}).get("event_payload") or {}).get("target", "")).startswith(
                "card:"
            )
        ]

    def approval_messages(self) -> list[Message]:
        """The approval cards, in any state (questions apart: `question_messages`)."""
        return [m for m in self.card_messages() if "Question from the agent" not in m.all_text()]

    def question_messages(self) -> list[Message]:
        """The cards of the agents' questions (`ask_human`)."""
        return [m for m in self.top_level() if "Question from the agent" in m.all_text()]

    def ephemeral_to(self, user: str, *, interim: bool = False) -> list[str]:
        """What the bot told `user` privately, oldest first. A request that outlasts
        the ack budget (a loaded machine) is first told the bot is still working on it, then
        its answer: that note is left out unless `interim`, so a test waiting for a person's
        answer waits for the answer, not for the note."""
        texts = [str(e.get("text", "")) for e in self.ephemeral if e.get("user") == user]
        return texts if interim else [t for t in texts if t not in INTERIM_NOTES]

    # The API ------------------------------------------------------------------------------

    async def _params(self, request: web.Request) -> dict[str, Any]:
        if request.method == "GET":
            return dict(request.query)
        if request.content_type == "application/json":
            data = await request.json()
            return dict(data) if isinstance(data, dict) else {}
        form = await request.post()
        params: dict[str, Any] = {k: v for k, v in form.items() if isinstance(v, str)}
        params.update(request.query)
        for key in ("blocks", "view"):
            if isinstance(params.get(key), str):
                params[key] = json.loads(params[key])
        return params

    def _next_ts(self) -> str:
        """Unique, increasing, and near the real time (as `oldest` filters expect)."""
        self._last_ts = max(time.time(), self._last_ts + 0.000001)
        return f"{self._last_ts:.6f}"

    async def _hook(self, request: web.Request) -> web.Response:
        """A `response_url`: what was said to the person who sent the command or click."""
        self.responses.append(await request.json())
        return web.Response(text="ok")

    def install_as(self, team: str) -> None:
        """The next installer approves the app for `team`."""
        self.installing = team

    def uninstall(self, team: str) -> None:
        """The workspace removes the app: its tokens stop working (Slack then sends the bot
        `app_uninstalled`, which a test sends with `SlackRequests.uninstalled`)."""
        for token, owner in list(self.issued.items()):
            if owner == team:
                self.revoked.add(token)
                del self.issued[token]

    async def _authorize(self, request: web.Request) -> web.Response:
        """Slack's authorize page, approved by the installer at once: back to the app."""
        query = request.query
        redirect = query.get("redirect_uri", "")
        if not self.installing or not redirect or not query.get("client_id"):
            return web.Response(status=400, text="no installing team, redirect_uri or client_id")
        code = "code-" + secrets.token_hex(8)
        self.codes[code] = self.installing
        self.code_scopes[code] = [s for s in query.get("scope", "").split(",") if s]
        state = query.get("state", "")
        raise web.HTTPFound(f"{redirect}?code={code}&state={state}")

    def _new_token(self, team: str, lasts: int = 0) -> dict[str, Any]:
        token = f"xoxb-{team}-{secrets.token_hex(6)}"
        self.issued[token] = team
        grant: dict[str, Any] = {"access_token": token, "token_type": "bot"}
        if self.rotation_seconds:
            refresh = f"xoxe-1-{team}-{secrets.token_hex(6)}"
            self.refresh_tokens[refresh] = team
            grant.update(refresh_token=refresh, expires_in=lasts or self.rotation_seconds)
        return grant

    def _oauth_v2_access(self, p: dict[str, Any]) -> dict[str, Any]:
        if self.client_secret and p.get("client_secret") != self.client_secret:
            raise _SlackError("invalid_client")
        if p.get("grant_type") == "refresh_token":
            team = self.refresh_tokens.get(str(p.get("refresh_token", "")))
            if team is None:
                raise _SlackError("invalid_refresh_token")
            self.refreshes += 1  # the old token stays good until it expires, as on Slack
            grant = self._new_token(team, self.refreshed_seconds)
            return {**grant, "team": {"id": team}, "enterprise": None}
        code = str(p.get("code", ""))
        team = self.codes.pop(code, None)
        if team is None:
            raise _SlackError("invalid_code")
        scopes = self.code_scopes.pop(code, [])
        grant = self._new_token(team)
        self.granted[grant["access_token"]] = scopes
        return {
            **grant,
            "scope": ",".join(scopes),
            "bot_user_id": self.bot_user_id,
            "app_id": "A0TEST",
            "team": {"id": team, "name": f"Workspace {team}"},
            "enterprise": None,
            "authed_user": {"id": "UINSTALLER"},
            "is_enterprise_install": False,
        }

    def _team_of(self, method: str, token: str) -> str:
        """The workspace `token` belongs to; with any workspace installed, a bad token is an
        error as Slack answers it (`oauth.v2.access` authenticates with the client's id)."""
        if not (self.issued or self.revoked) or method == "oauth.v2.access":
            return ""
        if token in self.revoked:
            raise _SlackError("token_revoked")
        if token not in self.issued:
            raise _SlackError("invalid_auth")
        return self.issued[token]

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await self._params(request)
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if request.headers.get("Authorization", "").startswith("Basic "):
            secret = base64.b64decode(request.headers["Authorization"][6:]).decode()
            params.setdefault("client_id", secret.partition(":")[0])
            params.setdefault("client_secret", secret.partition(":")[2])
            token = ""
        token = str(params.pop("token", "")) or token
        self.calls.append(ApiCall(method, params, token))
        try:
            self.calls[-1].team = self._team_of(method, token)
        except _SlackError as exc:
            return web.json_response({"ok": False, "error": str(exc)})
        if method == "auth.test" and self.calls[-1].team:
            params = {**params, "team_of_token": self.calls[-1].team}
        needed = NEEDS_SCOPE.get(method)
        if needed and needed not in self.granted.get(token, [needed]):
            return web.json_response({"ok": False, "error": "missing_scope", "needed": needed})
        if method in self.rate_limited:
            return web.json_response(
                {"ok": False, "error": "ratelimited"}, status=429, headers={"Retry-After": "1"}
            )
        beyond = self._beyond_limit(method, params)
        if beyond > 0:
            self.limited.append(self.calls[-1])
            return web.json_response(
                {"ok": False, "error": "ratelimited"},
                status=429,
                headers={"Retry-After": str(math.ceil(beyond))},
            )
        if self._take(self._rate_limited, method, params):
            retry_after = self._rate_limited[method][1]
            return web.json_response(
                {"ok": False, "error": "ratelimited"},
                status=429,
                headers={"Retry-After": str(retry_after)},
            )
        if self._take(self._hung, method, params):
            self.hanging += 1
            try:
                await self._release.wait()
            finally:
                self.hanging -= 1
        if method in self.fail_methods or (self.fail_when and self.fail_when(method, params)):
            return web.json_response({"ok": False, "error": self.fail_error})
        handler = getattr(self, "_" + method.replace(".", "_"), None)
        if handler is None:
            return web.json_response({"ok": False, "error": "unknown_method"})
        try:
            result: dict[str, Any] = handler(params)
        except _SlackError as exc:
            return web.json_response({"ok": False, "error": str(exc)})
        self.changed.set()
        self.changed = asyncio.Event()
        if self._take(self._lost, method, params):
            return web.Response(status=self._lost[method][1], text="<html>Bad Gateway</html>")
        return web.json_response({"ok": True, **result})

    def _apps_connections_open(self, _: dict[str, Any]) -> dict[str, Any]:
        return {"url": self.socket_url}

    def _auth_test(self, p: dict[str, Any]) -> dict[str, Any]:
        return {
            "team_id": p.get("team_of_token") or self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": "BBOT",
            "enterprise_id": self.enterprise_id or None,
            "is_enterprise_install": False,
            "url": "https://example.slack.com/",
        }

    def _chat_postMessage(self, p: dict[str, Any]) -> dict[str, Any]:
        ts = self._next_ts()
        message = Message(
            channel=str(p["channel"]),
            ts=ts,
            text=str(p.get("text", "")),
            blocks=list(p.get("blocks") or []),
            thread_ts=p.get("thread_ts"),
            metadata=p.get("metadata") if isinstance(p.get("metadata"), dict) else None,
        )
        self.messages[(message.channel, ts)] = message
        self._cleared_by_post(message.channel, message.thread_ts)
        return {"channel": message.channel, "ts": ts, "message": {"text": message.text}}

    def _assistant_threads_setStatus(self, p: dict[str, Any]) -> dict[str, Any]:
        if not self.streams:
            raise _SlackError("unknown_method")
        key = (str(p.get("channel_id", "")), str(p.get("thread_ts", "")))
        if key not in self.messages:
            raise _SlackError("invalid_thread_ts")
        if "status" not in p:
            raise _SlackError("invalid_arguments")
        self.statuses.setdefault(key, []).append(str(p["status"]))
        return {}

    def status_of(self, channel: str, thread_ts: str) -> str:
        """The status line under a thread now ('' when none)."""
        said = self.statuses.get((channel, thread_ts)) or [""]
        return said[-1] or ""

    def _cleared_by_post(self, channel: str, thread_ts: str | None) -> None:
        if thread_ts and self.status_of(channel, thread_ts):
            self.statuses[(channel, thread_ts)].append(None)  # Slack clears it on a reply

    def _chat_startStream(self, p: dict[str, Any]) -> dict[str, Any]:
        if not self.streams:
            raise _SlackError("unknown_method")
        channel = str(p.get("channel", ""))
        if not p.get("thread_ts"):
            raise _SlackError("invalid_arguments")  # streamed messages answer someone
        if channel[:1] in "CG" and not (p.get("recipient_user_id") and p.get("recipient_team_id")):
            raise _SlackError("invalid_arguments")  # required when streaming to channels
        ts = self._next_ts()
        message = Message(
            channel=channel, ts=ts, text=str(p.get("markdown_text") or ""),
            thread_ts=str(p["thread_ts"]), streaming=True, markdown=True,
        )  # fmt: skip
        self.messages[(channel, ts)] = message
        self._cleared_by_post(channel, message.thread_ts)
        return {"channel": channel, "ts": ts}

    def _streaming(self, p: dict[str, Any]) -> Message:
        if not self.streams:
            raise _SlackError("unknown_method")
        message = self.messages.get((str(p.get("channel", "")), str(p.get("ts", ""))))
        if message is None:
            raise _SlackError("message_not_found")
        if not message.streaming:
            raise _SlackError("message_not_in_streaming_state")
        return message

    def _chat_appendStream(self, p: dict[str, Any]) -> dict[str, Any]:
        message = self._streaming(p)
        if not p.get("markdown_text"):
            raise _SlackError("invalid_arguments")
        message.text += str(p["markdown_text"])
        message.updates += 1
        return {"channel": message.channel, "ts": message.ts}

    def _chat_stopStream(self, p: dict[str, Any]) -> dict[str, Any]:
        message = self._streaming(p)
        message.text += str(p.get("markdown_text") or "")
        message.streaming = False
        if isinstance(p.get("metadata"), dict):
            message.metadata = p["metadata"]
        message.updates += 1
        return {"channel": message.channel, "ts": message.ts, "message": {"text": message.text}}

    def _chat_update(self, p: dict[str, Any]) -> dict[str, Any]:
        key = (str(p["channel"]), str(p["ts"]))
        if key not in self.messages:
            raise _SlackError("message_not_found")
        message = self.messages[key]
        message.text = str(p.get("text", message.text))
        message.blocks = list(p.get("blocks") or message.blocks)
        message.updates += 1
        return {"channel": key[0], "ts": key[1]}

    def _listed(self, message: Message, p: dict[str, Any]) -> dict[str, Any]:
        item: dict[str, Any] = {"type": "message", "ts": message.ts, "text": message.text}
        if message.thread_ts:
            item["thread_ts"] = message.thread_ts
        if message.metadata and str(p.get("include_all_metadata", "")).lower() in ("1", "true"):
            item["metadata"] = message.metadata
        return item

    def _conversations_history(self, p: dict[str, Any]) -> dict[str, Any]:
        """Top-level messages of a channel, newest first, from `oldest` on."""
        oldest = float(p.get("oldest") or 0)
        found = [
            self._listed(m, p)
            for m in self.messages.values()
            if m.channel == p.get("channel") and m.thread_ts is None and float(m.ts) >= oldest
        ]
        return {"messages": sorted(found, key=lambda m: m["ts"], reverse=True)}

    def _conversations_replies(self, p: dict[str, Any]) -> dict[str, Any]:
        """A thread's messages (its parent first), from `oldest` on."""
        oldest, parent = float(p.get("oldest") or 0), str(p.get("ts", ""))
        found = [
            self._listed(m, p)
            for m in self.messages.values()
            if m.channel == p.get("channel")
            and (m.ts == parent or m.thread_ts == parent)
            and float(m.ts) >= oldest
        ]
        return {"messages": sorted(found, key=lambda m: m["ts"])}

    def _chat_postEphemeral(self, p: dict[str, Any]) -> dict[str, Any]:
        ts = self._next_ts()
        self.ephemeral.append({**p, "message_ts": ts})  # when it was shown, among the messages
        return {"message_ts": ts}

    def _views_open(self, p: dict[str, Any]) -> dict[str, Any]:
        self.views.append(p)
        return {"view": {"id": f"V{len(self.views)}", **(p.get("view") or {})}}

    def _usergroups_list(self, p: dict[str, Any]) -> dict[str, Any]:
        groups = [
            {"id": gid, "handle": handle, "team_id": self.team_id, "users": list(users)}
            for gid, (handle, users) in self.usergroups.items()
        ]
        return {"usergroups": groups}

    def _conversations_members(self, p: dict[str, Any]) -> dict[str, Any]:
        members = self.channel_members.get(str(p.get("channel", "")))
        if members is None:
            raise _SlackError("channel_not_found")
        start = int(str(p.get("cursor") or "0").removeprefix("c") or 0)
        size = min(int(p.get("limit") or 100), self.members_page)
        end = start + size
        cursor = f"c{end}" if end < len(members) else ""
        return {"members": members[start:end], "response_metadata": {"next_cursor": cursor}}

    def _users_info(self, p: dict[str, Any]) -> dict[str, Any]:
        user = str(p.get("user", ""))
        if not user:
            raise _SlackError("user_not_found")
        bot = user in self.bot_users or user == self.bot_user_id
        team = self.user_teams.get(user, self.team_id)
        return {"user": {"id": user, "team_id": team, "is_bot": bot, "is_app_user": bot}}

    def _conversations_open(self, p: dict[str, Any]) -> dict[str, Any]:
        users = str(p.get("users", "")).split(",")
        if len(users) != 1 or not users[0]:
            raise _SlackError("not_implemented")  # group DMs: not used by the bot
        return {"channel": {"id": self.dm_channel(users[0])}}

    def _views_publish(self, p: dict[str, Any]) -> dict[str, Any]:
        user = str(p.get("user_id", ""))
        view = p.get("view")
        if isinstance(view, str):
            view = json.loads(view)
        if not user or not isinstance(view, dict) or view.get("type") != "home":
            raise _SlackError("invalid_arguments")
        self.home_views[user] = view
        self.home_publishes[user] = self.home_publishes.get(user, 0) + 1
        return {"view": {"id": f"VH{user}", **view}}

    def _chat_getPermalink(self, p: dict[str, Any]) -> dict[str, Any]:
        ts = str(p.get("message_ts", "")).replace(".", "")
        return {"permalink": f"https://example.slack.com/archives/{p.get('channel')}/p{ts}"}
