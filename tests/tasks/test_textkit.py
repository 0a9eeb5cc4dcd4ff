"""The textkit taskset: nested layout, catalogue, splits, and real grading in a sandbox."""

from __future__ import annotations

import asyncio
import itertools
import sys
import types

import pytest

from rl_daytona.backends.local import LocalBackend
from rl_daytona.tasks import TaskEnv, TaskError, get_taskset
from rl_daytona.tasks.textkit import BUGS, N_TESTS, PROMPT, TESTS, TEXTKIT_TASKSET, pristine_files, seeded_files
from rl_daytona.tasks.textkit.bugs import HELDOUT_VARIANTS, TRAIN_VARIANTS, VARIANT_BUGS, variant_bugs


def failing_tests(files: dict[str, str]) -> set[str]:
    """Names of the pristine tests that fail against `files` (run in-process, fast)."""
    modules = {"textkit": types.ModuleType("textkit")}
    modules["textkit"].__path__ = []  # type: ignore[attr-defined]
    for path in ("textkit/strings.py", "textkit/seqs.py"):
        name = path[:-3].replace("/", ".")
        modules[name] = types.ModuleType(name)
        exec(compile(files[path], path, "exec"), modules[name].__dict__)
    saved = {k: sys.modules.get(k) for k in modules}
    sys.modules.update(modules)
    try:
        namespaces = []
        for path, text in TESTS.items():
            namespace: dict[str, object] = {}
            exec(compile(text, path, "exec"), namespace)
            namespaces.append(namespace)
    finally:
        for k, v in saved.items():
            sys.modules.pop(k) if v is None else sys.modules.__setitem__(k, v)
    failing = set()
    for namespace in namespaces:
        for name, fn in namespace.items():
            if name.startswith("test_"):
                try:
                    fn()  # type: ignore[operator]
                except Exception:  # noqa: BLE001 - any exception is a failing test
                    failing.add(name)
    return failing


def test_pristine_sources_pass_every_test() -> None:
    assert failing_tests(pristine_files()) == set()
    assert sum(text.count("\ndef test_") for text in TESTS.values()) == N_TESTS


@pytest.mark.parametrize("bug", BUGS, ids=lambda b: b.bug_id)
def test_each_bug_alone_fails_a_test_named_after_its_function(bug) -> None:  # type: ignore[no-untyped-def]
    files = pristine_files()
    assert files[bug.path].count(bug.old + "\n") == 1
    files[bug.path] = files[bug.path].replace(bug.old + "\n", bug.new + "\n")
    function = bug.bug_id.split(".")[1]
    failing = failing_tests(files)
    assert failing and all(name.startswith(f"test_{function}_") for name in failing)


@pytest.mark.parametrize("variant", range(len(VARIANT_BUGS)))
def test_every_variant_applies_cleanly_and_fails(variant: int) -> None:
    functions = [b.rsplit(".", 1)[0] for b in variant_bugs(variant)]
    assert 1 <= len(functions) == len(set(functions)) <= 3
    assert failing_tests(seeded_files(variant))


def test_heldout_combines_bugs_train_never_combines() -> None:
    assert set(TRAIN_VARIANTS) | set(HELDOUT_VARIANTS) == set(range(len(VARIANT_BUGS)))
    train_pairs = {p for v in TRAIN_VARIANTS for p in itertools.combinations(VARIANT_BUGS[v], 2)}
    train_bugs = {b for v in TRAIN_VARIANTS for b in VARIANT_BUGS[v]}
    for v in HELDOUT_VARIANTS:
        assert not set(itertools.combinations(VARIANT_BUGS[v], 2)) & train_pairs
        assert set(VARIANT_BUGS[v]) <= train_bugs


def test_every_bug_is_a_train_variant_on_its_own() -> None:
    singles = [VARIANT_BUGS[v][0] for v in TRAIN_VARIANTS if len(VARIANT_BUGS[v]) == 1]
    assert sorted(singles) == sorted(b.bug_id for b in BUGS)


def test_registered_as_a_builtin_with_both_splits() -> None:
    taskset = get_taskset("textkit")
    assert taskset is TEXTKIT_TASKSET
    assert len(taskset.split("train")) == 30 and len(taskset.split("heldout")) == 8
    with pytest.raises(TaskError, match="no variant"):
        variant_bugs(99)


def test_fixed_workspace_pays_one_and_seeded_pays_zero(local_backend: LocalBackend) -> None:
    async def attempt(fix: bool) -> tuple[str, bytes, float]:
        sandbox = await local_backend.create("textkit-test")
        env = TaskEnv(local_backend, sandbox)
        run = TEXTKIT_TASKSET.split("heldout")[0].start(env)
        try:
            prompt = await run.prompt()
            seeded = await env.read_file("textkit/seqs.py")
            if fix:
                await env.write_files(pristine_files())
            return prompt, seeded, (await run.reward()).reward
        finally:
            await local_backend.delete(sandbox)

    prompt, seeded, reward = asyncio.run(attempt(fix=True))
    assert prompt == PROMPT and seeded.decode() == seeded_files(HELDOUT_VARIANTS[0])["textkit/seqs.py"]
    assert reward == 1.0
    assert asyncio.run(attempt(fix=False))[2] == 0.0
