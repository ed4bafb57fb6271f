"""The OAuth flow's `state` values, in Redis: issued by `/slack/install` on one replica,
consumed (once, atomically: GETDEL) by `/slack/oauth_redirect` on any replica."""

from __future__ import annotations

import logging
import secrets

import redis.asyncio as redis
from slack_sdk.oauth.state_store.async_state_store import AsyncOAuthStateStore

from bot.store.keys import PREFIX

log = logging.getLogger(__name__)


def state_key(state: str) -> str:
    return f"{PREFIX}:oauth:state:{state}"


class RedisStateStore(AsyncOAuthStateStore):  # type: ignore[misc]
    """Each state is good for one redirect within `expiration_seconds`."""

    def __init__(self, client: redis.Redis, *, expiration_seconds: int = 600) -> None:
        self.redis = client
        self.expiration_seconds = expiration_seconds

    @property
    def logger(self) -> logging.Logger:
        return log

    async def async_issue(self, *args: object, **kwargs: object) -> str:
        state = secrets.token_urlsafe(24)
        await self.redis.set(state_key(state), "1", ex=self.expiration_seconds)
        return state

    async def async_consume(self, state: str) -> bool:
        if not state or len(state) > 100:
            return False
        return await self.redis.getdel(state_key(state)) is not None
