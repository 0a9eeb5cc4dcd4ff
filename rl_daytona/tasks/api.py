"""The public task API: write a task once as an async generator, run it many times.

A task is an async generator function taking a `TaskEnv` and keyword arguments:

    @task(name="calc")
    async def calc(env: TaskEnv, *, variant: int):
        await env.write_files(seeded_files(variant))      # seed the workspace
        yield "Fix the bugs in calc.py."                  # the prompt; the agent works now
        result = await env.grade_pytest(sources=["calc.py"], tests=TESTS, expected_passed=12)
        yield result                                      # the reward (a float or a GradeResult)

A task may also give a reference solution (`@task(name=..., solution=fix)`, `fix(**kwargs)`
returning a `Solution`: files written over the seeded workspace and shell commands run there),
which `rl-daytona tasks check` applies to prove the grader can pay 1.0.

Invariant: a `TaskInstance` is a frozen, picklable (task, kwargs) pair with a stable id, so
it crosses actor boundaries as data; every attempt re-runs the generator from the start, so
the workspace is seeded fresh on every attempt. A `Taskset` holds each instance id once and
its splits name only instances it holds.
"""

from __future__ import annotations

import difflib
import inspect
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, AsyncGenerator, Callable, Mapping

from rl_daytona.backends.base import WORKSPACE, Backend, ExecResult, SandboxHandle
from rl_daytona.tasks.grader import grade_pytest as _grade_pytest
from rl_daytona.tasks.verdict import GradeResult, TaskError

TaskFn = Callable[..., AsyncGenerator[Any, Any]]


@dataclass(frozen=True)
class Solution:
    """A reference fix of one task instance (optional; `rl-daytona tasks check` uses it).

    `files` are written over the seeded workspace, then each of `commands` runs there with
    `sh -c` (e.g. a `sed -i` edit); afterwards a correct task's grader pays 1.0."""

    files: Mapping[str, str | bytes] = field(default_factory=dict)
    commands: tuple[str, ...] = ()


SolutionFn = Callable[..., "Solution | Mapping[str, str | bytes]"]


@dataclass(frozen=True)
class Task:
    """A named async-generator task function, with an optional reference solution function
    taking the same keyword arguments and returning a `Solution` (or just its files)."""

    name: str
    fn: TaskFn
    description: str = ""
    solution: SolutionFn | None = None

    def __call__(self, **kwargs: Any) -> "TaskInstance":
        """Bind keyword arguments: `calc(variant=3)` is one task instance."""
        params = inspect.signature(self.fn).parameters
        names = list(params)[1:]
        takes = f"it takes: {', '.join(names)}" if names else "it takes no keyword arguments"
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            for key in kwargs:
                if key not in names:
                    close = difflib.get_close_matches(key, names, n=1)
                    hint = f"; did you mean {close[0]!r}?" if close else ""
                    raise TaskError(f"task {self.name!r}: unexpected keyword argument {key!r}{hint} ({takes})")
        try:
            inspect.signature(self.fn).bind(None, **kwargs)
        except TypeError as exc:
            raise TaskError(f"task {self.name!r}: {exc} ({takes})") from None
        return TaskInstance(task=self, kwargs=tuple(sorted(kwargs.items())))


def task(name: str | None = None, description: str = "", solution: SolutionFn | None = None) -> Callable[[TaskFn], Task]:
    """Decorator turning an async generator function into a `Task` (see `Solution`)."""
    if solution is not None and not callable(solution):
        raise TaskError(f"task solution= must be a function of the task's keyword arguments, got {solution!r}")

    def wrap(fn: TaskFn) -> Task:
        if not inspect.isasyncgenfunction(fn):
            raise TaskError(f"task {fn.__name__!r} must be an async generator function (use yield)")
        return Task(name=name or fn.__name__, fn=fn, description=description or (fn.__doc__ or ""),
                    solution=solution)

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

    def solution(self) -> Solution | None:
        """The task's reference solution for these arguments (None when it gives none)."""
        if self.task.solution is None:
            return None
        value = self.task.solution(**dict(self.kwargs))
        if isinstance(value, Mapping):
            value = Solution(files=value)
        if not isinstance(value, Solution):
            raise TaskError(f"task {self.task.name!r}: its solution returned {type(value).__name__}, "
                            "not a Solution or a mapping of files")
        return value

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
    """A name, its task instances, and named splits (lists of instance ids).

    Refused at construction (a `TaskError` naming them): anything in `instances` that is not a
    `TaskInstance`, two instances with the same id, a split that is not a list of ids, a split
    naming an instance the taskset does not hold, and a split called 'all' (it means every one)."""

    name: str
    instances: tuple[TaskInstance, ...]
    splits: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "instances", _checked_instances(self.name, self.instances))
        object.__setattr__(self, "splits", _checked_splits(self.name, self.splits, self.instances))

    def split(self, split: str | None) -> list[TaskInstance]:
        """The instances of a split (all of them for None or 'all')."""
        if split in (None, "all"):
            return list(self.instances)
        if split not in self.splits:
            known = ", ".join(sorted(self.splits)) or "none"
            raise TaskError(f"taskset {self.name!r} has no split {split!r} (known: {known})")
        by_id = {inst.instance_id: inst for inst in self.instances}
        return [by_id[i] for i in self.splits[split]]

    def get(self, instance_id: str) -> TaskInstance:
        for inst in self.instances:
            if inst.instance_id == instance_id:
                return inst
        raise TaskError(f"taskset {self.name!r} has no task {instance_id!r}")


def _checked_instances(name: str, instances: Any) -> tuple[TaskInstance, ...]:
    if isinstance(instances, (str, bytes, Mapping)) or not hasattr(instances, "__iter__"):
        raise TaskError(f"taskset {name!r}: instances must be a tuple of task instances, "
                        f"got {type(instances).__name__}")
    out = tuple(instances)
    for i, inst in enumerate(out):
        if not isinstance(inst, TaskInstance):
            call = " (call the task: my_task(variant=0))" if isinstance(inst, Task) else ""
            raise TaskError(f"taskset {name!r}: instances[{i}] is a {type(inst).__name__}, not a task "
                            f"instance{call}")
    counts = Counter(inst.instance_id for inst in out)
    twice = [f"{i!r} (x{n})" for i, n in counts.items() if n > 1]
    if twice:
        raise TaskError(f"taskset {name!r} has duplicate instances: {', '.join(twice[:5])}; "
                        "give each instance different arguments")
    return out


def _checked_splits(name: str, splits: Any, instances: tuple[TaskInstance, ...]) -> dict[str, tuple[str, ...]]:
    if not isinstance(splits, Mapping):
        raise TaskError(f"taskset {name!r}: splits must be a dict of name -> instance ids, got {type(splits).__name__}")
    known = {inst.instance_id for inst in instances}
    out: dict[str, tuple[str, ...]] = {}
    for split, ids in splits.items():
        if split == "all":
            raise TaskError(f"taskset {name!r}: a split may not be called 'all' (it means every instance)")
        if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
            raise TaskError(f"taskset {name!r} split {split!r} must be a tuple of instance ids, "
                            f"got {type(ids).__name__}")
        out[split] = tuple(i.instance_id if isinstance(i, TaskInstance) else i for i in ids)
        unknown = [i for i in out[split] if i not in known]
        if unknown:
            more = f" (+{len(unknown) - 5} more)" if len(unknown) > 5 else ""
            raise TaskError(f"taskset {name!r} split {split!r} names tasks it does not have: "
                            f"{', '.join(map(repr, unknown[:5]))}{more}")
    return out


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
        return await _grade_pytest(
            self.backend, self.sandbox, sources=sources, tests=tests,
            expected_passed=expected_passed, timeout=timeout,
        )
