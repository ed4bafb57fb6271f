"""Global middleware: Slack's duplicate deliveries of an event are acknowledged and dropped
(Slack retries an event it thinks was not answered; a decision must not be made twice).

A Bolt `AsyncMiddleware` object, not a function: Bolt calls a function middleware with the
arguments it names, built anew for every request (#32: a tenth of the CPU Bolt spends on a
click, for a check that concerns events only); an object's `async_process` it calls as is."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from slack_bolt import BoltResponse
from slack_bolt.async_app import AsyncApp
from slack_bolt.middleware.async_middleware import AsyncMiddleware
from slack_bolt.request.async_request import AsyncBoltRequest

from bot.slack.listeners.deps import ListenerDeps
from bot.slack.listeners.shared import left

log = logging.getLogger(__name__)


def register(app: AsyncApp, deps: ListenerDeps) -> None:
    """Run before every listener."""
    app.middleware(DropDuplicateEvents(deps))


class DropDuplicateEvents(AsyncMiddleware):
    """An event delivered before (by its `event_id`) is answered with an empty 200 and goes no
    further. The check is bounded by the answer's deadline: Redis unreachable or slow, the
    event is handled (decisions are idempotent). Any other request goes on at once."""

    def __init__(self, deps: ListenerDeps) -> None:
        self.deps = deps

    async def async_process(
        self,
        *,
        req: AsyncBoltRequest,
        resp: BoltResponse,
        next: Callable[[], Awaitable[BoltResponse]],  # (Bolt calls it by this name)
    ) -> BoltResponse | None:
        body = req.body
        event_id = body.get("event_id") if body.get("type") == "event_callback" else None
        if not event_id:
            return await next()
        wait = left(self.deps.deadline_of(req.context))
        try:
            first = await asyncio.wait_for(
                self.deps.records.first_delivery("event", str(event_id)), wait
            )
        except Exception:  # Redis unreachable or slow: handle it (decisions are idempotent)
            log.warning("could not check event %s for duplicates in time", event_id)
            first = True
        if not first:
            log.info("ignored duplicate delivery of event %s", event_id)
            return BoltResponse(status=200, body="")  # acknowledged, and nothing else
        return await next()
