"""Slack-shaped, correctly signed requests to a running bot, for tests.

`SlackRequests` plays Slack's side of `/slack/events`: slash commands, button clicks, modal
submissions and thread-reply events, each signed with the app's signing secret the way Slack
signs them (v0 HMAC-SHA256 over `v0:<timestamp>:<body>`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import aiohttp


def signature_headers(body: bytes, secret: str, timestamp: int | None = None) -> dict[str, str]:
    """The headers Slack adds to a request with `body`."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}"}


@dataclass
class Sent:
    """A response from the bot to one request."""

    status: int
    text: str

    def json(self) -> Any:
        return json.loads(self.text) if self.text else None


class SlackRequests:
    """Sends what Slack would send for a person's actions."""

    def __init__(self, url: str, signing_secret: str, *, team_id: str = "T0TEST") -> None:
        self.url = url
        self.secret = signing_secret
        self.team_id = team_id
        # Where `response_url`s point: nowhere, unless a stand-in answers them (the harness's).
        self.hooks = "https://hooks.slack.invalid/"
        self.session: aiohttp.ClientSession | None = None
        self.statuses: list[int] = []  # every HTTP status the bot answered, in order

    async def __aenter__(self) -> SlackRequests:
        self.session = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.session is not None:
            await self.session.close()

    async def send_raw(
        self, body: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> Sent:
        assert self.session is not None, "use `async with SlackRequests(...)`"
        all_headers = {"Content-Type": content_type, **(headers or {})}
        async with self.session.post(self.url, data=body, headers=all_headers) as response:
            self.statuses.append(response.status)
            return Sent(response.status, await response.text())

    async def send_form(
        self, fields: dict[str, str], *, secret: str | None = None, timestamp: int | None = None
    ) -> Sent:
        body = urlencode(fields).encode()
        headers = signature_headers(body, secret or self.secret, timestamp)
        return await self.send_raw(body, "application/x-www-form-urlencoded", headers)

    async def send_json(
        self, payload: dict[str, Any], *, secret: str | None = None, timestamp: int | None = None
    ) -> Sent:
        body = json.dumps(payload).encode()
        headers = signature_headers(body, secret or self.secret, timestamp)
        return await self.send_raw(body, "application/json", headers)

    def _team(self, team: str | None) -> str:
        return team or self.team_id

    @staticmethod
    def _interaction(user: str, team_id: str) -> dict[str, Any]:
        """The fields every interaction payload carries: who, from which team, a trigger id."""
        return {
            "team": {"id": team_id, "domain": "example"},
            "user": {"id": user, "username": user.lower(), "team_id": team_id},
            "api_app_id": "A0TEST",
            "token": "unused",
            "trigger_id": secrets.token_hex(8),
        }

    def command_fields(
        self, text: str, *, user: str, channel: str, team: str | None = None
    ) -> dict[str, str]:
        return {
            "token": "unused",
            "team_id": self._team(team),
            "team_domain": "example",
            "channel_id": channel,
            "channel_name": "ops",
            "user_id": user,
            "user_name": user.lower(),
            "command": "/agent",
            "text": text,
            "api_app_id": "A0TEST",
            "response_url": f"{self.hooks}commands/1",
            "trigger_id": secrets.token_hex(8),
        }

    async def command(self, text: str, *, user: str, channel: str, team: str | None = None) -> Sent:
        """`/agent <text>`, typed by `user` in `channel` (text as Slack encodes it)."""
        return await self.send_form(
            self.command_fields(text, user=user, channel=channel, team=team)
        )

    def click_payload(
        self,
        action_id: str,
        value: str,
        *,
        user: str,
        channel: str,
        message_ts: str = "",
        team: str | None = None,
    ) -> dict[str, Any]:
        team_id = self._team(team)
        return {
            "type": "block_actions",
            **self._interaction(user, team_id),
            "container": {"type": "message", "message_ts": message_ts, "channel_id": channel},
            "channel": {"id": channel, "name": "ops"},
            "message": {"ts": message_ts, "text": ""},
            "response_url": f"{self.hooks}actions/1",
            "actions": [
                {
                    "type": "button",
                    "action_id": action_id,
                    "block_id": "decision",
                    "value": value,
                    "action_ts": f"{time.time():.6f}",
                }
            ],
        }

    async def send_interaction(self, payload: dict[str, Any], **kwargs: Any) -> Sent:
        return await self.send_form({"payload": json.dumps(payload)}, **kwargs)

    async def click(
        self,
        action_id: str,
        value: str,
        *,
        user: str,
        channel: str,
        message_ts: str = "",
        team: str | None = None,
    ) -> Sent:
        """A click on a button with `action_id` whose value is `value`."""
        payload = self.click_payload(
            action_id, value, user=user, channel=channel, message_ts=message_ts, team=team
        )
        return await self.send_interaction(payload)

    def choose_payload(
        self,
        menu: str,
        option: str,
        *,
        user: str,
        channel: str,
        message_ts: str = "",
        team: str | None = None,
    ) -> dict[str, Any]:
        """What Slack sends when `user` chooses the option whose value is `option` in the menu
        (an overflow) whose action id is `menu`."""
        payload = self.click_payload(
            menu, "", user=user, channel=channel, message_ts=message_ts, team=team
        )
        chosen = {"text": {"type": "plain_text", "text": option}, "value": option}
        action = {**payload["actions"][0], "type": "overflow", "selected_option": chosen}
        action.pop("value", None)
        payload["actions"] = [action]
        return payload

    async def choose(
        self,
        menu: str,
        option: str,
        *,
        user: str,
        channel: str,
        message_ts: str = "",
        team: str | None = None,
    ) -> Sent:
        """`user` chooses the option `option` of the menu `menu` (see `choose_payload`)."""
        payload = self.choose_payload(
            menu, option, user=user, channel=channel, message_ts=message_ts, team=team
        )
        return await self.send_interaction(payload)

    def submit_payload(
        self,
        view: dict[str, Any],
        values: dict[str, dict[str, Any]],
        *,
        user: str,
        team: str | None = None,
    ) -> dict[str, Any]:
        team_id = self._team(team)
        return {
            "type": "view_submission",
            **self._interaction(user, team_id),
            "view": {
                "id": "V1",
                "team_id": team_id,
                "type": "modal",
                "callback_id": view.get("callback_id"),
                "private_metadata": view.get("private_metadata", ""),
                "state": {"values": values},
            },
        }

    async def submit(
        self,
        view: dict[str, Any],
        values: dict[str, dict[str, Any]],
        *,
        user: str,
        team: str | None = None,
    ) -> Sent:
        """Submit a modal the bot opened (`view` as passed to views.open) with input `values`."""
        return await self.send_interaction(self.submit_payload(view, values, user=user, team=team))

    def event_payload(
        self, event: dict[str, Any], *, event_id: str | None = None, team: str | None = None
    ) -> dict[str, Any]:
        team_id = self._team(team)
        return {
            "token": "unused",
            "team_id": team_id,
            "api_app_id": "A0TEST",
            "type": "event_callback",
            "event_id": event_id or "Ev" + secrets.token_hex(6).upper(),
            "event_time": int(time.time()),
            "authorizations": [
                {"team_id": team_id, "user_id": "UBOT", "is_bot": True, "enterprise_id": None}
            ],
            "event": event,
        }

    async def uninstalled(self, team: str | None = None) -> Sent:
        """Slack tells the bot that a workspace removed the app (`app_uninstalled`)."""
        return await self.send_json(self.event_payload({"type": "app_uninstalled"}, team=team))

    async def bot_token_revoked(self, team: str | None = None) -> Sent:
        """Slack tells the bot that a workspace revoked its bot token (`tokens_revoked`)."""
        event = {"type": "tokens_revoked", "tokens": {"oauth": [], "bot": ["UBOT"]}}
        return await self.send_json(self.event_payload(event, team=team))

    async def mention(
        self,
        text: str,
        *,
        user: str,
        channel: str,
        thread_ts: str | None = None,
        ts: str | None = None,
        bot_user: str = "UBOT",
    ) -> Sent:
        """`user` mentions the bot: an `app_mention` event (Slack sends a `message` event for
        the same message too, with the same `ts`: see `thread_reply(..., ts=)`)."""
        event: dict[str, Any] = {
            "type": "app_mention",
            "channel": channel,
            "user": user,
            "team": self._team(None),
            "text": f"<@{bot_user}> {text}",
            "ts": ts or f"{time.time():.6f}",
        }
        if thread_ts:
            event["thread_ts"] = thread_ts
        return await self.send_json(self.event_payload(event))

    async def thread_reply(
        self,
        text: str,
        *,
        user: str,
        channel: str,
        thread_ts: str,
        event_id: str | None = None,
        team: str | None = None,
        ts: str | None = None,
    ) -> Sent:
        """A message `text` posted by `user` in the thread of message `thread_ts`."""
        event = {
            "type": "message",
            "channel": channel,
            "user": user,
            "team": self._team(team),
            "text": text,
            "ts": ts or f"{time.time():.6f}",
            "thread_ts": thread_ts,
            "channel_type": "channel",
        }
        return await self.send_json(self.event_payload(event, event_id=event_id))
