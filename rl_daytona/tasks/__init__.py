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

Invariant: `get_taskset` returns a `Taskset` or raises `TaskError` with one line saying what
was wrong (for a module that fails to load: its file and line, and the cause; see `loader`);
it never returns something else and nothing else escapes it.
"""

from __future__ import annotations

from typing import Callable

from rl_daytona.tasks.api import (
    GradeResult, Solution, Task, TaskEnv, TaskError, TaskInstance, Taskset, task,
)
from rl_daytona.tasks.loader import failure, load_taskset

__all__ = ["GradeResult", "Solution", "Task", "TaskEnv", "TaskError", "TaskInstance", "Taskset", "get_taskset",
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
        try:
            return BUILTIN_TASKSETS[name]()
        except Exception as exc:  # noqa: BLE001 - a broken built-in is one line too
            raise failure(exc, f"loading the built-in taskset {name!r}") from None
    if ":" not in name:
        known = ", ".join(sorted(BUILTIN_TASKSETS))
        raise TaskError(f"unknown taskset {name!r} (built-in: {known}; or give 'package.module:attribute')")
    return load_taskset(name)
