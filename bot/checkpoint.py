"""A paused run's stored state: one type for the engine (which writes and reads it) and the
store (which keeps it), so neither copies it into a shape of its own. It knows neither the SDK
nor Redis."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Checkpoint:
    """What must be stored to resume a paused run, and the versions it was written with."""

    state: bytes
    """The engine's compressed RunState JSON (`bot.engine.runner.pack_state`)."""
    sdk_version: str
    """The agents SDK version that wrote `state` (a resume under another version checks it)."""
    fingerprint: str
    """What the run's agents and tools were when it paused (`bot.engine.runner.NEEDS` + JSON;
    older checkpoints: a digest of every definition)."""
