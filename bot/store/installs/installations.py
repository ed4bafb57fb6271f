"""Where the bot is installed (OAuth distribution): each workspace's installation, in Redis,
its tokens encrypted at rest.

slack_sdk's `AsyncInstallationStore`, so Bolt's OAuth flow saves what `oauth.v2.access`
returned and its authorization finds a request's token, and the bot's own background work (the
projector, the App Home, the worker's private notes) finds a workspace's token the same way.
One key per workspace holds its bot (what the bot needs: the bot token, its refresh token and
expiry), one its latest installer; both are the JSON slack_sdk's own file store writes, sealed
with Fernet (AES-128-CBC + HMAC-SHA256) under the first of `APPROVAL_BOT_TOKEN_KEYS`; any of
the keys opens them, so a key is rotated by putting a new one first.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import redis.asyncio as redis
from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from slack_sdk.oauth.installation_store.async_installation_store import AsyncInstallationStore
from slack_sdk.oauth.installation_store.models.bot import Bot
from slack_sdk.oauth.installation_store.models.installation import Installation

from bot.errors import ApprovalBotError
from bot.store.keys import PREFIX

log = logging.getLogger(__name__)

INSTALLED = f"{PREFIX}:workspaces"  # hash: workspace -> when it was (last) installed


def workspace_of(enterprise_id: str | None, team_id: str | None, org_wide: bool = False) -> str:
    """`<enterprise or ->:<team or ->`: an org-wide (Enterprise Grid) installation has no team."""
    return f"{enterprise_id or '-'}:{'-' if org_wide else team_id or '-'}"


def bot_key(workspace: str) -> str:
    return f"{PREFIX}:ws:{{{workspace}}}:bot"


def installer_key(workspace: str) -> str:
    return f"{PREFIX}:ws:{{{workspace}}}:installer"


class TokenKeyError(ApprovalBotError):
    """`APPROVAL_BOT_TOKEN_KEYS` is missing or holds something that is not a Fernet key."""


class TokenCipher:
    """Seals and opens what the installation store keeps (see the module docstring)."""

    def __init__(self, keys: list[str]) -> None:
        if not keys:
            raise TokenKeyError(
                "APPROVAL_BOT_TOKEN_KEYS is not set: OAuth distribution keeps every workspace's "
                "token in Redis, encrypted with it. Make one with `approval-bot token-key`."
            )
        try:
            self._fernet = MultiFernet([Fernet(key.strip().encode()) for key in keys])
        except ValueError:
            raise TokenKeyError(
                "APPROVAL_BOT_TOKEN_KEYS holds something that is not a key (each is 32 "
                "url-safe base64-encoded bytes; make one with `approval-bot token-key`)."
            ) from None

    @staticmethod
    def new_key() -> str:
        return Fernet.generate_key().decode()

    def seal(self, data: dict[str, Any]) -> bytes:
        return self._fernet.encrypt(json.dumps(data).encode())

    def open(self, sealed: bytes | str) -> dict[str, Any] | None:
        """The data, or None (logged) when no key opens it: the keys changed without the old
        one kept, so that workspace must install the app again."""
        try:
            data: dict[str, Any] = json.loads(self._fernet.decrypt(sealed))
        except InvalidToken:
            log.error(
                "an installation in Redis cannot be decrypted with APPROVAL_BOT_TOKEN_KEYS "
                "(keep the old key after a new one when rotating); that workspace must "
                "reinstall the app"
            )
            return None
        return data


class RedisInstallationStore(AsyncInstallationStore):  # type: ignore[misc]
    """slack_sdk's installation store over Redis, bot installations only (the bot asks for no
    user scopes): what Bolt's OAuth flow and its authorization use."""

    def __init__(self, client: redis.Redis, cipher: TokenCipher) -> None:
        self.redis = client
        self.cipher = cipher
        self._logger = log

    @property
    def logger(self) -> logging.Logger:
        return self._logger

    async def async_save(self, installation: Installation) -> None:
        workspace = workspace_of(
            installation.enterprise_id, installation.team_id, installation.is_enterprise_install
        )
        await self.redis.set(installer_key(workspace), self.cipher.seal(vars(installation)))
        await self.async_save_bot(installation.to_bot())

    async def async_save_bot(self, bot: Bot) -> None:
        if bot.bot_token is None:
            return
        workspace = workspace_of(bot.enterprise_id, bot.team_id, bot.is_enterprise_install)
        await self.redis.set(bot_key(workspace), self.cipher.seal(vars(bot)))
        await self.redis.hset(INSTALLED, workspace, f"{time.time():.3f}")

    async def async_find_bot(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        is_enterprise_install: bool | None = False,
    ) -> Bot | None:
        workspace = workspace_of(enterprise_id, team_id, bool(is_enterprise_install))
        sealed = await self.redis.get(bot_key(workspace))
        data = self.cipher.open(sealed) if sealed is not None else None
        return Bot(**data) if data is not None else None

    async def async_find_installation(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None = None,
        is_enterprise_install: bool | None = False,
    ) -> Installation | None:
        workspace = workspace_of(enterprise_id, team_id, bool(is_enterprise_install))
        sealed = await self.redis.get(installer_key(workspace))
        data = self.cipher.open(sealed) if sealed is not None else None
        if data is None or (user_id is not None and data.get("user_id") != user_id):
            return None
        installation = Installation(**data)
        bot = await self.async_find_bot(
            enterprise_id=enterprise_id,
            team_id=team_id,
            is_enterprise_install=is_enterprise_install,
        )
        if bot is not None:  # the latest bot token (rotated since the installation)
            installation.bot_token = bot.bot_token
            installation.bot_refresh_token = bot.bot_refresh_token
            installation.bot_token_expires_at = bot.bot_token_expires_at
        return installation

    async def async_delete_bot(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        for org_wide in (False, True):
            workspace = workspace_of(enterprise_id, team_id, org_wide)
            await self.redis.delete(bot_key(workspace))
            await self.redis.hdel(INSTALLED, workspace)

    async def async_delete_installation(
        self, *, enterprise_id: str | None, team_id: str | None, user_id: str | None = None
    ) -> None:
        for org_wide in (False, True):
            await self.redis.delete(installer_key(workspace_of(enterprise_id, team_id, org_wide)))

    async def installed(self) -> list[str]:
        """Every workspace with a bot installation (`<enterprise>:<team>`)."""
        found: Any = await self.redis.hkeys(INSTALLED)
        return sorted(k.decode() if isinstance(k, bytes) else str(k) for k in found)
