"""Reading real pytest output the way the policy sees it."""

from __future__ import annotations

import re

import pytest

from rl_daytona.policy import pytest_output
from rl_daytona.tasks.calc import N_TESTS, pristine_source
from tests.policy.transcripts import CalcShell

VARIANT_8_FAILING = ("test_median_even_length", "test_median_odd_length", "test_percentile_interpolates")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("pytest-output")
    shell = CalcShell(root / "v8", 8)
    out = {name: shell.exec(cmd).output for name, cmd in [
        ("summary", "python -m pytest -q --tb=no"), ("tracebacks", "python -m pytest -q"),
        ("first", "python -m pytest -q -x")]}
    passing = CalcShell(root / "ok", 0)
    (passing.root / "calc.py").write_text(pristine_source())
    out["passed"] = passing.exec("python -m pytest -q --tb=no").output
    broken = CalcShell(root / "broken", 0)
    (broken.root / "calc.py").write_text(pristine_source().replace("def mean(xs):", "def mean(xs)"))
    out["broken"] = broken.exec("python -m pytest -q --tb=no").output
    return out


def test_summary_names_every_failing_test(outputs: dict[str, str]) -> None:
    r = pytest_output.parse(outputs["summary"])
    assert r.failing == VARIANT_8_FAILING and (r.failed, r.passed) == (3, N_TESTS - 3)
    assert not r.all_passed and not r.broken


def test_traceback_headers_alone_name_the_failing_tests(outputs: dict[str, str]) -> None:
    full = pytest_output.parse(outputs["tracebacks"])
    assert full.failing == VARIANT_8_FAILING
    headers_only = "\n".join(line for line in outputs["tracebacks"].splitlines()
                             if not re.match(r"(FAILED|ERROR) |\d+ (failed|passed)", line))
    assert pytest_output.parse(headers_only).failing == VARIANT_8_FAILING


def test_stop_at_first_failure(outputs: dict[str, str]) -> None:
    r = pytest_output.parse(outputs["first"])
    assert r.failed == 1 and len(r.failing) == 1 and r.failing[0] in VARIANT_8_FAILING and not r.all_passed


def test_all_passed_only_when_everything_passed(outputs: dict[str, str]) -> None:
    r = pytest_output.parse(outputs["passed"])
    assert r.all_passed and r.passed == N_TESTS and r.failing == () and not r.broken
    assert not pytest_output.parse("").all_passed  # never a pass from missing information
    assert not pytest_output.parse(outputs["passed"] + "\n1 error").all_passed


def test_a_collection_error_is_broken(outputs: dict[str, str]) -> None:
    r = pytest_output.parse(outputs["broken"])
    assert r.broken and not r.all_passed and r.failing == ()


def test_parametrized_headers_drop_their_ids() -> None:
    text = "____ test_mean_integers[1-2] ____\nE assert False\n1 failed in 0.01s\n"
    assert pytest_output.parse(text).failing == ("test_mean_integers",)
