"""Where the bot is installed, learned from Slack for its token (`auth.test`), so that a policy
without a `workspace:` section serves exactly that workspace (or Grid org) and nobody else."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.service.authorize import Authorizer, Installation

log = logging.getLogger(__name__)

RETRY_SECONDS = 5.0


# Told Slack's `auth.test` answer (the Bolt app keeps it, so that no request waits for its own).
Answered = Callable[[Any], None]


def _installation(reply: Any) -> Installation:
    return Installation(
        team_id=str(reply.get("team_id") or ""),
        enterprise_id=str(reply.get("enterprise_id") or ""),
        org_wide=bool(reply.get("is_enterprise_install")),
    )


async def installation(client: AsyncWebClient) -> Installation:
    """Ask Slack which team (and Grid org) the bot token belongs to."""
    return _installation(await client.auth_test())


async def learn_once(
    client: AsyncWebClient, authorizer: Authorizer, answered: Answered | None = None
) -> bool:
    """Set `authorizer.installation` from Slack; False (logged) when Slack did not say."""
    try:
        reply = await client.auth_test()
        authorizer.installation = _installation(reply)
        if answered is not None:
            answered(reply)
    except SlackApiError as exc:
        log.error(
            "auth.test failed (%s): the bot cannot tell which workspace it serves and refuses "
            "every request until it can; check SLACK_BOT_TOKEN",
            exc.response.get("error", "error"),
        )
        return False
    except Exception as exc:
        log.error("auth.test failed (%s); retrying in %.0f s", type(exc).__name__, RETRY_SECONDS)
        return False
    log.info("serving Slack team %s", authorizer.installation.team_id)
    return True


async def learn_installation(
    client: AsyncWebClient,
    authorizer: Authorizer,
    every: float = RETRY_SECONDS,
    answered: Answered | None = None,
) -> None:
    """After a first failure, retry `learn_once` every `every` seconds until Slack answers.
    Until then the authorizer refuses everyone (fail closed) with a sentence that says why."""
    while True:
        await asyncio.sleep(every)
        if await learn_once(client, authorizer, answered):
            return
