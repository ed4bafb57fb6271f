"""What the application services need from the chat surface, as an interface.

The Slack adapter implements `Notifier`; the services call it without knowing Slack exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bot.store.records import CallRecord, RunRecord


@dataclass(frozen=True)
class Actor:
    """A person, as identified by the signed request that carried their action."""

    team_id: str
    user_id: str
    enterprise_id: str = ""


class GroupLookupError(Exception):
    """A user group could not be resolved (unknown handle, API error); the message says which."""


class GroupDirectory(Protocol):
    """Resolves user groups (`S...` ids or `@handles`) to member user ids."""

    async def members(self, team_id: str, ref: str) -> frozenset[str]:
        """The group's members; raises GroupLookupError when it cannot say."""


class Notifier(Protocol):
    """Shows runs and approvals to people. Every method may raise; callers log and go on."""

    async def post_run(self, run: RunRecord) -> str:
        """Post the run's message; return its message ts (the run's thread)."""

    async def update_run(self, run: RunRecord) -> None:
        """Re-render the run's message from its record (status, waiting count)."""

    async def post_in_run_thread(self, run: RunRecord, text: str) -> None:
        """Post plain text (untrusted parts escaped by the notifier) in the run's thread."""

    async def post_run_output(self, run: RunRecord, output: str) -> None:
        """Post the run's final output in its thread."""

    async def post_approval(self, run: RunRecord, call: CallRecord) -> str:
        """Post an interactive approval message at the top level; return its ts."""

    async def update_approval(self, run: RunRecord, call: CallRecord) -> None:
        """Re-render an approval message from its record (decided: no buttons)."""

    async def post_review(self, run: RunRecord, review_id: str, text: str) -> str:
        """Ask, in the run's thread, for a person to settle a review (Mark done / Run again);
        return the message's ts."""

    async def tell(self, channel: str, user: str, text: str, thread_ts: str = "") -> None:
        """Say something only `user` can see."""
