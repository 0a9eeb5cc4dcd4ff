"""The textkit taskset: a nested package (textkit/strings.py, textkit/seqs.py, tests under tests/)
seeded with 1-3 one-line bugs per variant, written only against the public Task API.

Invariant: variant `v` always seeds the same sources (see `bugs.VARIANT_BUGS`) next to the
pristine tests; grading runs the pristine tests against the declared sources, so 1.0 means
every one of the `N_TESTS` tests passed; `textkit_solution` (the pristine sources) pays 1.0.
Splits: "train" (variants 0-23 and 32-37: each bug of the catalogue alone among them) and
"heldout" (24-31, bug combinations never seen together in train).
"""

from __future__ import annotations

from typing import Any, AsyncGenerator

from rl_daytona.tasks.api import Solution, TaskEnv, TaskInstance, Taskset, task
from rl_daytona.tasks.textkit.bugs import (
    BUGS, HELDOUT_VARIANTS, TRAIN_VARIANTS, VARIANT_BUGS, pristine_files, seeded_files, test_files, variant_bugs,
)

N_TESTS = 20
PROMPT = (
    "The tests in tests/test_strings.py and tests/test_seqs.py fail. Fix the bugs in "
    "textkit/strings.py and textkit/seqs.py so every test passes. Do not edit the tests."
)
TESTS = test_files()

__all__ = ["BUGS", "N_TESTS", "PROMPT", "TEXTKIT_TASKSET", "TESTS", "pristine_files", "seeded_files",
           "textkit_solution", "textkit_task", "variant_bugs"]


async def _textkit(env: TaskEnv, *, variant: int) -> AsyncGenerator[Any, Any]:
    """Fix the seeded bugs in the textkit package so the pristine tests pass."""
    await env.write_files({**seeded_files(variant), **TESTS})
    yield PROMPT
    yield await env.grade_pytest(sources=sorted(pristine_files()), tests=TESTS, expected_passed=N_TESTS)


def textkit_solution(*, variant: int) -> Solution:
    """The reference fix: the pristine sources over the seeded ones."""
    variant_bugs(variant)
    return Solution(files=pristine_files())


textkit_task = task(name="textkit", solution=textkit_solution)(_textkit)


def make_textkit_taskset() -> Taskset:
    """Every variant, with the "train" and "heldout" splits."""
    instances: tuple[TaskInstance, ...] = tuple(textkit_task(variant=v) for v in range(len(VARIANT_BUGS)))
    splits = {"train": tuple(instances[v].instance_id for v in TRAIN_VARIANTS),
              "heldout": tuple(instances[v].instance_id for v in HELDOUT_VARIANTS)}
    return Taskset(name="textkit", instances=instances, splits=splits)


TEXTKIT_TASKSET: Taskset = make_textkit_taskset()
