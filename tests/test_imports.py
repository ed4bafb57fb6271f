"""The modules of bot/ import one another without a cycle (imports inside functions count):
each layer and each kind of message can be read from the bottom up."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.processes import ROOT


def imports() -> dict[str, set[str]]:
    modules = {}
    for path in (ROOT / "bot").rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            else:
                continue
            graph[name] |= {f for f in found if f in modules and f != name}
    return graph


def cycle_from(graph: dict[str, set[str]], start: str) -> list[str]:
    """A path of imports from `start` back to itself, or []."""
    stack = [(start, [start])]
    seen: set[str] = set()
    while stack:
        node, path = stack.pop()
        for nxt in graph[node]:
            if nxt == start:
                return [*path, start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return []


def test_no_module_of_bot_imports_itself_through_others() -> None:
    graph = imports()
    assert "bot.slack.render.card" in graph and "bot.slack.blocks" in graph
    cycles = [c for c in (cycle_from(graph, name) for name in sorted(graph)) if c]
    assert cycles == [], " -> ".join(cycles[0])


def test_the_controls_ids_import_nothing_of_the_bot() -> None:
    """bot/slack/blocks.py is the contract both the renderers and the listeners import."""
    assert imports()["bot.slack.blocks"] == set()
    assert Path(ROOT / "bot" / "slack" / "question_blocks.py").exists() is False
