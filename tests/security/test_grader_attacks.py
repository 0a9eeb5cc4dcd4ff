"""Attacks written into the agent's sources, graded by the real grader: each earns 0.

calc variant 0 stays buggy (`mean` is wrong); each attack (tests/security/attacks.py) is added to
calc.py and tries to be paid anyway: forging the report from memory, lying on the worker's
channel, results equal to everything or lying about their type, values over the limits, a
worker that never answers or kills the grader. The honest fix earns 1.0 on the same path. The
report-forging attack is also graded on Daytona (daytona-sim, the real SDK over HTTP and SSH).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from rl_daytona.tasks import GradeResult
from rl_daytona.tasks.calc import N_TESTS, TEST_SOURCE, buggy_source, pristine_source
from rl_daytona.tasks.grader import grade_pytest
from tests.backends.daytona_env import daytona_key, run, sim_backend  # noqa: F401
from tests.security.attacks import (
    ALWAYS_EQUAL, DEEP, FORGE_REPORT, HUGE, KILL_THE_GRADER, LYING_TYPE, NEVER_ANSWERS, PATCH_CHANNEL, PLANT_FILES,
    RETURN_YES,
)
from tests.tasks.conftest import local_backend  # noqa: F401

BUGGY = buggy_source(0)
ATTACKS = {  # name -> (calc.py, what the verdict must say)
    "forge the report from memory": (FORGE_REPORT + BUGGY, "test_mean_integers"),
    "patch the worker's channel": (PATCH_CHANNEL + BUGGY, "test_calc.py::test_"),
    "results equal to everything": (ALWAYS_EQUAL + BUGGY + RETURN_YES, "test_mean_integers (failed)"),
    "results lying about their type": (LYING_TYPE + BUGGY + RETURN_YES, "test_mean_integers (failed)"),
    "a huge result": (HUGE + BUGGY + RETURN_YES, "test_mean_integers (failed)"),
    "a deeply nested result": (DEEP + BUGGY + RETURN_YES, "test_mean_integers (failed)"),
    "kill the grader": (KILL_THE_GRADER + BUGGY, ""),
    "plant conftest.py, __init__.py and .pyc in the grading folder": (PLANT_FILES + BUGGY, "test_mean_integers"),
}


async def grade_in(backend: Any, calc: str, timeout: float = 20.0) -> GradeResult:
    sandbox = await backend.create("attack-test")
    try:
        await backend.write_files(sandbox, {"calc.py": calc, "test_calc.py": TEST_SOURCE})
        return await grade_pytest(backend, sandbox, sources=["calc.py"], tests={"test_calc.py": TEST_SOURCE},
                                  expected_passed=N_TESTS, timeout=timeout)
    finally:
        await backend.delete(sandbox)


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_every_source_attack_earns_zero(local_backend: Any, attack: str) -> None:
    calc, needle = ATTACKS[attack]
    result = asyncio.run(grade_in(local_backend, calc))
    assert result.reward == 0.0, (attack, result)
    assert needle in result.detail, (attack, result.detail)


def test_a_worker_that_never_answers_times_out_with_zero(local_backend: Any) -> None:
    result = asyncio.run(grade_in(local_backend, NEVER_ANSWERS + BUGGY, timeout=3))
    assert (result.reward, result.timed_out) == (0.0, True), result


def test_the_honest_fix_still_earns_one(local_backend: Any) -> None:
    assert asyncio.run(grade_in(local_backend, pristine_source())).reward == 1.0


def test_the_forging_attack_earns_zero_on_daytona_sim(tmp_path: Path, daytona_key: str) -> None:  # noqa: F811
    async def scenario() -> tuple[GradeResult, GradeResult]:
        async with sim_backend(tmp_path) as (_, backend):
            return await grade_in(backend, FORGE_REPORT + BUGGY), await grade_in(backend, pristine_source())

    forged, honest = run(scenario())
    assert forged.reward == 0.0 and "test_mean_integers" in forged.detail, forged
    assert honest.reward == 1.0, honest
