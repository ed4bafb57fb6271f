"""The port through which a run asks, inside itself, whether the calls it stopped on are
decided without a person (a policy rule's automatic decision, a channel grant).

The SDK stops a run at each call that needs approval. Asking here, before anything is saved,
lets a call the policy decides by itself go on in the same run: no snapshot, no job, no card.
The engine knows only the answer; who decides, and what is recorded, is the service's
(`bot.service.automatic`).

It is asked where the SDK hands back its interruptions rather than in the SDK's per-tool hooks
(`needs_approval`, `on_approval`, `on_approval_request`): those see a call without the agent
that made it (a function tool's `needs_approval`), or must always decide (a hosted MCP tool's
`on_approval_request`: no way to leave it to a person), while every kind of call reaches the
interruptions described as a card would show it, and a rejection's message goes to the model
the same way as a person's (`RunState.reject`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bot.engine.approvals import PendingApproval


@dataclass(frozen=True)
class Automatic:
    """A call decided without a person: approved, or rejected with `message` for the model."""

    approve: bool
    message: str | None = None


class AutomaticDecisions(Protocol):
    """Decides the calls a run stopped on, when no person is needed for any of them."""

    async def decide(self, approvals: list[PendingApproval]) -> list[Automatic] | None:
        """One decision per call, in order, each recorded as decided; or None when a person
        must decide at least one (nothing is recorded, and the run pauses on all of them)."""
