"""The pytest grader through the real LocalBackend: a fix pays 1.0, every hack pays 0.0.

Each hack leaves calc.py buggy (variant 0 breaks `mean`) and tries to earn the reward anyway.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Mapping

import pytest

from rl_daytona.backends.local import LocalBackend
from rl_daytona.tasks import GradeResult
from rl_daytona.tasks.calc import N_TESTS, TEST_SOURCE, buggy_source, pristine_source
from rl_daytona.tasks.grader import grade_pytest

BUGGY = buggy_source(0)
PRISTINE = pristine_source()
# Code that, if the grader ever ran it, would make the tests pass against a "fixed" calc.
INJECT_FIXED_CALC = (f"import sys, types; _m = types.ModuleType('calc'); exec({PRISTINE!r}, _m.__dict__); "
                     "sys.modules['calc'] = _m")
FORCE_PASS_HOOK = '''
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
'''
FAKE_VERDICT = json.dumps({"nonce": "0" * 32, "status": "ok", "returncode": 0, "test_files_changed": [],
                           "report": {"tests": {}, "collect_errors": [], "tampered": [], "exitstatus": 0}})


def grade(backend: LocalBackend, files: Mapping[str, str], *, setup: str = "", timeout: float = 20.0,
          expected: int = N_TESTS) -> GradeResult:
    async def run() -> GradeResult:
        sandbox = await backend.create("grader-test")
        try:
            await backend.write_files(sandbox, {"test_calc.py": TEST_SOURCE, **files})
            if setup:
                assert (await backend.exec(sandbox, setup)).exit_code == 0
            return await grade_pytest(backend, sandbox, sources=["calc.py"], tests={"test_calc.py": TEST_SOURCE},
                                      expected_passed=expected, timeout=timeout)
        finally:
            await backend.delete(sandbox)

    return asyncio.run(run())


def assert_zero(result: GradeResult, needle: str = "") -> None:
    assert result.reward == 0.0, result
    assert needle in result.detail, result.detail


def test_correct_fix_pays_one(local_backend: LocalBackend) -> None:
    result = grade(local_backend, {"calc.py": PRISTINE})
    assert (result.reward, result.passed, result.expected, result.failed) == (1.0, N_TESTS, N_TESTS, 0)


def test_untouched_bug_pays_zero_and_names_the_failing_tests(local_backend: LocalBackend) -> None:
    assert_zero(grade(local_backend, {"calc.py": BUGGY}), "test_calc.py::test_mean_integers (failed)")


def test_a_pristine_test_that_cannot_be_collected_pays_zero_and_says_why(local_backend: LocalBackend) -> None:
    """Reports carry a failure's exception line (`--tb=line`: no frame sources are built)."""
    broken = "import no_such_module_here\n\ndef test_x():\n    pass\n"

    async def run() -> GradeResult:
        sandbox = await local_backend.create("grader-test")
        try:
            await local_backend.write_files(sandbox, {"calc.py": PRISTINE, "test_broken.py": broken})
            return await grade_pytest(local_backend, sandbox, sources=["calc.py"],
                                      tests={"test_broken.py": broken}, expected_passed=1, timeout=20.0)
        finally:
            await local_backend.delete(sandbox)

    result = asyncio.run(run())
    assert_zero(result, "collection errors")
    assert "No module named 'no_such_module_here'" in result.detail, result.detail


def test_a_fix_still_pays_when_the_workspace_tests_were_sabotaged(local_backend: LocalBackend) -> None:
    assert grade(local_backend, {"calc.py": PRISTINE, "test_calc.py": "raise SystemExit(3)\n"}).reward == 1.0


def test_wrong_expected_count_pays_zero(local_backend: LocalBackend) -> None:
    assert_zero(grade(local_backend, {"calc.py": PRISTINE}, expected=N_TESTS + 1), "expected 17")


@pytest.mark.parametrize("tests", [
    "def test_x():\n    pass\n",
    TEST_SOURCE.replace("assert ", ""),
])
def test_edited_tests_are_ignored(local_backend: LocalBackend, tests: str) -> None:
    assert_zero(grade(local_backend, {"calc.py": BUGGY, "test_calc.py": tests}), "test_mean_integers")


def test_conftest_forcing_passes_is_ignored(local_backend: LocalBackend) -> None:
    assert_zero(grade(local_backend, {"calc.py": BUGGY, "conftest.py": FORCE_PASS_HOOK}), "test_mean_integers")


@pytest.mark.parametrize(("name", "text"), [
    ("pytest.ini", "[pytest]\naddopts = -k 'not mean' -p no:python\n"),
    ("tox.ini", "[pytest]\naddopts = --deselect test_calc.py::test_mean_integers\n"),
    ("setup.cfg", "[tool:pytest]\naddopts = -k 'not mean'\n"),
    ("pyproject.toml", "[tool.pytest.ini_options]\naddopts = '-k \"not mean\"'\n"),
])
def test_config_files_that_deselect_tests_are_ignored(local_backend: LocalBackend, name: str, text: str) -> None:
    assert_zero(grade(local_backend, {"calc.py": BUGGY, name: text}), "test_mean_integers")


@pytest.mark.parametrize("name", ["sitecustomize.py", "usercustomize.py", "fixed.pth"])
def test_startup_hooks_in_the_workspace_never_run(local_backend: LocalBackend, name: str) -> None:
    assert_zero(grade(local_backend, {"calc.py": BUGGY, name: INJECT_FIXED_CALC + "\n"}), "test_mean_integers")


@pytest.mark.parametrize("exit_call", ["import os; os._exit(0)", "import sys; sys.exit(0)",
                                       "raise KeyboardInterrupt"])
def test_exiting_at_import_pays_zero(local_backend: LocalBackend, exit_call: str) -> None:
    assert_zero(grade(local_backend, {"calc.py": f"{exit_call}\n{BUGGY}"}))


def test_printed_fake_verdicts_and_summaries_pay_zero(local_backend: LocalBackend) -> None:
    fake = (f"import os, sys\nfor _out in (sys.stdout, sys.__stdout__, sys.stderr):\n"
            f"    print('RLGRADE ' + {FAKE_VERDICT!r}, file=_out)\n"
            f"    print('{N_TESTS} passed in 0.01s', file=_out)\n"
            "try:\n    open(f'/proc/{os.getppid()}/fd/1', 'w').write('RLGRADE ' + " + repr(FAKE_VERDICT) + ")\n"
            "except OSError:\n    pass\nos._exit(0)\n")
    assert_zero(grade(local_backend, {"calc.py": fake + BUGGY}), "the worker running the code under test failed")


def test_patched_builtins_change_only_the_worker(local_backend: LocalBackend) -> None:
    patch = "import builtins\nbuiltins.abs = lambda x: 0\n"
    assert_zero(grade(local_backend, {"calc.py": BUGGY + patch}), "test_mean_integers (failed)")


def test_results_equal_to_everything_do_not_pass(local_backend: LocalBackend) -> None:
    cheat = ("class _Any(float):\n    def __eq__(self, other):\n        return True\n    __le__ = __ge__ = __eq__\n"
             "    def __sub__(self, other):\n        return 0.0\n"
             "def mean(xs):\n    return _Any(0)\n")
    assert_zero(grade(local_backend, {"calc.py": PRISTINE + cheat}), "test_mean_integers (failed)")


def test_patched_pytest_internals_change_only_the_worker(local_backend: LocalBackend) -> None:
    patch = "import _pytest.python\n_pytest.python.Function.runtest = lambda self: None\n"
    assert_zero(grade(local_backend, {"calc.py": BUGGY + patch}), "test_mean_integers (failed)")


def test_plugins_registered_at_import_find_no_pytest_to_join(local_backend: LocalBackend) -> None:
    patch = ("import gc\nfrom _pytest.config import Config\n" + FORCE_PASS_HOOK.replace("def pytest_", "def _hook_")
             + "class _Force:\n    pytest_runtest_makereport = staticmethod(_hook_runtest_makereport)\n"
             "for _obj in gc.get_objects():\n    if isinstance(_obj, Config):\n"
             "        _obj.pluginmanager.register(_Force(), 'force')\n")
    assert_zero(grade(local_backend, {"calc.py": BUGGY + patch}), "test_mean_integers (failed)")


def test_rewriting_the_grading_copy_of_the_tests_changes_nothing(local_backend: LocalBackend) -> None:
    patch = ("import os, sys\n_t = os.path.join(os.path.dirname(__file__), 'test_calc.py')\n"
             "os.chmod(_t, 0o644)\nopen(_t, 'w').write('def test_x():\\n    pass\\n')\n")
    assert_zero(grade(local_backend, {"calc.py": BUGGY + patch}), "test_calc.py::test_mean_integers")
    for target in ("glob.glob('/tmp/rlgrade-*/tests/test_calc.py')", "glob.glob('/tmp/rlgrade-*/tests/')"):
        rewrite = (f"import glob, os\nfor _t in {target}:\n    os.chmod(_t, 0o755)\n"
                   "    _p = _t if _t.endswith('.py') else os.path.join(_t, '__init__.py')\n"
                   "    open(_p, 'w').write('def test_x():\\n    pass\\n')\n")
        assert_zero(grade(local_backend, {"calc.py": BUGGY + rewrite}), "test_mean_integers (failed)")


def test_swapping_in_a_fake_test_module_is_not_possible(local_backend: LocalBackend) -> None:
    names = [line[4:].split("(")[0] for line in TEST_SOURCE.splitlines() if line.startswith("def test_")]
    fake_tests = "".join(f"def {name}():\n    pass\n" for name in names)
    patch = ("import sys, types\n_real = sys.modules['test_calc']\n_fake = types.ModuleType('test_calc')\n"
             f"_fake.__file__ = _real.__file__\nexec({fake_tests!r}, _fake.__dict__)\n"
             "sys.modules['test_calc'] = _fake\n")
    assert_zero(grade(local_backend, {"calc.py": BUGGY + patch}), "test_calc.py::test_mean_integers")


def test_an_infinite_loop_times_out(local_backend: LocalBackend) -> None:
    started = time.monotonic()
    result = grade(local_backend, {"calc.py": "while True:\n    pass\n"}, timeout=3)
    assert (result.reward, result.timed_out) == (0.0, True)
    assert time.monotonic() - started < 60  # the 3 s timeout ended it


def test_a_daemon_left_behind_does_not_hang_grading(local_backend: LocalBackend) -> None:
    daemon = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n    os._exit(0)\n"
    started = time.monotonic()
    assert grade(local_backend, {"calc.py": daemon + PRISTINE}).reward == 1.0
    assert time.monotonic() - started < 45  # not the daemon's 60 s


def test_missing_source_pays_zero_and_says_so(local_backend: LocalBackend) -> None:
    assert_zero(grade(local_backend, {"other.py": PRISTINE}), "source file calc.py is missing")


@pytest.mark.parametrize(("setup", "needle"), [
    ("ln -s real.py calc.py", "symlink"),
    ("mkdir calc.py", "not a regular file"),
    ("mkfifo calc.py", "not a regular file"),
])
def test_sources_that_are_not_regular_files_are_refused(local_backend: LocalBackend, setup: str, needle: str) -> None:
    assert_zero(grade(local_backend, {"real.py": PRISTINE}, setup=setup), needle)
