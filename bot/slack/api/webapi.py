"""The one Web API client: a shared aiohttp session, Slack's rate limits honoured, and the
retries that are safe.

slack_sdk's rate-limit handler waits `Retry-After` and tries again; its server-error and
connection-error handlers retry too, but only for calls that are safe to repeat: a
`chat.postMessage` whose response was lost may have been posted, so the projector looks it up
(by its metadata) before posting again, instead of a blind retry that posts it twice.
"""

from __future__ import annotations

import logging
from typing import Any, cast

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState

from bot.errors import ApprovalBotError
from bot.slack.api.metered import MeteredWebClient, NotServing, TokenSource, error_code

# A private reply repeated after a timeout shows twice (seen: 154 notes for 99 refused clicks
# on a loaded machine); one lost note is the lesser harm (the card itself shows the outcome).
NOT_REPEATABLE = ("chat.postMessage", "chat.postEphemeral")

# Errors that no retry can fix: the run's starter is told which one.
PERMANENT: dict[str, str] = {
    "channel_not_found": "the channel does not exist or the bot cannot see it (channel_not_found).",
    "not_in_channel": (
        "the bot is not a member of this channel; invite it with `/invite @approval-bot` "
        "(not_in_channel)."
    ),
    "is_archived": "the channel is archived (is_archived).",
    "invalid_auth": "the bot's token is not valid (invalid_auth).",
    "not_authed": "the bot sent no token (not_authed).",
    "account_inactive": "the bot's token was revoked or its app uninstalled (account_inactive).",
    "token_revoked": "the bot's token was revoked (token_revoked).",
    "missing_scope": "the app lacks a permission it needs (missing_scope).",
    "restricted_action": "a workspace setting does not let the bot post here (restricted_action).",
    "no_permission": "the bot has no permission to post here (no_permission).",
    "team_access_not_granted": (
        "the bot is not allowed in this workspace (team_access_not_granted)."
    ),
    "invalid_blocks": "Slack rejected the message's layout (invalid_blocks).",
    "msg_too_long": "the message is too long for Slack (msg_too_long).",
    "not_installed": "the app is no longer installed in this workspace (not_installed).",
}


class _OnlyRepeatable:
    """Mixin: never retry a call that may have taken effect and is not safe to repeat."""

    async def _can_retry_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        if request.url.rstrip("/").endswith(NOT_REPEATABLE):
            return False
        return await super()._can_retry_async(  # type: ignore[misc, no-any-return]
            state=state, request=request, response=response, error=error
        )


class RepeatableServerErrorRetryHandler(_OnlyRepeatable, AsyncServerErrorRetryHandler):
    """Retries 500/503 of calls that are safe to repeat."""


class RepeatableConnectionErrorRetryHandler(_OnlyRepeatable, AsyncConnectionErrorRetryHandler):
    """Retries connection errors of calls that are safe to repeat."""


def retry_handlers(rate_limit_retries: int = 1) -> list[AsyncRetryHandler]:
    return [
        AsyncRateLimitErrorRetryHandler(max_retry_count=rate_limit_retries),
        RepeatableServerErrorRetryHandler(max_retry_count=2),
        RepeatableConnectionErrorRetryHandler(max_retry_count=2),
    ]


class SdkLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """slack_sdk's logger, as the client is given it: its `level` is the level it logs at.
    slack_sdk formats every call's request and response into debug text when its logger's own
    `level` is DEBUG or unset (`logger.level <= DEBUG`), and its own logger's is unset: some
    26 µs of each Web API call went into text that was never logged (#32). Logging at DEBUG,
    the bot's log still has that text."""

    @property
    def level(self) -> int:
        return int(self.logger.getEffectiveLevel())


SDK_LOG = logging.getLogger("slack_sdk.web.async_base_client")


def build_client(
    token: str | None,
    base_url: str,
    session: aiohttp.ClientSession,
    *,
    timeout: int = 10,
    rate_limited: int = 1,
    tokens: TokenSource | None = None,
) -> MeteredWebClient:
    """A client whose calls all go over `session` (pooled connections); `rate_limited`: how
    many times a call answered 429 is tried again after its `Retry-After`, inside the call;
    `tokens`: installed in many workspaces, each call's token (`token` is then None)."""
    client = MeteredWebClient(
        token=token,
        base_url=base_url,
        session=session,
        timeout=timeout,
        retry_handlers=retry_handlers(rate_limited),
        logger=cast(logging.Logger, SdkLog(SDK_LOG, {})),  # (used as a Logger)
    )
    client.tokens = tokens
    return client


class Refused(ApprovalBotError):
    """Slack said something permanent; `cause` says what, in words for the run's starter."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code
        self.cause = PERMANENT.get(code, f"Slack answered `{code}`.")


class Later(ApprovalBotError):
    """Try again after `after` seconds; `ambiguous` when the call may have taken effect;
    `rate_limited` when Slack answered 429 (its `Retry-After` is `after`)."""

    def __init__(
        self, after: float, *, ambiguous: bool, why: str, rate_limited: bool = False
    ) -> None:
        super().__init__(why)
        self.after = after
        self.ambiguous = ambiguous
        self.rate_limited = rate_limited


def classify(exc: Exception) -> Refused | Later:
    """What a failed call means: permanent, rate limited, not done, or maybe done."""
    if isinstance(exc, NotServing):
        return Refused("not_installed")  # nothing was sent: no token for that workspace
    if isinstance(exc, SlackApiError):
        response = exc.response
        status = int(getattr(response, "status_code", 200) or 200)
        if status == 429:
            headers: Any = getattr(response, "headers", {}) or {}
            value = headers.get("Retry-After") or headers.get("retry-after") or "1"
            if isinstance(value, list):
                value = value[0]
            try:
                after = max(0.0, float(value))
            except ValueError:
                after = 1.0
            return Later(after, ambiguous=False, why="rate limited (429)", rate_limited=True)
        if status >= 500:
            return Later(1.0, ambiguous=True, why=f"HTTP {status}")
        code = error_code(exc, default="")
        if code in PERMANENT:
            return Refused(code)
        if code == "ratelimited":
            return Later(1.0, ambiguous=False, why=code)
        return Later(1.0, ambiguous=False, why=code or "error")
    # A timeout or a connection error: the request may or may not have reached Slack.
    return Later(1.0, ambiguous=True, why=type(exc).__name__)
