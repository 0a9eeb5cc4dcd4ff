"""`get_taskset`: built-in names, user import specs, and clear errors for everything else."""

from __future__ import annotations

import pytest

import rl_daytona.tasks as tasks
from rl_daytona.tasks import TaskError, get_taskset
from rl_daytona.tasks.calc import CALC_TASKSET


def make_example() -> tasks.Taskset:
    from tests.tasks.example_task import EXAMPLE_TASKSET

    return EXAMPLE_TASKSET


def test_public_api_is_exported() -> None:
    for name in ("task", "Task", "TaskInstance", "TaskEnv", "Taskset", "GradeResult", "TaskError", "get_taskset"):
        assert hasattr(tasks, name) and name in tasks.__all__


def test_builtin_calc() -> None:
    assert get_taskset("calc") is CALC_TASKSET


def test_import_spec_may_name_a_factory() -> None:
    assert get_taskset("tests.tasks.test_registry:make_example").name == "wordcount"


@pytest.mark.parametrize(("name", "message"), [
    ("nope", "unknown taskset 'nope'"),
    (":X", "bad taskset spec"),
    ("tests.tasks.example_task:", "bad taskset spec"),
    ("no_such_module_xyz:TASKS", "cannot import 'no_such_module_xyz'"),
    ("tests.tasks.example_task:MISSING", "has no attribute 'MISSING'"),
    ("tests.tasks.example_task:PROMPT", "names a str, not a Taskset"),
    ("tests.tasks.example_task:buggy_wordcount", "needs arguments"),
])
def test_bad_names_raise_task_error(name: str, message: str) -> None:
    with pytest.raises(TaskError, match=message):
        get_taskset(name)
