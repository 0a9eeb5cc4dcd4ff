"""Tasks a user might get wrong in ways only running them shows, for `rl-daytona tasks check`.

Invariant: `BROKEN` holds one sound calc instance and one instance of each broken kind: a
grader expecting one test more than the tests hold (its reference fix pays 0: unsolvable), a
workspace seeded already fixed (pays untouched), and a seed that differs every time.
"""

from __future__ import annotations

import uuid
from typing import Any, AsyncGenerator

from rl_daytona.tasks import TaskEnv, Taskset, task
from rl_daytona.tasks.calc import N_TESTS, PROMPT, TEST_SOURCE, buggy_source, calc_instance, calc_solution
from rl_daytona.tasks.calc import pristine_source

TESTS = {"test_calc.py": TEST_SOURCE}


async def _unsolvable(env: TaskEnv, *, variant: int) -> AsyncGenerator[Any, Any]:
    await env.write_files({"calc.py": buggy_source(variant), **TESTS})
    yield PROMPT
    yield await env.grade_pytest(sources=["calc.py"], tests=TESTS, expected_passed=N_TESTS + 1)


async def _already_fixed(env: TaskEnv, *, variant: int) -> AsyncGenerator[Any, Any]:
    await env.write_files({"calc.py": pristine_source(), **TESTS})  # forgot to apply the bugs
    yield PROMPT
    yield await env.grade_pytest(sources=["calc.py"], tests=TESTS, expected_passed=N_TESTS)


async def _random_seed(env: TaskEnv, *, variant: int) -> AsyncGenerator[Any, Any]:
    await env.write_files({"calc.py": buggy_source(variant), "seed.txt": uuid.uuid4().hex, **TESTS})
    yield PROMPT
    yield await env.grade_pytest(sources=["calc.py"], tests=TESTS, expected_passed=N_TESTS)


unsolvable = task(name="unsolvable", solution=calc_solution)(_unsolvable)
already_fixed = task(name="already_fixed", solution=calc_solution)(_already_fixed)
random_seed = task(name="random_seed", solution=calc_solution)(_random_seed)

BROKEN = Taskset(name="broken", instances=(
    calc_instance(8), unsolvable(variant=8), already_fixed(variant=8), random_seed(variant=8)))

# two of the above, for the slower backends
PAIR = Taskset(name="pair", instances=(calc_instance(8), unsolvable(variant=8)))
