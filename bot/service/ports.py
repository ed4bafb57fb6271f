"""What the application services need from the chat surface, as an interface.

The Slack adapter implements `Notifier` (private answers); the services call it without knowing
Slack exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bot.errors import ApprovalBotError


@dataclass(frozen=True)
class Actor:
    """A person, as identified by the signed request that carried their action."""

    team_id: str
    user_id: str
    enterprise_id: str = ""


class GroupLookupError(ApprovalBotError):
    """A user group could not be resolved (unknown handle, API error); the message says which."""


class GroupDirectory(Protocol):
    """Resolves user groups (`S...` ids or `@handles`) to member user ids.

    It is asked on every click that names a group, so it answers from what it knows when it
    can, and otherwise within a bounded time: a decision never waits long on the chat
    surface, and a lookup storm never becomes a storm of calls to it."""

    async def members(self, team_id: str, ref: str) -> frozenset[str]:
        """The group's members; raises GroupLookupError when it cannot say (in time)."""


class ChannelDirectory(Protocol):
    """Who is in a channel: what `approvers: ["*"]` means ("anyone in this channel").

    Asked by every surface that lets a person decide, cancel or see a run ("*" is checked the
    same way on the card, the App Home, `/agent list`, status and cancel), so it answers from
    what it knows when it can and otherwise within a bounded time."""

    async def members(self, team_id: str, channel: str) -> frozenset[str]:
        """The channel's members; raises GroupLookupError when it cannot say (in time)."""


class Notifier(Protocol):
    """Answers the person who acted, privately. Everything else people see in Slack is derived
    from what the store holds (the outbox and the projector in `bot.slack`), not told."""

    async def tell(
        self, channel: str, user: str, text: str, thread_ts: str = "", *, team: str = ""
    ) -> None:
        """Say something only `user` can see; `team`: their workspace, when not the one of
        the request being answered (a worker's note)."""
