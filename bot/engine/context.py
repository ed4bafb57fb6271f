"""The context every run receives: who asked, where, and which run this is.

`user_id` is who asked for the turn the tools run in (a follow-up's author in a later turn of a
run's conversation, else the starter); `starter_id` is who started the run.

It is serialized into the run's snapshot, so it holds identifiers only, never a token or secret.
Tools and `needs_approval` callables read it as `ctx.context`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator


class RunContext(BaseModel):
    """Identifiers of the Slack requester and the run, safe to store and to show a model."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    run_id: str
    team_id: str
    user_id: str
    """Who asked for this turn: the requester (the starter in the run's first turn)."""
    channel_id: str
    thread_ts: str = ""
    enterprise_id: str = ""
    starter_id: str = ""
    """Who started the run (its first turn's requester)."""

    @model_validator(mode="before")
    @classmethod
    def _starter(cls, data: Any) -> Any:
        """A context stored before `starter_id` existed was its starter's (`user_id`)."""
        if isinstance(data, Mapping) and not data.get("starter_id") and "user_id" in data:
            return {**data, "starter_id": data["user_id"]}
        return data


def serialize_context(value: Any) -> dict[str, Any]:
    if not isinstance(value, RunContext):
        raise TypeError(f"expected RunContext, got {type(value).__name__}")
    return value.model_dump(mode="json")


def deserialize_context(data: Mapping[str, Any]) -> RunContext:
    return RunContext.model_validate(data)
