"""What every listener does alike: who acted (from the signed request only), by when it must
answer, and how a failure after the acknowledgement is reported instead of raised."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from slack_bolt.async_app import AsyncBoltContext

from bot.outage import log_failure
from bot.service.ports import Actor

log = logging.getLogger(__name__)

TRY_AGAIN = "Something went wrong on the bot's side and nothing was changed. Try again in a moment."
STILL_WORKING = "Still working on your click; the card will show the result."

# Context keys the app sets on every request: when it arrived, and by when listeners answer.
RECEIVED = "approval_bot_received"
DEADLINE = "approval_bot_deadline"


def actor_of(context: AsyncBoltContext, body: dict[str, Any] | None = None) -> Actor:
    """Who acted, from the signed request only (Bolt's context, or the signed body's `user`
    for interactions: a modal submission's context carries the app's team, not the user's)."""
    user = (body or {}).get("user")
    user_team = user.get("team_id") if isinstance(user, dict) else None
    return Actor(
        team_id=str(user_team or context.team_id or ""),
        user_id=str(context.user_id or ""),
        enterprise_id=str(context.enterprise_id or ""),
    )


def channel_of(body: dict[str, Any], context: AsyncBoltContext) -> str:
    """The channel of a click: the message's, or the context's (Bolt's reading of the body)."""
    return str((body.get("channel") or {}).get("id", "")) or str(context.channel_id or "")


async def guard(what: str, work: Awaitable[Any], tell: Callable[[str], Any]) -> None:
    """Await `work`; an exception is logged and the person told to try again, never raised
    into Bolt (after `ack()` it could turn into a spurious "unhandled request")."""
    try:
        await work
    except Exception:
        log_failure(log, "failed to handle %s", what)
        try:
            tell(TRY_AGAIN)
        except Exception:
            log_failure(log, "could not report the failure of %s", what)


def left(deadline: float) -> float:
    """Seconds until `deadline` (loop time), never negative."""
    return max(0.0, deadline - asyncio.get_running_loop().time())


# A Bolt listener: Bolt passes the arguments it names (ack, body, context, ...).
Listener = Callable[..., Awaitable[None]]
