"""The public task API: write a task once as an async generator, run it many times.

A task is an async generator function taking a `TaskEnv` and keyword arguments:

    @task(name="calc")
    async def calc(env: TaskEnv, *, variant: int):
        await env.write_files(seeded_files(variant))      # seed the workspace
        yield "Fix the bugs in calc.py."                  # the prompt; the agent works now
        result = await env.grade_pytest(sources=["calc.py"], tests=TESTS, expected_passed=12)
        yield result                                      # the reward (a float or a GradeResult)

Invariant: a `TaskInstance` is a frozen, picklable (task, kwargs) pair with a stable id, so
it crosses actor boundaries as data; every attempt re-runs the generator from the start, so
the workspace is seeded fresh on every attempt.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, AsyncGenerator, Callable, Mapping

from rl_daytona.backends.base import WORKSPACE, Backend, ExecResult, SandboxHandle

TaskFn = Callable[..., AsyncGenerator[Any, Any]]


class TaskError(ValueError):
    """A task, taskset, split or variant that does not exist or is malformed."""


@dataclass(frozen=True)
class GradeResult:
    """The grader's verdict. `reward` is 1.0 only when every expected test passed."""

    reward: float
    passed: int
    expected: int
    failed: int = 0
    timed_out: bool = False
    detail: str = ""


@dataclass(frozen=True)
class Task:
    """A named async-generator task function."""

    name: str
    fn: TaskFn
    description: str = ""

    def __call__(self, **kwargs: Any) -> "TaskInstance":
        """Bind keyword arguments: `calc(variant=3)` is one task instance."""
        inspect.signature(self.fn).bind(None, **kwargs)
        return TaskInstance(task=self, kwargs=tuple(sorted(kwargs.items())))


def task(name: str | None = None, description: str = "") -> Callable[[TaskFn], Task]:
    """Decorator turning an async generator function into a `Task`."""

    def wrap(fn: TaskFn) -> Task:
        if not inspect.isasyncgenfunction(fn):
            raise TaskError(f"task {fn.__name__!r} must be an async generator function (use yield)")
        return Task(name=name or fn.__name__, fn=fn, description=description or (fn.__doc__ or ""))

    return wrap


@dataclass(frozen=True)
class TaskInstance:
    """One task with its keyword arguments bound."""

    task: Task
    kwargs: tuple[tuple[str, Any], ...] = ()

    @property
    def instance_id(self) -> str:
        args = ",".join(f"{k}={v}" for k, v in self.kwargs)
        return f"{self.task.name}[{args}]" if args else self.task.name

    @property
    def variant(self) -> str:
        """The `variant` kwarg as text ('' when the task takes none)."""
        return str(dict(self.kwargs).get("variant", ""))

    def start(self, env: "TaskEnv") -> "TaskRun":
        return TaskRun(self.task.fn(env, **dict(self.kwargs)))


class TaskRun:
    """Drives one attempt's generator: `prompt()` seeds and returns the prompt, `reward()` grades."""

    def __init__(self, gen: AsyncGenerator[Any, Any]) -> None:
        self._gen = gen

    async def prompt(self) -> str:
        first = await self._gen.__anext__()
        if not isinstance(first, str):
            raise TaskError(f"a task's first yield must be the prompt text, got {type(first).__name__}")
        return first

    async def reward(self, answer: str | None = None) -> GradeResult:
        value = await self._gen.asend(answer)
        await self._gen.aclose()
        if isinstance(value, GradeResult):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return GradeResult(reward=float(value), passed=0, expected=0)
        raise TaskError(f"a task's second yield must be a reward (float or GradeResult), got {value!r}")

    async def close(self) -> None:
        await self._gen.aclose()


@dataclass(frozen=True)
class Taskset:
    """A name, its task instances, and named splits (lists of instance ids)."""

    name: str
    instances: tuple[TaskInstance, ...]
    splits: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def split(self, split: str | None) -> list[TaskInstance]:
        """The instances of a split (all of them for None or 'all')."""
        if split in (None, "all"):
            return list(self.instances)
        if split not in self.splits:
            known = ", ".join(sorted(self.splits)) or "none"
            raise TaskError(f"taskset {self.name!r} has no split {split!r} (known: {known})")
        by_id = {inst.instance_id: inst for inst in self.instances}
        unknown = [i for i in self.splits[split] if i not in by_id]
        if unknown:
            raise TaskError(f"taskset {self.name!r} split {split!r} names tasks it does not have: "
                            f"{', '.join(map(repr, unknown[:5]))}")
        return [by_id[i] for i in self.splits[split]]

    def get(self, instance_id: str) -> TaskInstance:
        for inst in self.instances:
            if inst.instance_id == instance_id:
                return inst
        raise TaskError(f"taskset {self.name!r} has no task {instance_id!r}")


class TaskEnv:
    """What a task function sees: its sandbox's files and shell, and the grader."""

    def __init__(self, backend: Backend, sandbox: SandboxHandle, exec_timeout: float = 60.0) -> None:
        self.backend = backend
        self.sandbox = sandbox
        self.exec_timeout = exec_timeout

    async def write_files(self, files: Mapping[str, bytes | str]) -> None:
        await self.backend.write_files(self.sandbox, files)

    async def read_file(self, path: str) -> bytes:
        return await self.backend.read_file(self.sandbox, path)

    async def exec(self, command: str, timeout: float | None = None, cwd: str = WORKSPACE) -> ExecResult:
        return await self.backend.exec(self.sandbox, command, timeout=timeout or self.exec_timeout, cwd=cwd)

    async def grade_pytest(
        self,
        *,
        sources: list[str],
        tests: Mapping[str, str],
        expected_passed: int,
        timeout: float = 60.0,
    ) -> GradeResult:
        """Run pristine `tests` against the agent's `sources` in a fresh grading folder."""
        from rl_daytona.tasks.grader import grade_pytest

        return await grade_pytest(
            self.backend, self.sandbox, sources=sources, tests=tests,
            expected_passed=expected_passed, timeout=timeout,
        )
