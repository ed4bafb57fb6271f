"""Which process sends a week's review digest (bot/service/oversight/review_digest.py): the first to
claim it. `ab:review-digest:<week's end>` (a string, eight days) holds the claimant's owner
token; SET NX makes the claim atomic, so the digest is sent once however many processes find
it due (on a cluster, the one key is in one slot)."""

from __future__ import annotations

import redis.asyncio as redis

from bot.store.keys import PREFIX

KEEP_SECONDS = 8 * 86400  # past the next week's claim


def digest_key(week_end: float) -> str:
    return f"{PREFIX}:review-digest:{int(week_end)}"


class DigestClaims:
    """Claims of weekly digests."""

    def __init__(self, client: redis.Redis) -> None:
        self.redis = client

    async def claim(self, week_end: float, owner: str) -> bool:
        """Whether `owner` is the first to claim the digest of the week ending at `week_end`."""
        return bool(await self.redis.set(digest_key(week_end), owner, nx=True, ex=KEEP_SECONDS))
