"""The calc taskset: a small statistics library seeded with 1-3 one-line bugs per variant.

Invariant: variant `v` always seeds the same `calc.py` (see `bugs.VARIANT_BUGS`) next to the
pristine `test_calc.py`; grading runs the pristine tests, so 1.0 means every one of the
`N_TESTS` tests passed against the agent's calc.py; `calc_solution` (the variant's catalogued
bugs reverted) is its reference fix. Splits: "train" (variants 0-23 and 32-39: each bug of
the catalogue alone among them) and "heldout" (24-31, bug combinations never seen together in
train).
"""

from __future__ import annotations

from importlib import resources
from typing import Any, AsyncGenerator

from rl_daytona.tasks.api import Solution, TaskEnv, TaskInstance, Taskset, task
from rl_daytona.tasks.calc.bugs import (
    BUGS,
    HELDOUT_VARIANTS,
    TRAIN_VARIANTS,
    VARIANT_BUGS,
    Bug,
    bug_catalogue,
    buggy_source,
    fixed_source,
    pristine_source,
    variant_bugs,
)

TEST_SOURCE: str = resources.files(__package__).joinpath("files/test_calc.py").read_text()
N_TESTS = 16
N_VARIANTS = len(VARIANT_BUGS)
PROMPT = (
    "The tests in test_calc.py fail. Fix the bugs in calc.py so every test passes. "
    "Do not edit the tests."
)

__all__ = [
    "BUGS", "Bug", "CALC_TASKSET", "HELDOUT_VARIANTS", "N_TESTS", "N_VARIANTS", "PROMPT",
    "TEST_SOURCE", "TRAIN_VARIANTS", "bug_catalogue", "buggy_source", "calc_instance",
    "calc_solution", "calc_task", "fixed_source", "make_calc_taskset", "pristine_source", "variant_bugs",
]


async def _calc(env: TaskEnv, *, variant: int) -> AsyncGenerator[Any, Any]:
    """Fix the seeded bugs in calc.py so the pristine test_calc.py passes."""
    await env.write_files({"calc.py": buggy_source(variant), "test_calc.py": TEST_SOURCE})
    yield PROMPT
    yield await env.grade_pytest(sources=["calc.py"], tests={"test_calc.py": TEST_SOURCE},
                                 expected_passed=N_TESTS)


def calc_solution(*, variant: int) -> Solution:
    """The reference fix: calc.py with each of the variant's catalogued bugs reverted."""
    return Solution(files={"calc.py": fixed_source(variant)})


# Applied as a call (not `@task`) so `_calc` stays a module attribute and plain pickle finds it.
calc_task = task(name="calc", solution=calc_solution)(_calc)


def calc_instance(variant: int) -> TaskInstance:
    """`calc_task(variant=...)`, refusing an unknown variant with a clear `TaskError`."""
    variant_bugs(variant)
    return calc_task(variant=variant)


def make_calc_taskset() -> Taskset:
    """Every variant, with the "train" and "heldout" splits."""
    instances = tuple(calc_instance(v) for v in range(N_VARIANTS))
    splits = {
        "train": tuple(instances[v].instance_id for v in TRAIN_VARIANTS),
        "heldout": tuple(instances[v].instance_id for v in HELDOUT_VARIANTS),
    }
    return Taskset(name="calc", instances=instances, splits=splits)


CALC_TASKSET: Taskset = make_calc_taskset()
