"""Inside the trusted pytest process: what an import may load (stdlib and pytest only).

`install(channel, modules, pristine, root)` puts `ProxyFinder` and `Firewall` first on
`sys.meta_path`, and `serve_tests_from_memory(pristine)` makes pytest's assertion rewriter
compile the pristine test text held in memory (never a file on disk, never a cached .pyc); it
also loads conftest.py files, so a pristine conftest works and any other one fails to load.

Invariant: after `install`, an import in this process yields a proxy of a declared source
module (its values from the worker, see `grader_proxy`), a pristine test file or helper
compiled from the text the host sent, or a module of the Python install (the interpreter's
prefixes, read-only to the agent); any other file, e.g. one the worker wrote into the grading
folder, is refused with ImportError. So what the worker writes to disk never runs here.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from typing import Any, Mapping, Sequence

if __package__:
    from rl_daytona.tasks.grader_proxy import CannotCross, Channel
else:  # copied into the sandbox next to rlgrade_proxy.py
    from rlgrade_proxy import CannotCross, Channel  # type: ignore[no-redef]


class ProxyModule(types.ModuleType):
    """A declared source module as the tests see it: names copied from the worker at import;
    assigning a name (e.g. monkeypatch.setattr) assigns it in the worker too."""

    def __setattr__(self, name: str, value: Any) -> None:
        remote = self.__dict__.get("_rl_module")
        if remote is not None and not (name.startswith("__") and name.endswith("__")) \
                and not isinstance(value, types.ModuleType):  # the import system binding a submodule
            setattr(remote, name, value)
        super().__setattr__(name, value)

    def __getattr__(self, name: str) -> Any:
        why = self.__dict__.get("_rl_unavailable", {}).get(name)
        if why:
            raise CannotCross(f"{self.__name__}.{name} cannot cross the grading boundary: {why}")
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")


class ProxyLoader(importlib.abc.Loader):
    def __init__(self, channel: Channel, declared: bool) -> None:
        self.channel, self.declared = channel, declared

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return ProxyModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        if not self.declared:  # a parent folder of declared modules: an empty namespace
            module.__path__ = []
            return
        data, _ = self.channel.request({"op": "import", "name": module.__name__})
        if type(data) is not dict or type(data.get("names")) is not dict:
            raise self.channel.fail("the worker answered an import with something else")
        names = {}
        unavailable = {}
        for name, entry in data["names"].items():
            if type(entry) is dict and "v" in entry:
                names[str(name)] = self.channel.decode(entry["v"])
            else:
                unavailable[str(name)] = str(entry.get("u") if type(entry) is dict else entry)[:500]
        vars(module).update(names)
        if type(data.get("all")) is list:
            module.__all__ = [str(n) for n in data["all"]]
        if data.get("package"):
            module.__path__ = []
        vars(module)["_rl_unavailable"] = unavailable
        vars(module)["_rl_module"] = self.channel.decode(data["module"])


class ProxyFinder(importlib.abc.MetaPathFinder):
    """Declared source modules (`calc`, `pkg.core`) and the packages above them."""

    def __init__(self, channel: Channel, modules: Sequence[str]) -> None:
        self.channel = channel
        self.declared = set(modules)
        self.parents = {m.rsplit(".", i)[0] for m in modules for i in range(1, m.count(".") + 1)} - self.declared

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name not in self.declared and name not in self.parents:
            return None
        is_package = name in self.parents or any(m.startswith(name + ".") for m in self.declared)
        return importlib.machinery.ModuleSpec(name, ProxyLoader(self.channel, name in self.declared),
                                              origin="grading-worker", is_package=is_package)


class MemoryLoader(importlib.abc.Loader):
    """A pristine helper module compiled from the text the host sent."""

    def __init__(self, path: str, text: str) -> None:
        self.path, self.text = path, text

    def exec_module(self, module: types.ModuleType) -> None:
        module.__file__ = self.path
        exec(compile(self.text, self.path, "exec", dont_inherit=True), vars(module))


class Firewall(importlib.abc.MetaPathFinder):
    """Only pristine files (from memory) and the Python install may be imported."""

    def __init__(self, pristine: Mapping[str, str], root: str) -> None:
        self.pristine = dict(pristine)
        self.root = os.path.realpath(root)
        self.allowed = tuple({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                                             sys.base_exec_prefix)})

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or not spec.has_location or not spec.origin:
            return None
        origin = os.path.realpath(spec.origin)
        if origin in self.pristine:
            is_package = os.path.basename(origin) == "__init__.py"
            return importlib.util.spec_from_file_location(
                name, origin, loader=MemoryLoader(origin, self.pristine[origin]),
                submodule_search_locations=[os.path.dirname(origin)] if is_package else None)
        inside = lambda base: origin == base or origin.startswith(base.rstrip("/") + "/")  # noqa: E731
        if inside(self.root) or not any(inside(base) for base in self.allowed):
            raise ImportError(f"the grader refuses to import {spec.origin}: it is neither a pristine test "
                              "file nor part of the Python install", name=name)
        return None


def serve_tests_from_memory(pristine: Mapping[str, str]) -> None:
    """pytest's assertion rewriter compiles pristine text from memory and reads no cached .pyc."""
    import ast

    from _pytest.assertion import rewrite

    texts = dict(pristine)

    def rewrite_test(fn: Any, config: Any) -> tuple[bytes, types.CodeType]:
        path = os.path.realpath(str(fn))
        if path not in texts:
            raise ImportError(f"the grader refuses to load {fn}: it is not a pristine test file")
        source = texts[path].encode()
        tree = ast.parse(source, filename=str(fn))
        rewrite.rewrite_asserts(tree, source, str(fn), config)
        return importlib.util.source_hash(source), compile(tree, str(fn), "exec", dont_inherit=True)

    rewrite._rewrite_test = rewrite_test  # type: ignore[assignment]
    rewrite._read_pyc = lambda *args, **kwargs: None  # type: ignore[assignment]


def install(channel: Channel, modules: Sequence[str], pristine: Mapping[str, str], root: str) -> None:
    """Put the proxy finder and the firewall first on sys.meta_path (see the module invariant)."""
    sys.meta_path[:0] = [ProxyFinder(channel, modules), Firewall(pristine, root)]
    serve_tests_from_memory(pristine)
