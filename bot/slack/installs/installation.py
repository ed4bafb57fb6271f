"""Where the bot is installed, learned from Slack for its token (`auth.test`), so that a policy
without a `workspace:` section serves exactly that workspace (or Grid org) and nobody else.

Until Slack has accepted the token the bot can do nothing (it cannot post, and it cannot tell
whom it serves): `SlackAuth` holds that truth for `/readyz`, the `approval_bot_slack_auth_ok`
gauge, the sentence a person who writes to the bot then gets, and one log line per change.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot import metrics
from bot.service.authorize import Authorizer, Installation
from bot.slack.api.metered import error_code
from bot.untrusted import escape

log = logging.getLogger(__name__)

RETRY_SECONDS = 5.0


# Told Slack's `auth.test` answer (the Bolt app keeps it, so that no request waits for its own).
Answered = Callable[[Any], None]


class SlackAuth:
    """Whether Slack accepts the bot token, as its latest `auth.test` said.

    `problem` is None once Slack accepted it; until then, what went wrong: Slack's error code
    (`invalid_auth`, `token_revoked`, ...; `error_code`: never the text that came in its place)
    or the kind of failure when Slack did not answer.
    Only a change is logged: the first failure (an ERROR with what to do), another kind of
    failure, and the recovery (INFO); retries that fail the same way say nothing more."""

    def __init__(self, *, accepted: bool = False) -> None:
        self.problem: str | None = None if accepted else "not asked yet"
        self.rejected = False  # Slack answered and refused the token (not: did not answer)
        metrics.SLACK_AUTH_OK.set(1 if accepted else 0)

    @property
    def ok(self) -> bool:
        return self.problem is None

    def accepted(self, team_id: str) -> None:
        if self.problem not in (None, "not asked yet"):
            log.info("Slack accepts the bot token again (auth.test): serving team %s", team_id)
        elif self.problem is not None:
            log.info("serving Slack team %s", team_id)
        self.problem, self.rejected = None, False
        metrics.SLACK_AUTH_OK.set(1)

    def failed(
        self, problem: str, *, rejected: bool, every: float, method: str = "auth.test"
    ) -> None:
        """`method` answered `problem` (Slack's error, or that it did not answer)."""
        if problem != self.problem:
            what = "refuses the bot token" if rejected else "did not answer"
            fix = "check SLACK_BOT_TOKEN" if rejected else "check the network and SLACK_API_URL"
            log.error(
                "Slack %s (%s: %s): the bot refuses every request and /readyz answers 503 until "
                "auth.test accepts it; %s. Asking again every %g s (logged again only on a "
                "change).",
                what, method, problem, fix, every,
            )  # fmt: skip
        self.problem, self.rejected = problem, rejected
        metrics.SLACK_AUTH_OK.set(0)

    def said(self) -> str | None:
        """What `/readyz` says of Slack: None once it accepts the token."""
        if self.problem is None:
            return None
        return f"token refused: {self.problem}" if self.rejected else self.problem

    def refusal(self) -> str:
        """What the person who wrote to the bot meanwhile is told."""
        if self.rejected:
            return (
                "The bot cannot act right now: Slack does not accept its token "
                f"({escape(self.problem or '')}). "
                "Please tell whoever runs the bot to check SLACK_BOT_TOKEN; it works again as "
                "soon as Slack accepts it."
            )
        return (
            "The bot cannot act right now: it cannot reach Slack to confirm its token. It keeps "
            "trying; please try again in a minute."
        )


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
    client: AsyncWebClient,
    authorizer: Authorizer,
    answered: Answered | None = None,
    auth: SlackAuth | None = None,
    every: float = RETRY_SECONDS,
) -> bool:
    """Set `authorizer.installation` from Slack; False (told to `auth`) when Slack did not say."""
    auth = auth or SlackAuth()
    try:
        reply = await client.auth_test()
    except SlackApiError as exc:
        auth.failed(error_code(exc), rejected=True, every=every)
        return False
    except Exception as exc:
        auth.failed(f"no answer: {type(exc).__name__}", rejected=False, every=every)
        return False
    authorizer.installation = _installation(reply)
    if answered is not None:
        answered(reply)
    auth.accepted(authorizer.installation.team_id)
    return True


async def learn_installation(
    client: AsyncWebClient,
    authorizer: Authorizer,
    every: float = RETRY_SECONDS,
    answered: Answered | None = None,
    auth: SlackAuth | None = None,
) -> None:
    """After a first failure, retry `learn_once` every `every` seconds until Slack answers.
    Until then the authorizer refuses everyone (fail closed) with a sentence that says why."""
    while True:
        await asyncio.sleep(every)
        if await learn_once(client, authorizer, answered, auth, every):
            return
