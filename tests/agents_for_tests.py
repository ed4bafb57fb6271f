"""Agents for the tests: scripted models (no network) and tools that record what they did."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from agents import Agent, RunContextWrapper, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

POLICY = """
defaults:
  allow_self_approval: false
channels:
  C1:
    starters: ["*"]
    approvers: [U2, U3]
"""

# What `deploy` deployed, in order (a module's tests clear it before each test).
DEPLOYED: list[str] = []


@function_tool(needs_approval=True)
def deploy(target: str, replicas: int = 1) -> str:
    """Deploy a target."""
    DEPLOYED.append(target)
    return f"deployed {target} x{replicas}"


@dataclass
class Ledger:
    """What the tools really did, in order."""

    executed: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    contexts: list[Any] = field(default_factory=list)

    def names(self) -> list[str]:
        return [name for name, _ in self.executed]


def slow_check(ledger: Ledger, started: asyncio.Event, release: asyncio.Event) -> Any:
    """An ungated tool that sets `started`, then waits for `release` (a run kept busy)."""

    @function_tool
    async def slow_check(host: str) -> str:
        """Check a host slowly (no approval needed)."""
        started.set()
        await release.wait()
        ledger.executed.append(("slow_check", {"host": host}))
        return f"{host} is fine"

    return slow_check


def delete_then_say(path: str | list[str] = "/a", said: str = "ok") -> list[Any]:
    """`ops_agent`'s steps for the commonest run: it asks to delete `path` (call c1; a list of
    paths: each at once, calls c1, c2, ...), then, its tools' results in hand, says `said`."""
    paths = [path] if isinstance(path, str) else path
    calls = [
        function_call("delete_logs", {"path": p}, call_id=f"c{i}") for i, p in enumerate(paths, 1)
    ]
    return [calls, [assistant_message(said)]]


def ops_agent(
    steps: list[Any], ledger: Ledger, *, name: str = "ops", extra_tools: list[Any] | None = None
) -> tuple[Agent[Any], ScriptedModel]:
    """An agent with a gated `delete_logs`, a gated `restart_service` and an ungated `read_logs`."""

    @function_tool(needs_approval=True)
    def delete_logs(ctx: RunContextWrapper[Any], path: str) -> str:
        """Delete log files under a path."""
        ledger.executed.append(("delete_logs", {"path": path}))
        ledger.contexts.append(ctx.context)
        return f"deleted {path}"

    @function_tool(needs_approval=True)
    def restart_service(service: str) -> str:
        """Restart a service."""
        ledger.executed.append(("restart_service", {"service": service}))
        return f"restarted {service}"

    @function_tool
    def read_logs(path: str) -> str:
        """Read logs (no approval needed)."""
        ledger.executed.append(("read_logs", {"path": path}))
        return f"logs of {path}"

    model = ScriptedModel(steps)
    agent = Agent(
        name=name,
        instructions="You operate servers.",
        model=model,
        tools=[delete_logs, restart_service, read_logs, *(extra_tools or [])],
    )
    return agent, model


__all__ = ["POLICY", "Ledger", "assistant_message", "function_call", "ops_agent", "tool_outputs"]


def tool_outputs(model: ScriptedModel) -> dict[str, str]:
    """call_id -> the tool output text the model received in its latest call."""
    last = model.last_call
    assert last is not None, "the model was never called"
    items = last.input if isinstance(last.input, list) else []
    found: dict[str, str] = {}
    for item in items:
        data = item if isinstance(item, dict) else item.model_dump()
        if data.get("type") == "function_call_output":
            found[str(data["call_id"])] = str(data["output"])
    return found
