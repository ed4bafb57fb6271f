"""The modules of bot/ import one another without a cycle (imports inside functions count):
each layer and each kind of message can be read from the bottom up."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from tests.processes import ROOT


def statements(tree: ast.Module) -> Iterator[ast.stmt]:
    """Every statement, however nested (in functions, classes, branches, handlers): only
    statements import, so the expressions, most of a module's nodes, are not walked."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        for name in ("body", "orelse", "finalbody", "handlers", "cases"):
            inner = getattr(node, name, None)
            if isinstance(inner, list):
                stack.extend(inner)
        if isinstance(node, ast.stmt):
            yield node


@cache
def imports() -> dict[str, set[str]]:
    modules = {}
    for path in (ROOT / "bot").rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in statements(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            else:
                continue
            graph[name] |= {f for f in found if f in modules and f != name}
    return graph


def a_cycle(graph: dict[str, set[str]]) -> list[str]:
    """A path of imports from a module back to itself, or [] (one depth-first pass: a module
    met again while still on the path closes a cycle)."""
    done: set[str] = set()
    for root in sorted(graph):
        if root in done:
            continue
        path, on_path = [root], {root}
        pending = [iter(sorted(graph[root]))]
        while pending:
            nxt = next(pending[-1], None)
            if nxt is None:
                left = path.pop()
                on_path.discard(left)
                done.add(left)
                pending.pop()
                continue
            if nxt in on_path:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in done:
                path.append(nxt)
                on_path.add(nxt)
                pending.append(iter(sorted(graph[nxt])))
    return []


def test_no_module_of_bot_imports_itself_through_others() -> None:
    graph = imports()
    assert "bot.slack.render.card" in graph and "bot.slack.blocks" in graph
    cycle = a_cycle(graph)
    assert cycle == [], " -> ".join(cycle)


def test_the_controls_ids_import_nothing_of_the_bot() -> None:
    """bot/slack/blocks.py is the contract both the renderers and the listeners import."""
    assert imports()["bot.slack.blocks"] == set()
    assert Path(ROOT / "bot" / "slack" / "question_blocks.py").exists() is False
