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
from types import ModuleType
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


def pinned(what: str) -> bool:
    """Whether the SDK is the version whose functions the bot's replacements read (`SDK`);
    another keeps its own (what it computes may differ), and the log says `what` is left."""
    if getattr(agents, "__version__", "") == SDK:
        return True
    log.info("openai-agents %s: its %s are left as they are", agents.__version__, what)
    return False


def replace(
    name: str, current: Any, wrap: Callable[[Any], Any], callers: tuple[ModuleType, ...],
    marker: str = _INSTALLED,
) -> None:  # fmt: skip
    """`wrap(current)` in place of the SDK's function `name` in each of `callers` (the modules
    that call it), unless `current` is a replacement already (`wrap` gives its function the
    attribute `marker`, the SDK's own): once, whoever installs it."""
    if getattr(current, marker, None) is None:
        replacement = wrap(current)
        for module in callers:
            setattr(module, name, replacement)


def install() -> bool:
    """Replace the two functions where the SDK's modules call them (once; True when they are
    in place)."""
    if not pinned("agent identities"):
        return False
    replace("_build_agent_identity_map", identity._build_agent_identity_map, _by_name,
            (identity, run_state, tool_use_tracker))  # fmt: skip
    replace("_get_ambiguous_agent_ids", identity._get_ambiguous_agent_ids, _none_ambiguous,
            (identity, run_state))  # fmt: skip
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
