"""A user task written only through the public API, run end to end on the real LocalBackend."""

from __future__ import annotations

import asyncio

import pytest

from rl_daytona.backends.local import LocalBackend
from rl_daytona.tasks import GradeResult, TaskEnv, TaskInstance, get_taskset
from tests.tasks.example_task import BUGS, EXAMPLE_TASKSET, FIXES, PROMPT, SOURCE, buggy_wordcount


def attempt(backend: LocalBackend, instance: TaskInstance, command: str | None) -> tuple[str, bytes, GradeResult]:
    """Seed the task, optionally run one shell command as the 'agent', then grade."""
    async def run() -> tuple[str, bytes, GradeResult]:
        sandbox = await backend.create("example-task")
        env = TaskEnv(backend, sandbox)
        task_run = instance.start(env)
        try:
            prompt = await task_run.prompt()
            seeded = await env.read_file("wordcount.py")
            if command:
                assert (await env.exec(command)).exit_code == 0
            return prompt, seeded, await task_run.reward()
        finally:
            await backend.delete(sandbox)

    return asyncio.run(run())


def test_taskset_loads_by_import_spec() -> None:
    taskset = get_taskset("tests.tasks.example_task:EXAMPLE_TASKSET")
    assert taskset is EXAMPLE_TASKSET and taskset.name == "wordcount"
    assert [i.variant for i in taskset.split("train")] == ["0", "1"]
    assert [i.variant for i in taskset.split("heldout")] == ["2"]


@pytest.mark.parametrize("variant", sorted(BUGS))
def test_each_variant_seeds_a_real_bug(variant: int) -> None:
    good, bad = BUGS[variant]
    assert buggy_wordcount(variant) == SOURCE.replace(good, bad) != SOURCE


@pytest.mark.parametrize("variant", sorted(BUGS))
def test_sed_fix_pays_one(local_backend: LocalBackend, variant: int) -> None:
    prompt, seeded, result = attempt(local_backend, EXAMPLE_TASKSET.instances[variant], FIXES[variant])
    assert prompt == PROMPT and seeded.decode() == buggy_wordcount(variant)
    assert (result.reward, result.passed, result.expected) == (1.0, 3, 3), result.detail


def test_unfixed_pays_zero(local_backend: LocalBackend) -> None:
    result = attempt(local_backend, EXAMPLE_TASKSET.instances[0], None)[2]
    assert result.reward == 0.0 and "test_count_words (failed)" in result.detail


def test_the_wrong_fix_pays_zero(local_backend: LocalBackend) -> None:
    assert attempt(local_backend, EXAMPLE_TASKSET.instances[0], FIXES[2])[2].reward == 0.0
