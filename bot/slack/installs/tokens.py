"""Each installed workspace's bot token, for the bot's own calls (OAuth distribution): read
from the installation store, kept briefly in memory, and rotated before it expires.

Bolt finds (and rotates) the token of each request it handles; this is the same for the work
no request carries: the projector's posts, the App Home, the worker's notes. With token
rotation on (Slack's "Token Rotation" setting), a token lives 12 hours: it is refreshed with
`oauth.v2.access` (grant_type=refresh_token) `rotate_before` seconds ahead of its expiry, by
one replica at a time (a short Redis lock per workspace); the others keep using the token they
have, still good, and read the new one when their copy is `CACHE_SECONDS` old.
"""

from __future__ import annotations

import logging
import time

import redis.asyncio as redis
from slack_sdk.oauth.installation_store.models.bot import Bot
from slack_sdk.oauth.token_rotation.async_rotator import AsyncTokenRotator
from slack_sdk.web.async_client import AsyncWebClient

from bot.slack.api.metered import NotServing
from bot.slack.api.serving import Team
from bot.store.installs.installations import RedisInstallationStore, workspace_of
from bot.store.keys import PREFIX

log = logging.getLogger(__name__)

CACHE_SECONDS = 30.0


class NotInstalled(NotServing):
    """No installation holds a token for the workspace a call is for (uninstalled, never
    installed, or the call was made for no workspace at all)."""


class WorkspaceTokens:
    """`bot_token(team)`: the token a call for `team` carries (see the module docstring)."""

    def __init__(
        self,
        store: RedisInstallationStore,
        *,
        client_id: str,
        client_secret: str,
        client: AsyncWebClient,
        rotate_before: float = 7200.0,
    ) -> None:
        """`client`: for `oauth.v2.access` (Slack's host in use; it carries no token)."""
        self.store = store
        self.redis: redis.Redis = store.redis
        self.rotate_before = rotate_before
        self._rotator = AsyncTokenRotator(
            client_id=client_id, client_secret=client_secret, client=client
        )
        self._cache: dict[Team, tuple[float, Bot]] = {}

    async def bot_token(self, team: Team) -> str:
        bot = await self._bot(team)
        if self._expiring(bot):
            bot = await self._rotated(team, bot)
        assert bot.bot_token is not None
        return str(bot.bot_token)

    def _expiring(self, bot: Bot) -> bool:
        expires = bot.bot_token_expires_at
        return expires is not None and expires - time.time() < self.rotate_before

    def forget(self, team_id: str) -> None:
        """The workspace was uninstalled: its token is not used again from memory."""
        for team in [t for t in self._cache if t.team_id == team_id]:
            del self._cache[team]

    async def _bot(self, team: Team) -> Bot:
        cached = self._cache.get(team)
        if cached is not None and time.monotonic() - cached[0] < CACHE_SECONDS:
            return cached[1]
        enterprise = team.enterprise_id or None
        bot = None
        if not team.org_wide:
            bot = await self.store.async_find_bot(enterprise_id=enterprise, team_id=team.team_id)
        if bot is None and enterprise is not None:  # installed on the whole Grid org
            bot = await self.store.async_find_bot(
                enterprise_id=enterprise, team_id=None, is_enterprise_install=True
            )
        if bot is None or not bot.bot_token:
            self._cache.pop(team, None)
            raise NotInstalled(f"the app is not installed in workspace {team.team_id or '?'}")
        self._cache[team] = (time.monotonic(), bot)
        return bot

    async def _rotated(self, team: Team, bot: Bot) -> Bot:
        """A fresh token, or the current one when another replica is refreshing it (or Slack
        did not answer: it is still good for a while, and the next call tries again)."""
        lock = f"{PREFIX}:ws:{{{workspace_of(bot.enterprise_id, bot.team_id)}}}:rotating"
        if not await self.redis.set(lock, "1", nx=True, ex=30):
            return bot
        try:
            try:
                self._cache.pop(team, None)
                bot = await self._bot(team)  # refreshed already, by another replica or call?
                if not self._expiring(bot):
                    return bot
                fresh = await self._rotator.perform_bot_token_rotation(
                    bot=bot, minutes_before_expiration=max(1, int(self.rotate_before // 60))
                )
            except Exception as exc:
                log.warning("could not refresh the token of workspace %s (%s)", team.team_id, exc)
                return bot
            if fresh is None:
                return bot
            # Saved before the lock goes: a call that takes the lock next reads this token
            # (a save after it let a slower call refresh the old token a second time).
            await self.store.async_save_bot(fresh)
        finally:
            await self.redis.delete(lock)
        self._cache[team] = (time.monotonic(), fresh)
        log.info("refreshed the bot token of workspace %s", team.team_id)
        return fresh
