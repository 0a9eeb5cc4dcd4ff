"""The calc taskset: catalogue, variants, splits and the task itself (pure Python + real pytest)."""

from __future__ import annotations

import ast
import asyncio
import hashlib
import itertools
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from rl_daytona.backends.local import LocalBackend
from rl_daytona.tasks import TaskEnv, TaskError
from rl_daytona.tasks.calc import (
    BUGS, CALC_TASKSET, HELDOUT_VARIANTS, N_TESTS, N_VARIANTS, PROMPT, TEST_SOURCE, TRAIN_VARIANTS,
    bug_catalogue, buggy_source, calc_instance, calc_task, pristine_source, variant_bugs,
)
from rl_daytona.tasks.calc.bugs import apply_bugs


def failing_tests(calc_source: str) -> set[str]:
    """Names of the pristine tests that fail against `calc_source` (run in-process, fast)."""
    calc = types.ModuleType("calc")
    exec(compile(calc_source, "calc.py", "exec"), calc.__dict__)
    saved, sys.modules["calc"] = sys.modules.get("calc"), calc
    try:
        namespace: dict[str, object] = {}
        exec(compile(TEST_SOURCE, "test_calc.py", "exec"), namespace)
    finally:
        sys.modules.pop("calc")
        if saved is not None:
            sys.modules["calc"] = saved
    failing = set()
    for name, fn in namespace.items():
        if name.startswith("test_"):
            try:
                fn()  # type: ignore[operator]
            except Exception:  # noqa: BLE001 - any exception is a failing test
                failing.add(name)
    return failing


def function_names() -> list[str]:
    tree = ast.parse(pristine_source())
    return [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]


def pristine_test_names() -> list[str]:
    tree = ast.parse(TEST_SOURCE)
    return [node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test")]


def function_under_test(test_name: str) -> str:
    """The calc function a test is named after (longest matching name)."""
    matches = [f for f in function_names() if test_name == f"test_{f}" or test_name.startswith(f"test_{f}_")]
    assert matches, f"{test_name} names no calc function"
    return max(matches, key=len)


def test_pristine_calc_passes_every_test_in_process() -> None:
    assert failing_tests(pristine_source()) == set()


def test_pristine_calc_passes_under_real_pytest(tmp_path: Path) -> None:
    (tmp_path / "calc.py").write_text(pristine_source())
    (tmp_path / "test_calc.py").write_text(TEST_SOURCE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c",
                          str(tmp_path / "pytest.ini"), "test_calc.py"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{N_TESTS} passed" in out.stdout


def test_library_and_tests_have_the_promised_size() -> None:
    assert len(function_names()) >= 8
    assert len(pristine_test_names()) == N_TESTS >= 10


def test_every_test_names_a_function_and_every_function_is_tested() -> None:
    tested = {function_under_test(name) for name in pristine_test_names()}
    assert tested == set(function_names())


def test_every_function_has_a_bug_and_bug_ids_name_their_function() -> None:
    assert {bug.function for bug in BUGS} == set(function_names())
    assert len(bug_catalogue()) == len(BUGS)


def test_every_bug_is_one_existing_line_changed() -> None:
    lines = pristine_source().split("\n")
    for bug in BUGS:
        assert lines.count(bug.old) == 1, bug.bug_id
        assert bug.new != bug.old and "\n" not in bug.new, bug.bug_id


@pytest.mark.parametrize("bug_id", [bug.bug_id for bug in BUGS])
def test_each_bug_alone_fails_a_test_named_after_its_function(bug_id: str) -> None:
    failing = failing_tests(apply_bugs(pristine_source(), (bug_id,)))
    assert failing, f"{bug_id} breaks no test"
    assert bug_id.split(".")[0] in {function_under_test(name) for name in failing}


def test_bugs_of_different_functions_apply_together_cleanly() -> None:
    by_function: dict[str, list[str]] = {}
    for bug in BUGS:
        by_function.setdefault(bug.function, []).append(bug.bug_id)
    for combo in itertools.product(*by_function.values()):
        source = apply_bugs(pristine_source(), combo)
        assert all(bug_catalogue()[b].new in source.split("\n") for b in combo)


def test_variants_break_one_to_three_distinct_functions() -> None:
    assert N_VARIANTS >= 24
    seen = set()
    for v in range(N_VARIANTS):
        bugs = variant_bugs(v)
        assert 1 <= len(bugs) <= 3
        assert len({b.split(".")[0] for b in bugs}) == len(bugs)
        assert frozenset(bugs) not in seen
        seen.add(frozenset(bugs))


@pytest.mark.parametrize("variant", range(N_VARIANTS))
def test_every_variant_fails_some_test(variant: int) -> None:
    assert failing_tests(buggy_source(variant))


def test_variants_are_the_same_in_another_process() -> None:
    digest = hashlib.sha256("".join(buggy_source(v) for v in range(N_VARIANTS)).encode()).hexdigest()
    code = ("import hashlib; from rl_daytona.tasks.calc import buggy_source, N_VARIANTS; print(hashlib.sha256("
            "''.join(buggy_source(v) for v in range(N_VARIANTS)).encode()).hexdigest())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "12345"}, timeout=60)
    assert out.stdout.strip() == digest


def test_splits_cover_all_variants_disjointly() -> None:
    assert set(TRAIN_VARIANTS) | set(HELDOUT_VARIANTS) == set(range(N_VARIANTS))
    assert not set(TRAIN_VARIANTS) & set(HELDOUT_VARIANTS)
    assert len(TRAIN_VARIANTS) >= 3 * len(HELDOUT_VARIANTS) > 0


def test_heldout_combines_bugs_that_train_never_combines() -> None:
    train_bugs = {b for v in TRAIN_VARIANTS for b in variant_bugs(v)}
    train_pairs = {frozenset(p) for v in TRAIN_VARIANTS for p in itertools.combinations(variant_bugs(v), 2)}
    for v in HELDOUT_VARIANTS:
        bugs = variant_bugs(v)
        assert len(bugs) >= 2 and set(bugs) <= train_bugs
        assert not {frozenset(p) for p in itertools.combinations(bugs, 2)} & train_pairs


def test_every_bug_is_a_train_variant_on_its_own() -> None:
    singles = [variant_bugs(v)[0] for v in TRAIN_VARIANTS if len(variant_bugs(v)) == 1]
    assert sorted(singles) == sorted(b.bug_id for b in BUGS)


def test_taskset_has_every_variant_and_both_splits() -> None:
    assert CALC_TASKSET.name == "calc"
    assert [i.instance_id for i in CALC_TASKSET.split("all")] == [f"calc[variant={v}]" for v in range(N_VARIANTS)]
    assert [i.variant for i in CALC_TASKSET.split("heldout")] == [str(v) for v in HELDOUT_VARIANTS]
    assert len(CALC_TASKSET.split("train")) == len(TRAIN_VARIANTS)
    with pytest.raises(TaskError, match="no split 'validation'"):
        CALC_TASKSET.split("validation")


@pytest.mark.parametrize("variant", [999, -1, N_VARIANTS, "3", True, None])
def test_unknown_variants_fail_early_and_clearly(variant: object) -> None:
    with pytest.raises(TaskError, match="calc has no variant"):
        calc_instance(variant)  # type: ignore[arg-type]
    with pytest.raises(TaskError, match="calc has no variant"):
        variant_bugs(variant)  # type: ignore[arg-type]


def test_an_unvalidated_unknown_variant_fails_when_the_task_starts(local_backend: LocalBackend) -> None:
    async def start() -> None:
        sandbox = await local_backend.create("calc-test")
        try:
            await calc_task(variant=999).start(TaskEnv(local_backend, sandbox)).prompt()
        finally:
            await local_backend.delete(sandbox)

    with pytest.raises(TaskError, match="calc has no variant 999"):
        asyncio.run(start())


def test_calc_task_seeds_prompts_and_grades_end_to_end(local_backend: LocalBackend) -> None:
    async def attempt(fix: bool) -> tuple[str, bytes, float]:
        sandbox = await local_backend.create("calc-test")
        env = TaskEnv(local_backend, sandbox)
        run = calc_instance(5).start(env)
        try:
            prompt = await run.prompt()
            seeded = await env.read_file("calc.py")
            if fix:
                await env.write_files({"calc.py": pristine_source()})
            return prompt, seeded, (await run.reward()).reward
        finally:
            await local_backend.delete(sandbox)

    prompt, seeded, reward = asyncio.run(attempt(fix=True))
    assert prompt == PROMPT and seeded.decode() == buggy_source(5) and reward == 1.0
    assert asyncio.run(attempt(fix=False))[2] == 0.0
