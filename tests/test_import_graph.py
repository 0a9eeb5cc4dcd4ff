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


# The core: every module of rl_daytona except these. The built-in model (`policy`), the two
# simulators and the benchmarks are services and tools beside the core, and `cli` dispatches to
# the simulators' subcommands; the built-in renderer is reached by name through the registry.
NOT_CORE = ("rl_daytona.policy", "rl_daytona.tinker_sim", "rl_daytona.daytona_sim", "rl_daytona.bench",
            "rl_daytona.cli", "rl_daytona.renderers.builtin")
# What the core never reaches, however indirectly: the built-in model and the simulators.
SERVICES = ("rl_daytona.policy", "rl_daytona.tinker_sim", "rl_daytona.daytona_sim")


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def core_modules(graph: dict[str, set[str]]) -> list[str]:
    return sorted(m for m in graph if m.startswith("rl_daytona") and not _within(m, NOT_CORE))


def path_to(graph: dict[str, set[str]], start: str, targets: tuple[str, ...]) -> list[str] | None:
    """The shortest import path from `start` to a module under `targets` (importing a module
    runs its parent packages' __init__ too), or None when `start` never reaches one."""
    parent: dict[str, str | None] = {start: None}
    frontier = [start]
    while frontier:
        nxt: list[str] = []
        for node in frontier:
            if _within(node, targets):
                path: list[str] = []
                at: str | None = node
                while at is not None:
                    path.append(at)
                    at = parent[at]
                return path[::-1]
            packages = {node.rsplit(".", i)[0] for i in range(1, node.count("."))} & graph.keys()
            for dep in sorted(graph.get(node, set()) | packages):
                if dep not in parent:
                    parent[dep] = node
                    nxt.append(dep)
        frontier = nxt
    return None


def test_the_reach_checker_finds_an_indirect_path() -> None:
    graph = {"a": {"b"}, "b": {"c.d"}, "c": set(), "c.d": set(), "e": {"a"}}
    assert path_to(graph, "e", ("c",)) == ["e", "a", "b", "c.d"]
    assert path_to({"x.y.z": set(), "x.y": {"s"}, "x": set(), "s": set()}, "x.y.z", ("s",)) == ["x.y.z", "x.y", "s"]
    assert path_to(graph, "c", ("a",)) is None


def test_the_core_never_imports_the_builtin_model_or_a_simulator() -> None:
    graph = import_graph()
    core = core_modules(graph)
    assert {"rl_daytona.train", "rl_daytona.eval", "rl_daytona.tinker_run", "rl_daytona.renderers.base"} <= set(core)
    reached = [" -> ".join(p) for m in core if (p := path_to(graph, m, SERVICES))]
    assert reached == [], "the core reaches a service it must only talk to:\n" + "\n".join(reached)
