"""The port through which a run asks, inside itself, whether the calls it stopped on are
decided without a person (a policy rule's automatic decision, a channel grant).

The SDK stops a run at each call that needs approval. Asking here, before anything is saved,
lets a call the policy decides by itself go on in the same run: no snapshot, no job, no card.
The engine knows only the answer; who decides, and what is recorded, is the service's
(`bot.service.automatic`).

It is asked where the SDK hands back its interruptions, not in the SDK's per-tool hooks
(openai-agents 0.24): a function tool's `needs_approval(ctx, params, call_id)` is not told which
agent made the call (a tool object may be shared), nor can it reject with a message (only say
whether approval is needed), and when a paused turn resumes the SDK asks it again for the
turn's other calls, so a decision recorded there would be recorded twice; a hosted MCP tool's
`on_approval_request` must answer approve or reject, never "a person decides". Every kind of
call reaches the interruptions whole, described as its card would show it (the same call the
policy would judge at a pause), and an approval or a rejection with its message goes to the
model the same way as a person's (`RunState.approve` / `reject`). The price is the SDK's: the
run stops at the call and goes on from its state in memory (about 2 ms of CPU per call here,
`docs/benchmarks.md`).
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
