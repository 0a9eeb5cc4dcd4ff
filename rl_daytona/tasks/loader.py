"""Loading a user's taskset from an import spec `package.module:ATTRIBUTE`, with one-line errors.

Invariant: `load_taskset` returns a `Taskset` or raises `TaskError` whose message is one line
naming the file and line where the user's code went wrong (a syntax error, an import that
fails, a task called with a misspelt keyword, a duplicate instance, a split naming an unknown
instance, an attribute that is missing or not a Taskset) and the cause. Nothing else escapes:
any exception raised while importing the module or calling its factory becomes that one line.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import inspect
import os
import sys
import sysconfig
import traceback
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Callable

from rl_daytona.tasks.api import TaskError, Taskset

_TASKS_DIR = Path(__file__).resolve().parent
# the task machinery itself: a failure is reported at the user's line that called into it
_MACHINERY = {_TASKS_DIR / "api.py", _TASKS_DIR / "loader.py", _TASKS_DIR / "__init__.py"}
_LIBRARY_DIRS = tuple({Path(p).resolve() for key in ("stdlib", "platstdlib", "purelib", "platlib")
                       if (p := sysconfig.get_paths().get(key))})
_PACKAGE_DIR = _TASKS_DIR.parent


def load_taskset(spec: str) -> Taskset:
    """The Taskset an import spec names (the attribute may be a zero-argument factory)."""
    module_name, _, attr_path = spec.partition(":")
    if not module_name or not attr_path:
        raise TaskError(f"bad taskset spec {spec!r}: expected 'package.module:attribute'")
    _cwd_importable()
    module = _import(spec, module_name)
    value = _attribute(spec, module, attr_path)
    if callable(value) and not isinstance(value, Taskset):
        value = _call_factory(spec, module, attr_path, value)
    if not isinstance(value, Taskset):
        kind = type(value).__name__
        raise TaskError(f"{_where_bound(module, attr_path)}taskset spec {spec!r} names "
                        f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}, not a Taskset")
    return value


def _cwd_importable() -> None:
    """`rl-daytona` started as a console script has its own folder on sys.path, not the cwd:
    put the cwd there, as `python -m` does, so `--taskset mymodule:TASKS` finds ./mymodule.py."""
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())


def _import(spec: str, module_name: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise TaskError(f"taskset spec {spec!r}: cannot import {module_name!r} "
                            f"(no module named {exc.name!r} on the path; run from the folder that holds it)") from None
        raise failure(exc, f"importing {module_name!r}") from None
    except BaseException as exc:  # noqa: BLE001 - any failure of the user's module is one line
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        raise failure(exc, f"importing {module_name!r}") from None


def _attribute(spec: str, module: ModuleType, attr_path: str) -> object:
    value: object = module
    for attr in attr_path.split("."):
        if not hasattr(value, attr):
            names = [n for n in dir(value) if not n.startswith("_")]
            close = difflib.get_close_matches(attr, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TaskError(f"{_file_of(module)}: taskset spec {spec!r}: {module.__name__!r} has no attribute "
                            f"{attr_path!r}{hint}")
        value = getattr(value, attr)
    return value


def _call_factory(spec: str, module: ModuleType, attr_path: str, factory: Callable[[], object]) -> object:
    try:
        inspect.signature(factory).bind()
    except (TypeError, ValueError):
        raise TaskError(f"{_where_bound(module, attr_path)}taskset spec {spec!r} names a callable that needs "
                        "arguments; name a Taskset or a zero-argument function returning one") from None
    try:
        return factory()
    except Exception as exc:  # noqa: BLE001 - any failure of the user's factory is one line
        raise failure(exc, f"calling {attr_path}()") from None


def failure(exc: BaseException, doing: str) -> TaskError:
    """One line: `file:line: cause` at the user's line where `exc` arose (while `doing`)."""
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f"{_shown(exc.filename)}:{exc.lineno}: "
        cause = f"{type(exc).__name__}: {exc.msg}"
    else:
        frame = _user_frame(exc.__traceback__)
        where = f"{_shown(frame.filename)}:{frame.lineno}: " if frame else ""
        cause = str(exc) if isinstance(exc, TaskError) else f"{type(exc).__name__}: {exc}"
    return TaskError(" ".join(f"{where}{cause} (while {doing})".split()))


def _user_frame(tb: TracebackType | None) -> traceback.FrameSummary | None:
    """The deepest frame in the user's own files (not rl_daytona, the stdlib or a third-party
    package), else the deepest in rl_daytona outside the task machinery (a built-in taskset)."""
    frames = traceback.extract_tb(tb)
    for wanted in ("user", "package"):
        for frame in reversed(frames):
            if _origin(Path(frame.filename)) == wanted:
                return frame
    return frames[-1] if frames else None


def _origin(path: Path) -> str:
    """'user', 'package' (rl_daytona, outside the task machinery) or 'library'."""
    if path.name.startswith("<"):
        return "library"
    path = path.resolve()
    if path in _MACHINERY:
        return "library"
    if path.is_relative_to(_PACKAGE_DIR):
        return "package"
    return "library" if any(path.is_relative_to(d) for d in _LIBRARY_DIRS) else "user"


def _shown(filename: str) -> str:
    """A path relative to the cwd when it is under it, else as given."""
    try:
        return str(Path(filename).resolve().relative_to(Path.cwd()))
    except ValueError:
        return filename


def _file_of(module: ModuleType) -> str:
    return _shown(module.__file__) if getattr(module, "__file__", None) else module.__name__


def _where_bound(module: ModuleType, attr_path: str) -> str:
    """`file:line: ` of the top-level statement binding the attribute's first name, if found."""
    name = attr_path.split(".")[0]
    try:
        tree = ast.parse(Path(module.__file__ or "").read_text())
    except (OSError, SyntaxError, ValueError):
        return f"{_file_of(module)}: "
    for node in tree.body:
        if name in _bound_names(node):
            return f"{_file_of(module)}:{node.lineno}: "
    return f"{_file_of(module)}: "


def _bound_names(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, ast.AnnAssign):
        targets = [node.target]
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
