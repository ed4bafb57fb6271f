"""Tracing of agent runs by the Agents SDK, on purpose only.

Left alone, the SDK traces every run and exports it to OpenAI with whatever OPENAI_API_KEY is in
use (even when the models are served elsewhere), tool arguments and outputs included, and makes
the process wait for its exporter at exit. Here it is off unless configured; when on, the start
and every resume of one run share a trace group (the run id), and whether model and tool data go
into traces follows APPROVAL_BOT_TRACE_SENSITIVE_DATA or, unset, the SDK's own setting
(OPENAI_AGENTS_TRACE_INCLUDE_SENSITIVE_DATA, which defaults to true).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents import set_tracing_disabled
from agents.tracing import TracingConfig


@dataclass(frozen=True)
class Tracing:
    """How runs are traced. `api_key`: the key the SDK's exporter sends traces with (instead of
    OPENAI_API_KEY); it is handed to the SDK per run and never stored with a run's state."""

    enabled: bool = False
    include_sensitive_data: bool | None = None  # None: the SDK's setting
    api_key: str | None = None

    def apply(self) -> None:
        """Process-wide: with tracing off no trace is created, so nothing is queued for export
        and the exit does not wait for the exporter."""
        set_tracing_disabled(not self.enabled)

    def run_config_fields(self, run_id: str, agent_name: str) -> dict[str, Any]:
        """The RunConfig fields for one start or resume of run `run_id`."""
        if not self.enabled:
            return {"tracing_disabled": True}
        fields: dict[str, Any] = {
            "tracing_disabled": False,
            "workflow_name": f"approval-bot {agent_name}",
            "group_id": run_id,
            "trace_metadata": {"run_id": run_id, "agent": agent_name},
        }
        if self.include_sensitive_data is not None:
            fields["trace_include_sensitive_data"] = self.include_sensitive_data
        if self.api_key:
            fields["tracing"] = TracingConfig(api_key=self.api_key)
        return fields
