"""The public task API and the taskset registry.

A task is an async generator: seed the workspace, `yield` the prompt, (the agent works),
grade, `yield` the reward.

    from rl_daytona.tasks import TaskEnv, Taskset, task

    @task(name="wordcount")
    async def wordcount(env: TaskEnv, *, variant: int = 0):
        await env.write_files({"wc.py": BUGGY, "test_wc.py": TESTS})
        yield "The tests in test_wc.py fail. Fix wc.py."
        yield await env.grade_pytest(sources=["wc.py"], tests={"test_wc.py": TESTS}, expected_passed=3)

    TASKSET = Taskset(name="wordcount", instances=(wordcount(variant=0),), splits={})

Invariant: `get_taskset` resolves a built-in name or a `package.module:ATTRIBUTE` spec to a
`Taskset`, or raises `TaskError` with one line saying what is wrong.
"""

from __future__ import annotations

import importlib

from rl_daytona.tasks.api import GradeResult, Task, TaskEnv, TaskError, TaskInstance, Taskset, TaskRun, task

BUILTIN_TASKSETS = {"calc": "rl_daytona.tasks.calc:CALC_TASKSET"}

__all__ = ["BUILTIN_TASKSETS", "GradeResult", "Task", "TaskEnv", "TaskError", "TaskInstance",
           "TaskRun", "Taskset", "get_taskset", "task"]


def get_taskset(name: str) -> Taskset:
    """A built-in taskset by name, or a user's by `package.module:ATTRIBUTE`."""
    spec = BUILTIN_TASKSETS.get(name, name)
    if ":" not in spec:
        known = ", ".join(sorted(BUILTIN_TASKSETS))
        raise TaskError(f"unknown taskset {name!r} (built-in: {known}; or give package.module:ATTRIBUTE)")
    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise TaskError(f"cannot import taskset module {module_name!r}: {exc}") from None
    taskset = getattr(module, attribute, None)
    if not isinstance(taskset, Taskset):
        raise TaskError(f"{spec!r} is not a Taskset (got {type(taskset).__name__})")
    return taskset
