"""Where the bot is installed, learned from Slack for its token (`auth.test`), so that a policy
without a `workspace:` section serves exactly that workspace (or Grid org) and nobody else."""

from __future__ import annotations

import asyncio
import logging

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.service.authorize import Authorizer, Installation

log = logging.getLogger(__name__)

RETRY_SECONDS = 5.0


async def installation(client: AsyncWebClient) -> Installation:
    """Ask Slack which team (and Grid org) the bot token belongs to."""
    reply = await client.auth_test()
    return Installation(
        team_id=str(reply.get("team_id") or ""),
        enterprise_id=str(reply.get("enterprise_id") or ""),
        org_wide=bool(reply.get("is_enterprise_install")),
    )


async def learn_once(client: AsyncWebClient, authorizer: Authorizer) -> bool:
    """Set `authorizer.installation` from Slack; False (logged) when Slack did not say."""
    try:
        authorizer.installation = await installation(client)
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
    client: AsyncWebClient, authorizer: Authorizer, every: float = RETRY_SECONDS
) -> None:
    """After a first failure, retry `learn_once` every `every` seconds until Slack answers.
    Until then the authorizer refuses everyone (fail closed) with a sentence that says why."""
    while True:
        await asyncio.sleep(every)
        if await learn_once(client, authorizer):
            return
