"""Global middleware: Slack's duplicate deliveries of an event are acknowledged and dropped
(Slack retries an event it thinks was not answered; a decision must not be made twice)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt import BoltResponse
from slack_bolt.async_app import AsyncApp, AsyncBoltContext

from bot.slack.listeners.deps import ListenerDeps
from bot.slack.listeners.shared import left

log = logging.getLogger(__name__)

Middleware = Callable[..., Awaitable[Any]]


def register(app: AsyncApp, deps: ListenerDeps) -> None:
    """Run before every listener."""
    app.middleware(drop_duplicate_events(deps))


def drop_duplicate_events(deps: ListenerDeps) -> Middleware:
    """An event delivered before (by its `event_id`) is answered with an empty 200 and goes no
    further. The check is bounded by the answer's deadline: Redis unreachable or slow, the
    event is handled (decisions are idempotent)."""

    async def drop_duplicate_events(
        body: dict[str, Any], context: AsyncBoltContext, next: Callable[[], Awaitable[Any]]
    ) -> Any:
        event_id = body.get("event_id") if body.get("type") == "event_callback" else None
        if not event_id:
            return await next()
        wait = left(deps.deadline_of(context))
        try:
            first = await asyncio.wait_for(
                deps.records.first_delivery("event", str(event_id)), wait
            )
        except Exception:  # Redis unreachable or slow: handle it (decisions are idempotent)
            log.warning("could not check event %s for duplicates in time", event_id)
            first = True
        if not first:
            log.info("ignored duplicate delivery of event %s", event_id)
            return BoltResponse(status=200, body="")  # acknowledged, and nothing else
        return await next()

    return drop_duplicate_events
