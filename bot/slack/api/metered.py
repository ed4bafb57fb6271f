"""The Web API client the bot uses, counting Slack's errors and rate limits for `/metrics`.

Every Web API method of slack_sdk goes through `api_call`, so this one override sees every call
the bot makes (posts, updates, private replies, modals, group lookups). Installed in many
workspaces, it is also where each call gets the token of the workspace it is for (the one
`bot.slack.api.serving` says is being served).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Protocol

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot import metrics
from bot.errors import ApprovalBotError
from bot.slack.api.serving import SERVING, Team


class TokenSource(Protocol):
    async def bot_token(self, team: Team) -> str: ...


# Slack's error codes are short snake_case words (`invalid_auth`, `channel_not_found`). What
# comes in their place may be anything (a proxy's page, a wrong SLACK_API_URL, a token echoed
# back): it is never shown to people, logged or made a metric label as it came.
_ERROR_CODE = re.compile(r"[a-z][a-z0-9_.]{0,63}\Z")
NOT_A_CODE = "unreadable_answer"


def error_code(failed: object, default: str = "error") -> str:
    """Slack's error code of a failed call (a `SlackApiError`, or its `error` value) when it is
    one; `default` when there is none; `NOT_A_CODE` for anything else: safe to show, log and
    count."""
    value = failed
    if isinstance(failed, SlackApiError):
        response = failed.response
        value = response.get("error") if hasattr(response, "get") else None
    if value is None or value == "":
        return default
    text = value if isinstance(value, str) else ""
    return text if _ERROR_CODE.match(text) else NOT_A_CODE


# Slack's answers that the bot token itself is refused (not: this call was wrong).
TOKEN_REFUSED = frozenset({"invalid_auth", "not_authed", "account_inactive", "token_revoked"})


class NotServing(ApprovalBotError):
    """A Web API call made for no workspace, by a bot installed in many, or for one whose
    token the bot does not have (`bot.slack.installs.tokens.NotInstalled`): it is not sent."""


def _carries_credentials(api_method: str, kwargs: dict[str, Any]) -> bool:
    """The OAuth flow's own calls (client id and secret), and calls given a token."""
    if api_method.startswith("oauth.") or kwargs.get("auth"):
        return True
    return any("token" in (kwargs.get(part) or {}) for part in ("params", "json", "data"))


class MeteredWebClient(AsyncWebClient):  # type: ignore[misc]
    """An AsyncWebClient that counts failed calls (by Slack's error) and HTTP 429s; with
    `tokens`, each call carries the served workspace's token. `token_refused` is told Slack's
    error when a call of the bot's one token is answered that the token is refused (revoked
    while the bot runs): `/readyz` and the people then hear it
    (bot/slack/installs/installation.py)."""

    tokens: TokenSource | None = None
    token_refused: Callable[[str], None] | None = None

    async def api_call(self, api_method: str, **kwargs: Any) -> Any:
        if self.tokens is not None and not _carries_credentials(api_method, kwargs):
            team = SERVING.get()
            if team is None:
                raise NotServing(f"{api_method} was called for no workspace; it was not sent")
            token = await self.tokens.bot_token(team)
            headers = kwargs.get("headers") or {}
            kwargs["headers"] = {**headers, "Authorization": f"Bearer {token}"}
        try:
            return await super().api_call(api_method, **kwargs)
        except SlackApiError as exc:
            response = exc.response
            status = getattr(response, "status_code", 0)
            error = error_code(exc, default="")
            if status == 429:
                metrics.SLACK_RATE_LIMITED.labels(method=api_method).inc()
                error = error or "ratelimited"
            metrics.SLACK_API_ERRORS.labels(method=api_method, error=str(error or status)).inc()
            refused = self.token_refused
            if refused is not None and self.tokens is None and error in TOKEN_REFUSED:
                refused(error)
            raise
        except (TimeoutError, aiohttp.ClientError):
            metrics.SLACK_API_ERRORS.labels(method=api_method, error="connection").inc()
            raise
