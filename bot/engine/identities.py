"""The SDK's agent identities without agent signatures where names tell the agents apart (#32).

openai-agents 0.24 names each agent reachable from a run's agent (through handoffs) for its
RunState: by its name, and, to order agents that share a name, by a JSON signature of its whole
definition (model, settings, hooks, every tool's schema). It builds that map four to six times
in a resume (restoring the state, the tool-use tracker, each streamed step), and computes every
agent's signature each time even when no two names are alike: some 0.7 ms of CPU per resume of
the minimal agent (12% of it; more with more agents and tools), the same at a run's start.

Where the names reachable from the agent are distinct, the SDK's own functions return, exactly:

- `_build_agent_identity_map`: `{agent.name: agent}` in the graph's order. It walks the same
  graph (`_iter_agent_graph`), groups the agents by name, sorts each group by its signature and
  keeps the first under the plain name; the rest get `name#2`, ... A group of one sorts to
  itself and has no rest, and the dict is filled in the graph's order of first names.
- `_get_ambiguous_agent_ids`: no ids. It returns the ids of groups of more than one agent by
  (name, root or not, signature); with distinct names every group has one.

So `install` replaces them, for the SDK version the bot pins, with functions that walk the graph
(as the SDK does) and answer at once when the names are distinct, and call the SDK's own
otherwise (agents that share a name). Nothing else of the SDK changes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import agents
import agents._run_state_agent_identity as identity
import agents.run_internal.tool_use_tracker as tool_use_tracker
import agents.run_state as run_state

log = logging.getLogger(__name__)

SDK = "0.24.0"  # the version whose functions are read above (pyproject pins it)
_INSTALLED = "_approval_bot_by_name"


def _distinct(initial_agent: Any) -> list[Any] | None:
    """The agents reachable from `initial_agent`, in the SDK's order, when their names are
    distinct; else None."""
    ordered = list(identity._iter_agent_graph(initial_agent))
    names = {agent.name for agent in ordered}
    return ordered if len(names) == len(ordered) else None


def _by_name(sdk: Callable[[Any], dict[str, Any]]) -> Callable[[Any], dict[str, Any]]:
    def build_agent_identity_map(initial_agent: Any) -> dict[str, Any]:
        ordered = _distinct(initial_agent)
        if ordered is None:
            return sdk(initial_agent)
        return {agent.name: agent for agent in ordered}

    setattr(build_agent_identity_map, _INSTALLED, sdk)
    return build_agent_identity_map


def _none_ambiguous(sdk: Callable[[Any], set[int]]) -> Callable[[Any], set[int]]:
    def get_ambiguous_agent_ids(initial_agent: Any) -> set[int]:
        if _distinct(initial_agent) is None:
            return sdk(initial_agent)
        return set()

    setattr(get_ambiguous_agent_ids, _INSTALLED, sdk)
    return get_ambiguous_agent_ids


def install() -> bool:
    """Replace the two functions where the SDK's modules call them (once; True when they are
    in place). Another SDK version keeps its own: what it computes may differ."""
    if getattr(agents, "__version__", "") != SDK:
        log.info("openai-agents %s: its agent identities are left as they are", agents.__version__)
        return False
    current = identity._build_agent_identity_map
    if getattr(current, _INSTALLED, None) is None:
        by_name = _by_name(current)
        none_ambiguous = _none_ambiguous(identity._get_ambiguous_agent_ids)
        for module in (identity, run_state, tool_use_tracker):
            module._build_agent_identity_map = by_name  # type: ignore[attr-defined]
        for module in (identity, run_state):
            module._get_ambiguous_agent_ids = none_ambiguous  # type: ignore[attr-defined]
    return True


def sdk_identity_map(initial_agent: Any) -> dict[str, Any]:
    """The SDK's own map, computed as it computes it (for checking the one installed)."""
    current = identity._build_agent_identity_map
    sdk: Callable[[Any], dict[str, Any]] = getattr(current, _INSTALLED, current)
    return sdk(initial_agent)


def sdk_ambiguous_ids(initial_agent: Any) -> set[int]:
    """The SDK's own ambiguous ids (for checking the one installed)."""
    current = identity._get_ambiguous_agent_ids
    sdk: Callable[[Any], set[int]] = getattr(current, _INSTALLED, current)
    return sdk(initial_agent)
