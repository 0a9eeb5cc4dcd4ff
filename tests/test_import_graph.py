"""rl_daytona's modules import one another one way only: no pair (nor longer loop) of modules
imports each other, counting imports inside functions and under TYPE_CHECKING alike."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rl_daytona"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the rl_daytona modules it imports (a `from pkg import sub` counts as pkg.sub)."""
    modules = {_module_name(p): p for p in package.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("rl_daytona"):
                subs = {f"{node.module}.{a.name}" for a in node.names} & modules.keys()
                graph[name] |= subs
                if node.module in modules and len(subs) < len(node.names):
                    graph[name].add(node.module)
            elif isinstance(node, ast.Import):
                graph[name] |= {a.name for a in node.names} & modules.keys()
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of two or more modules (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_checker_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_rl_daytona_is_part_of_an_import_cycle() -> None:
    graph = import_graph()
    assert "rl_daytona.tasks.grader" in graph["rl_daytona.tasks.api"]  # the walk sees real imports
    assert cycles(graph) == []
