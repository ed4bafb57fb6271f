"""OAuth distribution: many workspaces install the app, each gets its own token and policy.

Bolt's OAuth flow serves `/slack/install` (a page with "Add to Slack", which sends the installer
to Slack's authorize page with a one-time `state`) and `/slack/oauth_redirect` (the `code`
exchanged with `oauth.v2.access` for the workspace's bot token, saved in the installation
store). Bolt's authorization then finds the token of each request's workspace (and refreshes
it when token rotation is on); requests of a workspace that has not installed the app are
refused by Bolt with its "please reinstall" sentence. When Slack says the app was uninstalled
(`app_uninstalled`) or the bot's token revoked (`tokens_revoked`), that workspace's
installation and data are deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from slack_bolt.async_app import AsyncApp, AsyncBoltContext
from slack_bolt.authorization.async_authorize import AsyncInstallationStoreAuthorize
from slack_bolt.oauth.async_oauth_settings import AsyncOAuthSettings
from slack_sdk.web.async_client import AsyncWebClient

from bot.outage import log_failure
from bot.slack.installs.tokens import WorkspaceTokens
from bot.store.installs.installations import RedisInstallationStore
from bot.store.installs.oauth_states import RedisStateStore

log = logging.getLogger(__name__)

Spawn = Callable[[Coroutine[Any, Any, None], str], None]

# What an installation grants: exactly the bot scopes of manifest.distributed.yml (a test
# compares them), each said why there.
BOT_SCOPES = (
    "commands", "chat:write", "channels:history", "groups:history", "app_mentions:read",
    "usergroups:read", "channels:read", "groups:read", "im:write",
)  # fmt: skip
# With APPROVAL_BOT_REACTIONS on, also: the reaction_added event (reactions:read), and who
# reacted, their team and whether they are a bot (users:read); without them a workspace's
# reactions decide nothing (docs/slack-app.md).
REACTION_SCOPES = ("reactions:read", "users:read")


def install_scopes(*, reactions: bool) -> list[str]:
    """The bot scopes an installation asks for: those of the features turned on."""
    return [*BOT_SCOPES, *(REACTION_SCOPES if reactions else ())]


@dataclass(frozen=True)
class Distribution:
    """What the app needs to serve many workspaces."""

    client_id: str
    client_secret: str
    installations: RedisInstallationStore
    states: RedisStateStore
    tokens: WorkspaceTokens
    authorize_url: str
    redirect_uri: str | None = None
    rotate_minutes: int = 120
    reactions: bool = False  # APPROVAL_BOT_REACTIONS: installations ask its scopes too

    def app_options(self, client: AsyncWebClient) -> dict[str, Any]:
        """The AsyncApp arguments of the OAuth flow; `client`: Slack's host in use (its
        `oauth.v2.access` and `auth.test` go there), carrying no token of its own."""
        settings = AsyncOAuthSettings(
            client_id=self.client_id,
            client_secret=self.client_secret,
            scopes=install_scopes(reactions=self.reactions),
            redirect_uri=self.redirect_uri,
            authorization_url=self.authorize_url,
            installation_store=self.installations,
            installation_store_bot_only=True,
            state_store=self.states,
            token_rotation_expiration_minutes=self.rotate_minutes,
        )
        authorize = AsyncInstallationStoreAuthorize(
            installation_store=self.installations,
            client_id=self.client_id,
            client_secret=self.client_secret,
            logger=log,
            bot_only=True,
            cache_enabled=True,  # one auth.test per token and process, not one per request
            token_rotation_expiration_minutes=self.rotate_minutes,
            client=client,
        )
        return {
            "oauth_settings": settings,
            "installation_store": self.installations,
            "installation_store_bot_only": True,
            "authorize": authorize,
        }


class Forgetting:
    """What an uninstall needs: the installation store, the tokens in memory, and the
    service's `forget_workspace` (the workspace's runs and people)."""

    def __init__(
        self, distribution: Distribution, forget_data: Callable[[str], Awaitable[int]]
    ) -> None:
        self.distribution = distribution
        self.forget_data = forget_data

    async def forget(self, enterprise_id: str | None, team_id: str | None) -> None:
        if not team_id:  # an org-wide (Grid) installation removed: its installation goes
            if enterprise_id:
                await self.distribution.installations.async_delete_all(
                    enterprise_id=enterprise_id, team_id=None
                )
                log.info(
                    "the app was uninstalled from Grid org %s: its installation is deleted "
                    "(its workspaces' runs age out with their retention)", enterprise_id,
                )  # fmt: skip
            return
        await self.distribution.installations.async_delete_all(
            enterprise_id=enterprise_id, team_id=team_id
        )
        self.distribution.tokens.forget(team_id)
        await self.forget_data(team_id)
        log.info("the app was uninstalled from workspace %s: its data is deleted", team_id)


def register(app: AsyncApp, forgetting: Forgetting, spawn: Spawn) -> None:
    """Listen to `app_uninstalled` and `tokens_revoked` (the bot's token); answered at once,
    the deleting done in a tracked task (it reads the whole keyspace)."""

    def forget(context: AsyncBoltContext) -> None:
        team, enterprise = context.team_id, context.enterprise_id

        async def work() -> None:
            try:
                await forgetting.forget(enterprise, team)
            except Exception:
                log_failure(log, "could not delete the data of workspace %s", team)

        spawn(work(), "forget a workspace")

    async def on_uninstalled(context: AsyncBoltContext) -> None:
        forget(context)

    async def on_tokens_revoked(event: dict[str, Any], context: AsyncBoltContext) -> None:
        if (event.get("tokens") or {}).get("bot"):  # user tokens only: the bot keeps none
            forget(context)

    app.event("app_uninstalled")(on_uninstalled)
    app.event("tokens_revoked")(on_tokens_revoked)
