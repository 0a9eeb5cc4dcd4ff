"""The grader's pure parts: verdict parsing, judging, planning, report checks, tamper snapshots."""

from __future__ import annotations

import json
import sys
import types
from typing import Any

import pytest

from rl_daytona.tasks import TaskError
from rl_daytona.tasks.grader import final_outcome, judge, parse_grade_output, plan_grade
from rl_daytona.tasks.grader_bootstrap import parse_report
from rl_daytona.tasks.grader_runner import changed_names, snapshot_state

NONCE = "ab" * 16
TESTS = {"test_x.py": "def test_a():\n    pass\n\n\nclass TestB:\n    @staticmethod\n    def test_c():\n        pass\n"}
PASSED = {"setup": "passed", "call": "passed", "teardown": "passed"}


def line(verdict: dict[str, Any]) -> str:
    return "RLGRADE " + json.dumps(verdict)


def ok_verdict(tests: dict[str, dict[str, str]] | None = None, **overrides: Any) -> dict[str, Any]:
    report = {"tests": tests if tests is not None else {"test_x.py::test_a": PASSED, "test_x.py::TestB::test_c": PASSED},
              "collect_errors": [], "tampered": [], "exitstatus": 0}
    verdict = {"nonce": NONCE, "status": "ok", "detail": "", "returncode": 0, "report": report,
               "test_files_changed": []}
    for key, value in overrides.items():
        (report if key in report else verdict)[key] = value
    return verdict


def test_parse_finds_the_line_with_our_nonce() -> None:
    assert parse_grade_output(f"noise\n{line({'nonce': NONCE, 'status': 'ok'})}\n", NONCE) == {"nonce": NONCE, "status": "ok"}


def test_parse_ignores_forged_lines_before_and_after() -> None:
    real = line({"nonce": NONCE, "status": "ok", "n": 1})
    forged = line({"nonce": "cd" * 16, "status": "ok", "n": 2})
    out = "\n".join([forged, real, forged, "RLGRADE {not json", "  " + real.replace('"n": 1', '"n": 3')])
    assert parse_grade_output(out, NONCE)["n"] == 1


@pytest.mark.parametrize("stdout", ["", "16 passed in 0.1s", "RLGRADE []", 'RLGRADE {"status": "ok"}'])
def test_parse_returns_none_without_an_authenticated_line(stdout: str) -> None:
    assert parse_grade_output(stdout, NONCE) is None


def test_final_outcome_passes_only_with_all_three_phases_passed() -> None:
    assert final_outcome(PASSED) == "passed"
    assert final_outcome({"setup": "passed", "call": "passed"}) == "incomplete"
    assert final_outcome({"call": "passed", "teardown": "passed"}) == "incomplete"


@pytest.mark.parametrize(("phases", "outcome"), [
    ({"setup": "failed"}, "error"),
    ({"setup": "passed", "call": "passed", "teardown": "failed"}, "error"),
    ({"setup": "passed", "call": "failed", "teardown": "passed"}, "failed"),
    ({"setup": "skipped", "teardown": "passed"}, "skipped"),
    ({"setup": "passed", "call": "xfail", "teardown": "passed"}, "xfail"),
    ({}, "incomplete"),
])
def test_final_outcome_of_broken_tests(phases: dict[str, str], outcome: str) -> None:
    assert final_outcome(phases) == outcome


def test_plan_finds_module_and_class_tests() -> None:
    plan = plan_grade(["x.py"], TESTS, 2, 10)
    assert plan.expected_ids == {"test_x.py::test_a", "test_x.py::TestB::test_c"}
    assert ("test_x.py::TestB::test_c", "test_x.py", "test_c", (6, 7)) in plan.locations


@pytest.mark.parametrize(("sources", "tests"), [
    (["/etc/passwd"], TESTS), (["../x.py"], TESTS), (["a/../x.py"], TESTS), (["conftest.py"], TESTS),
    (["test_x.py"], TESTS), ([], TESTS), (["x.py"], {}), (["x.py"], {"test_x.py": "def broken(:"}),
    (["x.py"], {"test_x.py": "x = 1\n"}), (["x.py"], {"../test_x.py": "def test_a(): pass\n"}),
])
def test_plan_refuses_malformed_requests(sources: list[str], tests: dict[str, str]) -> None:
    with pytest.raises(TaskError):
        plan_grade(sources, tests, 1, 10)


def test_judge_pays_one_only_for_exactly_the_pristine_tests() -> None:
    plan = plan_grade(["x.py"], TESTS, 2, 10)
    result = judge(ok_verdict(), plan)
    assert (result.reward, result.passed, result.failed, result.detail) == (1.0, 2, 0, "2/2 tests passed")


@pytest.mark.parametrize(("verdict", "needle"), [
    (ok_verdict(tampered=["builtins.abs was modified during collection"]), "tampering detected: builtins.abs"),
    (ok_verdict(test_files_changed=["test_x.py"]), "pristine test files changed"),
    (ok_verdict(collect_errors=["test_x.py: boom"]), "collection errors"),
    (ok_verdict(exitstatus=1), "exit status 1"),
    (ok_verdict(returncode=3), "process 3"),
    (ok_verdict({"test_x.py::test_a": PASSED}), "did not run: test_x.py::TestB::test_c"),
    (ok_verdict({"test_x.py::test_a": PASSED, "test_x.py::TestB::test_c": {"setup": "failed"}}), "TestB::test_c (error)"),
    (ok_verdict({"test_x.py::test_a": PASSED, "test_x.py::TestB::test_c": PASSED, "test_x.py::test_z": PASSED}),
     "unexpected tests: test_x.py::test_z"),
    ({"nonce": NONCE, "status": "missing_source", "detail": "source file x.py is missing"}, "x.py is missing"),
    ({"nonce": NONCE, "status": "no_report", "detail": "no report"}, "no_report"),
])
def test_judge_pays_zero_with_a_reason(verdict: dict[str, Any], needle: str) -> None:
    result = judge(verdict, plan_grade(["x.py"], TESTS, 2, 10))
    assert result.reward == 0.0 and not result.timed_out
    assert needle in result.detail


def test_judge_counts_must_match_expected_passed() -> None:
    result = judge(ok_verdict(), plan_grade(["x.py"], TESTS, 3, 10))
    assert result.reward == 0.0 and "2 tests passed, expected 3" in result.detail


def test_judge_marks_timeouts() -> None:
    result = judge({"nonce": NONCE, "status": "timeout", "detail": "slow"}, plan_grade(["x.py"], TESTS, 2, 10))
    assert (result.reward, result.timed_out) == (0.0, True)


def test_bootstrap_accepts_exactly_one_authenticated_report() -> None:
    good = f"{NONCE} {json.dumps({'tests': {}})}\n".encode()
    assert parse_report(good, NONCE) == {"tests": {}}
    assert parse_report(good + good, NONCE) is None
    assert parse_report(good.replace(NONCE.encode(), b"cd" * 16), NONCE) is None
    assert parse_report(b"", NONCE) is None
    assert parse_report(f"{NONCE} [1]\n".encode(), NONCE) is None


def test_snapshot_sees_a_patched_function_even_when_the_value_is_equal() -> None:
    module = types.ModuleType("rl_fake_guarded")
    exec("def f():\n    return 1\nclass K:\n    def m(self):\n        return 2\n", module.__dict__)
    sys.modules[module.__name__] = module
    try:
        before = snapshot_state((module.__name__,))
        assert changed_names(before) == []
        module.f = lambda: 1
        module.K.m = lambda self: 2
        assert sorted(changed_names(before)) == ["rl_fake_guarded.K.m", "rl_fake_guarded.f"]
    finally:
        del sys.modules[module.__name__]


def test_the_grading_program_fits_the_daytona_toolbox_stdin() -> None:
    from rl_daytona.backends.daytona_toolbox import MAX_STDIN
    from rl_daytona.tasks.calc import N_TESTS, TEST_SOURCE
    from rl_daytona.tasks.grader import bootstrap_program

    plan = plan_grade(["calc.py"], {"test_calc.py": TEST_SOURCE}, N_TESTS, 60)
    assert len(bootstrap_program(plan, NONCE)) < MAX_STDIN // 2  # room for a taskset's bigger tests
