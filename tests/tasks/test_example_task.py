"""The public task API end to end on the real local backend, with a task that is not calc."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rl_daytona.backends.local import LocalBackend
from rl_daytona.tasks import TaskEnv, TaskError, get_taskset, task
from tests.tasks.example_task import EXAMPLE_TASKSET, FIX_COMMAND

SPEC = "tests.tasks.example_task:EXAMPLE_TASKSET"


def _attempt(tmp_path: Path, command: str | None) -> float:
    async def go() -> float:
        backend = LocalBackend(tmp_path / "sb")
        sandbox = await backend.create("example")
        run = EXAMPLE_TASKSET.split("train")[0].start(TaskEnv(backend, sandbox))
        prompt = await run.prompt()
        assert "wordcount.py" in prompt
        if command:
            await backend.exec(sandbox, command)
        grade = await run.reward()
        await backend.delete(sandbox)
        return grade.reward

    return asyncio.run(go())


def test_fixed_attempt_earns_one(tmp_path: Path) -> None:
    assert _attempt(tmp_path, FIX_COMMAND) == 1.0


def test_unfixed_attempt_earns_zero(tmp_path: Path) -> None:
    assert _attempt(tmp_path, None) == 0.0


def test_every_attempt_is_seeded_fresh(tmp_path: Path) -> None:
    assert _attempt(tmp_path, FIX_COMMAND) == 1.0
    assert _attempt(tmp_path, None) == 0.0  # the earlier fix does not leak into a new attempt


def test_registry_resolves_import_specs_and_rejects_bad_ones() -> None:
    assert get_taskset(SPEC) is EXAMPLE_TASKSET
    assert [i.instance_id for i in EXAMPLE_TASKSET.split("heldout")] == ["wordcount[variant=1]"]
    with pytest.raises(TaskError, match="cannot import"):
        get_taskset("no.such.module:X")
    with pytest.raises(TaskError, match="not a Taskset"):
        get_taskset("tests.tasks.example_task:FIX_COMMAND")
    with pytest.raises(TaskError, match="no split"):
        EXAMPLE_TASKSET.split("validation")


def test_task_api_rejects_non_generators_and_bad_kwargs() -> None:
    with pytest.raises(TaskError, match="async generator"):
        task()(lambda env: None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        EXAMPLE_TASKSET.instances[0].task(colour="red")
