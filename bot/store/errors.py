"""Transitions the store refused: the run is not in the state, or not in the hands, the
caller believed."""

from __future__ import annotations

from bot.errors import ApprovalBotError


class StoreError(ApprovalBotError):
    """A transition was refused because the run is not in the state the caller believed."""


class NotOwner(StoreError):
    """The caller's execution no longer owns the run (another attempt took it, it paused, or
    it was cancelled): the transition wrote nothing. Distinct from a run already ended or
    gone, which the transitions answer with a result."""

    def __init__(self, run_id: str, transition: str) -> None:
        super().__init__(f"run {run_id}: {transition} refused, not its owner")
        self.run_id = run_id
        self.transition = transition
