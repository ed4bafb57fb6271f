"""The context every run receives: who asked, where, and which run this is.

It is serialized into the run's snapshot, so it holds identifiers only, never a token or secret.
Tools and `needs_approval` callables read it as `ctx.context`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict


class RunContext(BaseModel):
    """Identifiers of the Slack requester and the run, safe to store and to show a model."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    run_id: str
    team_id: str
    user_id: str
    channel_id: str
    thread_ts: str = ""
    enterprise_id: str = ""


def serialize_context(value: Any) -> dict[str, Any]:
    if not isinstance(value, RunContext):
        raise TypeError(f"expected RunContext, got {type(value).__name__}")
    return value.model_dump(mode="json")


def deserialize_context(data: Mapping[str, Any]) -> RunContext:
    return RunContext.model_validate(data)
