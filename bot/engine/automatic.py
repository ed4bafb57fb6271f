"""The port through which a run asks, inside itself, whether its gated calls are decided
without a person (a policy rule's automatic decision, a channel grant).

Asking before anything is saved lets a call the policy decides by itself go on in the same run:
no snapshot, no job, no card. The engine knows only the answer; who decides, and what is
recorded, is the service's (`bot.service.decisions.automatic`). It is asked in two places:

- At the SDK's approval check of a function tool (its `needs_approval`, which the registry wraps
  with `at_check`, openai-agents 0.24): an approved call is then a call that needs no approval,
  and runs at once, with the turn's other calls; the SDK's interruption
  and resume (about 2 to 4 ms of CPU per call, `docs/benchmarks.md`) are not paid. The check
  cannot reject with a message, so a rejection (and "a person decides") is kept here, by call
  id, and applied where the SDK hands back its interruptions: the call is judged once.
- Where the SDK hands back its interruptions, for every other call: shell and patch calls, MCP
  and hosted MCP calls, a call whose agent the check does not know (it is not told; it is known
  for the run's own model calls, `AtCheck.spoke`), an agent used as a tool and the calls of its
  nested run, arguments the tool's own model changes. Each is described as its card would show
  it (the same call the policy would judge at a pause); an approval or a rejection with its
  message goes to the model the same way as a person's (`RunState.approve` / `reject`).

A turn whose calls are partly decided this way pauses only for the others (#32): the decided
ones are approved or rejected in the state it saves.
"""

from __future__ import annotations

import json
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from agents import FunctionTool

from bot.engine.approvals import PendingApproval, pretty_json
from bot.engine.arguments import receive


@dataclass(frozen=True)
class Automatic:
    """A call decided without a person: approved, or rejected with `message` for the model."""

    approve: bool
    message: str | None = None


class AutomaticDecisions(Protocol):
    """Decides the calls a run stopped on that no person is needed for."""

    async def decide(self, approvals: list[PendingApproval]) -> list[Automatic | None]:
        """One answer per call, in order: its decision, recorded as decided; or None, a person
        decides it (nothing is recorded for it, and the run pauses on it)."""


class AtCheck:
    """A run's automatic decisions at the SDK's approval check (`at_check`), and what the check
    could not apply (a rejection, a call for a person), kept until the run's interruptions are
    handed back (`taken`)."""

    def __init__(self, automatic: AutomaticDecisions) -> None:
        self.automatic = automatic
        self._kept: dict[str, Automatic | None] = {}
        # The agent of the run's latest model call, with the run's context wrapper: the calls
        # checked under that wrapper are that response's (the SDK checks a response's calls
        # before the next model call). A nested run (an agent used as a tool) has a wrapper of
        # its own and is not seen here: its calls are decided at their interruptions.
        self._speaker: tuple[Any, Any] | None = None

    def spoke(self, context: Any, agent: Any) -> None:
        """The run's next model call is `agent`'s, under `context` (`RunHooks.on_llm_start`)."""
        self._speaker = (context, agent)

    async def stops(self, context: Any, tool: FunctionTool, params: Any, call_id: str) -> bool:
        """Whether the SDK must stop at this call (not approved here); asked again for a call
        it stops at (a resume of the turn), the first answer stands: judged once."""
        if call_id in self._kept:
            return True
        speaker = self._speaker
        if speaker is None or speaker[0] is not context or not isinstance(params, dict):
            return True  # not known to be this run's agent's call: decided at its interruption
        agent = speaker[1]
        if not any(t is tool for t in getattr(agent, "tools", ())):
            return True
        name, who = tool.name, str(agent.name)
        arguments = json.dumps(params, ensure_ascii=False)
        approval = PendingApproval(
            0, call_id, who, name, "function", f"{who}::{name}", pretty_json(arguments),
            reading=receive(tool, arguments),
        )  # fmt: skip
        [decision] = await self.automatic.decide([approval])
        if decision is not None and decision.approve:
            return False
        self._kept[call_id] = decision
        return True

    def taken(self) -> dict[str, Automatic | None]:
        """The answers kept for the calls the SDK stopped at since the last time (by call id)."""
        kept, self._kept = self._kept, {}
        return kept


DECIDING: ContextVar[AtCheck | None] = ContextVar("approval_bot_deciding", default=None)


def decidable_at_check(tool: FunctionTool) -> bool:
    """A tool whose calls the check can describe as their card would: no namespace (its name is
    the call's), not deferred, not an agent used as a tool (run through the interruptions)."""
    return (
        getattr(tool, "_tool_namespace", None) is None
        and not getattr(tool, "defer_loading", False)
        and not getattr(tool, "_is_agent_tool", False)
    )


async def at_check(context: Any, tool: FunctionTool, params: Any, call_id: str) -> bool:
    """The run's answer at a gated call's approval check: whether the SDK still stops at it.
    `context`: the run context wrapper the SDK checks the call under."""
    deciding = DECIDING.get()
    if deciding is None or not call_id or not decidable_at_check(tool):
        return True
    return await deciding.stops(context, tool, params, call_id)
