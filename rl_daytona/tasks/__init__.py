"""Tasks: write a coding task once, as an async generator, and run it many times.

A full example (a repo with one bug, one instruction, a grader that cannot be gamed):

    from rl_daytona.tasks import TaskEnv, Taskset, task

    SOURCE = "def add(a, b):\\n    return a - b\\n"
    TESTS = {"test_add.py": "from add import add\\n\\ndef test_add():\\n    assert add(2, 3) == 5\\n"}

    @task(name="add")
    async def add_task(env: TaskEnv, *, variant: int = 0):
        await env.write_files({"add.py": SOURCE, **TESTS})          # seed the workspace
        yield "test_add.py fails. Fix add.py; do not edit the tests."  # the prompt
        yield await env.grade_pytest(sources=["add.py"], tests=TESTS, expected_passed=1)

    ADD_TASKSET = Taskset(name="add", instances=(add_task(variant=0),),
                          splits={"train": ("add[variant=0]",)})

`get_taskset("calc")` returns the built-in calc taskset; `get_taskset("my.module:ADD_TASKSET")`
imports a user's taskset (the attribute may also be a zero-argument function returning one).

Invariant: `get_taskset` returns a `Taskset` or raises `TaskError` with a message saying what
was wrong with the name; it never returns something else.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Callable

from rl_daytona.tasks.api import GradeResult, Task, TaskEnv, TaskError, TaskInstance, Taskset, task

__all__ = ["GradeResult", "Task", "TaskEnv", "TaskError", "TaskInstance", "Taskset", "get_taskset",
           "task", "BUILTIN_TASKSETS"]


def _calc() -> Taskset:
    from rl_daytona.tasks.calc import CALC_TASKSET

    return CALC_TASKSET


def _textkit() -> Taskset:
    from rl_daytona.tasks.textkit import TEXTKIT_TASKSET

    return TEXTKIT_TASKSET


BUILTIN_TASKSETS: dict[str, Callable[[], Taskset]] = {"calc": _calc, "textkit": _textkit}


def get_taskset(name: str) -> Taskset:
    """A built-in taskset by name, or a user's by import spec `package.module:attribute`."""
    if name in BUILTIN_TASKSETS:
        return BUILTIN_TASKSETS[name]()
    if ":" not in name:
        known = ", ".join(sorted(BUILTIN_TASKSETS))
        raise TaskError(f"unknown taskset {name!r} (built-in: {known}; or give 'package.module:attribute')")
    return _import_taskset(name)


def _import_taskset(spec: str) -> Taskset:
    module_name, _, attr_path = spec.partition(":")
    if not module_name or not attr_path:
        raise TaskError(f"bad taskset spec {spec!r}: expected 'package.module:attribute'")
    try:
        value: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise TaskError(f"taskset spec {spec!r}: cannot import {module_name!r} ({exc})") from exc
    for attr in attr_path.split("."):
        if not hasattr(value, attr):
            raise TaskError(f"taskset spec {spec!r}: {module_name!r} has no attribute {attr_path!r}")
        value = getattr(value, attr)
    if callable(value) and not isinstance(value, Taskset):
        value = _call_factory(spec, value)
    if not isinstance(value, Taskset):
        raise TaskError(f"taskset spec {spec!r} names a {type(value).__name__}, not a Taskset")
    return value


def _call_factory(spec: str, factory: Callable[[], object]) -> object:
    try:
        inspect.signature(factory).bind()
    except (TypeError, ValueError):
        raise TaskError(f"taskset spec {spec!r} names a callable that needs arguments; "
                        "name a Taskset or a zero-argument function returning one") from None
    return factory()
