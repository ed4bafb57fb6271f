"""The port through which a run asks, inside itself, whether its gated calls are decided
without a person (a policy rule's automatic decision, a channel grant, an earlier Always, an
edit's one-shot approval).

Asking before anything is saved lets a call the policy decides by itself go on in the same run:
no snapshot, no job, no card. The engine knows only the answer; who decides, and what is
recorded, is the service's (`bot.service.decisions.automatic`). It is asked at the SDK's own
approval hooks (openai-agents 0.24), each call once:

- A function tool: its `needs_approval` (which the registry wraps with `at_check`). Approved,
  the call needs no approval and runs at once, with the turn's other calls; rejected, the
  rejection is recorded in the run's context there (`RunContextWrapper.reject_tool`, with the
  message a person's rejection gives), which the SDK reads right after the check: the model is
  told as if a person had rejected it. The SDK's interruption and resume (about 2 to 4 ms of CPU
  per call, `docs/benchmarks.md`) are not paid.
- A shell or patch tool: its `on_approval` (wrapped by the registry with `on_approval`), which
  answers `{"approve": ...}` or, for a person, nothing (the SDK then stops at the call).
- A hosted MCP approval request: as the model's response arrives (`RunHooks.on_llm_end`,
  `answered`), recorded in the run's context like a person's decision; its own hook,
  `on_approval_request`, must answer every request (the SDK calls it for all of a tool's
  requests and cannot stop at one), so it cannot leave a call to a person.
- Where the SDK hands back its interruptions, for every other call: MCP server calls, a
  function call whose agent the check does not know (it is not told; it is known for the run's
  own model calls, `AtCheck.spoke`), an agent used as a tool and the calls of its nested run,
  arguments the tool's own model changes. Each is described as its card would show it (the
  same call the policy would judge at a pause); an approval or a rejection with its message
  goes to the model the same way as a person's (`RunState.approve` / `reject`).

A turn whose calls are partly decided this way pauses only for the others (#32): the decided
ones are approved or rejected in the state it saves.
"""

from __future__ import annotations

import json
import logging
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from agents import FunctionTool, HostedMCPTool, ToolApprovalItem

from bot.engine.approvals import PendingApproval, describe, pretty_json
from bot.engine.arguments import receive

log = logging.getLogger(__name__)


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
    """A run's automatic decisions at the SDK's approval hooks (`at_check`, `on_approval`,
    `answered`), and what a hook could not apply (a call for a person; a rejection the run's
    context would not take), kept until the run's interruptions are handed back (`taken`)."""

    def __init__(self, automatic: AutomaticDecisions) -> None:
        self.automatic = automatic
        self._kept: dict[str, Automatic | None] = {}
        # The agent of the run's latest model call, with the run's context wrapper: the calls
        # checked under that wrapper are that response's (the SDK checks a response's calls
        # before the next model call). A nested run (an agent used as a tool) has a wrapper of
        # its own and is not seen here: its calls are decided at their interruptions.
        self._speaker: tuple[Any, Any] | None = None
        # That response's function calls, by call id: a rejection names the call as made.
        self._calls: dict[str, Any] = {}

    def spoke(self, context: Any, agent: Any) -> None:
        """The run's next model call is `agent`'s, under `context` (`RunHooks.on_llm_start`)."""
        self._speaker = (context, agent)
        self._calls = {}

    async def answered(self, context: Any, agent: Any, response: Any) -> None:
        """The model's `response` to `agent` arrived (`RunHooks.on_llm_end`): its function
        calls are noted, and its hosted MCP approval requests decided (see the module)."""
        speaker = self._speaker
        if speaker is None or speaker[0] is not context:
            return
        requests = []
        for item in getattr(response, "output", None) or ():
            kind = getattr(item, "type", None)
            if kind == "function_call":
                self._calls[str(getattr(item, "call_id", ""))] = item
            elif kind == "mcp_approval_request" and _hosted_without_callback(agent, item):
                requests.append(item)
        if not requests:
            return
        items = [
            ToolApprovalItem(agent=agent, raw_item=r, tool_name=str(getattr(r, "name", "")))
            for r in requests
        ]
        decided = await self.automatic.decide([describe(item, 0) for item in items])
        for item, decision in zip(items, decided, strict=True):
            call_id = str(item.call_id or "")
            if decision is None or not self._record(context, item, decision):
                self._kept[call_id] = decision

    async def stops(self, context: Any, tool: FunctionTool, params: Any, call_id: str) -> bool:
        """Whether the SDK must stop at this call (not approved here); asked again for a call
        it stops at (a resume of the turn), the first answer stands: judged once. A rejection
        is recorded in `context`, which the SDK reads after the check (then it does not stop)."""
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
        raw = self._calls.get(call_id)
        if decision is not None and raw is not None:
            item = ToolApprovalItem(agent=agent, raw_item=raw, tool_name=name)
            if self._record(context, item, decision):
                return True
        self._kept[call_id] = decision
        return True

    async def on_approval(self, item: ToolApprovalItem) -> dict[str, Any] | None:
        """A shell or patch call's answer at its `on_approval`: approved, rejected with the
        message a person's rejection gives, or None (the SDK stops at it, for a person)."""
        call_id = str(item.call_id or "")
        if not call_id or call_id in self._kept:
            return None
        [decision] = await self.automatic.decide([describe(item, 0)])
        if decision is None:
            self._kept[call_id] = None
            return None
        if decision.approve:
            return {"approve": True}
        return {"approve": False, "reason": decision.message or ""}

    @staticmethod
    def _record(context: Any, item: ToolApprovalItem, decision: Automatic) -> bool:
        """`decision` recorded in the run's context as a person's would be (`RunState.approve`
        and `reject` do the same); False if the context would not take it."""
        try:
            if decision.approve:
                context.approve_tool(item)
            else:
                context.reject_tool(item, rejection_message=decision.message or None)
        except Exception:
            log.warning("a decision could not be recorded in the run; it goes to the pause",
                        exc_info=True)  # fmt: skip
            return False
        return True

    def taken(self) -> dict[str, Automatic | None]:
        """The answers kept for the calls the SDK stopped at since the last time (by call id)."""
        kept, self._kept = self._kept, {}
        return kept


def _hosted_without_callback(agent: Any, request: Any) -> bool:
    """Whether `request` is for a hosted MCP tool of `agent` with no `on_approval_request` of
    its own (which the SDK calls instead of stopping)."""
    label = getattr(request, "server_label", None)
    for tool in getattr(agent, "tools", None) or ():
        if isinstance(tool, HostedMCPTool) and tool.tool_config.get("server_label") == label:
            return tool.on_approval_request is None
    return False


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


async def on_approval(context: Any, item: ToolApprovalItem) -> dict[str, Any] | None:
    """The run's answer at a shell or patch call's `on_approval` (see `AtCheck.on_approval`);
    None outside a run that decides (the SDK stops at the call)."""
    deciding = DECIDING.get()
    if deciding is None:
        return None
    return await deciding.on_approval(item)
