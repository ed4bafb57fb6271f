"""A run's conversation as a reviewer reads it: one type for the engine (which reads it from a
snapshot, `bot.engine.transcript`) and the layers that show it, so that none of them touches the
SDK's state. Untrusted, bounded text; it knows neither the SDK, Redis nor Slack."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

TurnKind = Literal["user", "assistant", "reasoning", "call", "result", "handoff"]


@dataclass(frozen=True)
class Turn:
    """One step of the conversation."""

    kind: TurnKind
    """Who spoke: the user, the assistant (its text, its reasoning summary), a tool call, its
    result, a handoff."""
    text: str
    """What was said or run (cut to TURN_LIMIT with "…")."""
    agent: str = ""
    """The agent it belongs to (empty for the user)."""
    call_id: str = ""
    """The tool call it is, or answers."""
    tool: str = ""
    """The tool called."""


@dataclass(frozen=True)
class Transcript:
    """The run's conversation up to one call."""

    task: str
    """The run's first input (the task as the agent received it), cut to TURN_LIMIT."""
    turns: list[Turn]
    """Newest last; at most TURNS_MAX."""
    dropped: int
    """Older turns left out."""
