"""The Web API client the bot uses, counting Slack's errors and rate limits for `/metrics`.

Every Web API method of slack_sdk goes through `api_call`, so this one override sees every call
the bot makes (posts, updates, private replies, modals, group lookups).
"""

from __future__ import annotations

from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot import metrics


class MeteredWebClient(AsyncWebClient):  # type: ignore[misc]
    """An AsyncWebClient that counts failed calls (by Slack's error) and HTTP 429s."""

    async def api_call(self, api_method: str, **kwargs: Any) -> Any:
        try:
            return await super().api_call(api_method, **kwargs)
        except SlackApiError as exc:
            response = exc.response
            status = getattr(response, "status_code", 0)
            error = response.get("error") if hasattr(response, "get") else None
            if status == 429:
                metrics.SLACK_RATE_LIMITED.labels(method=api_method).inc()
                error = error or "ratelimited"
            metrics.SLACK_API_ERRORS.labels(method=api_method, error=str(error or status)).inc()
            raise
        except (TimeoutError, aiohttp.ClientError):
            metrics.SLACK_API_ERRORS.labels(method=api_method, error="connection").inc()
            raise
