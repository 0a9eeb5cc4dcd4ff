"""`rl-daytona tasks check`: prove each task instance sound in real sandboxes before training on it.

Per instance, two attempts, each in a fresh sandbox of the given backend: (1) seed, list the
workspace, grade it untouched; (2) seed again, list the workspace, apply the task's reference
solution when it gives one (see `tasks.api.Solution`), grade. It is broken when seeding or
grading raises, when the untouched workspace pays 1.0 (an agent is paid for doing nothing), when
the reference solution pays less than 1.0 (no attempt can ever be paid: e.g. `expected_passed`
one more than the tests hold), or when the two seedings differ (prompt or files).

Invariant: every instance gets exactly one `InstanceCheck` (a sandbox failure is its `error`,
never a verdict of broken); every sandbox it created is deleted, whether it ends well or not.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from rl_daytona.backends.base import Backend, SandboxError, SandboxHandle
from rl_daytona.tasks.api import GradeResult, Solution, TaskEnv, TaskInstance
from rl_daytona.tasks.probe import MeteredBackend, listing_diff, workspace_listing

LABELS = {"rl-daytona/purpose": "tasks-check"}


class TaskBroken(Exception):
    """The task's own code failed (its seeding, grading or solution), with one line saying how."""


@dataclass(frozen=True)
class InstanceCheck:
    """One instance's findings. Rewards are None where that step did not run."""

    instance_id: str
    seed_seconds: float | None = None
    untouched: GradeResult | None = None
    reference: GradeResult | None = None
    has_reference: bool = False
    same_seed: bool | None = None
    grade_seconds: float | None = None
    grade_cpu_seconds: float | None = None
    problems: tuple[str, ...] = ()
    error: str = ""

    @property
    def verdict(self) -> str:
        """'broken', 'error' (the sandbox failed, not the task), 'ok', or 'ok, no reference'."""
        if self.problems:
            return "broken"
        if self.error:
            return "error"
        return "ok" if self.has_reference else "ok, no reference"


@dataclass(frozen=True)
class _Attempt:
    prompt: str
    listing: dict[str, str]
    seed_seconds: float
    grade: GradeResult
    grade_seconds: float
    grade_cpu_seconds: float | None


@dataclass
class _Findings:
    instance_id: str
    attempts: list[_Attempt] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    error: str = ""


async def check_instance(backend: Backend, instance: TaskInstance, run_id: str,
                         deadline: float = 300.0) -> InstanceCheck:
    """Seed, grade untouched, seed again, apply the reference solution, grade (see the module doc)."""
    found = _Findings(instance.instance_id)
    solution: Solution | None = None
    try:
        solution = await _task_step(asyncio.to_thread(instance.solution), "its solution function")
        for fix in (None, solution):
            async with asyncio.timeout(deadline):
                found.attempts.append(await _attempt(backend, instance, run_id, fix))
    except TaskBroken as exc:
        found.problems.append(str(exc))
    except TimeoutError:
        found.problems.append(f"an attempt took over {deadline:.0f}s (seeding, grading or the solution hangs)")
    except (SandboxError, OSError) as exc:
        found.error = f"sandbox: {type(exc).__name__}: {exc}"[:300]
    return _verdict(found, has_reference=solution is not None)


async def _attempt(backend: Backend, instance: TaskInstance, run_id: str, solution: Solution | None) -> _Attempt:
    metered = MeteredBackend(backend)
    sandbox = await backend.create(run_id, LABELS)
    run = instance.start(TaskEnv(metered, sandbox))  # type: ignore[arg-type]
    try:
        started = time.monotonic()
        prompt = await _task_step(run.prompt(), "seeding")
        seed_seconds = time.monotonic() - started
        listing = await workspace_listing(backend, sandbox)
        if solution is not None:
            await apply_solution(backend, sandbox, solution)
        metered.metering, started = True, time.monotonic()
        grade = await _task_step(run.reward(), "grading")
        cpu = None if metered.unmetered else metered.cpu_seconds
        return _Attempt(prompt, listing, seed_seconds, grade, time.monotonic() - started, cpu)
    finally:
        await asyncio.shield(_quietly(run.close()))
        await asyncio.shield(backend.delete(sandbox))


async def apply_solution(backend: Backend, sandbox: SandboxHandle, solution: Solution) -> None:
    """Write the solution's files over the workspace, then run its commands in order."""
    if solution.files:
        await backend.write_files(sandbox, solution.files)
    for command in solution.commands:
        result = await backend.exec(sandbox, command, timeout=120.0)
        if result.exit_code != 0:
            tail = " ".join(result.output[-200:].split())
            raise TaskBroken(f"reference command {command!r} failed (exit {result.exit_code})"
                             + (f": {tail}" if tail else ""))


async def _task_step(step: Awaitable[Any], what: str) -> Any:
    """Await the task's own code; its failure (not the sandbox's) becomes `TaskBroken`."""
    try:
        return await step
    except (SandboxError, OSError, TimeoutError, asyncio.CancelledError):
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the task's code raises is a finding
        raise TaskBroken(" ".join(f"{what} raised {type(exc).__name__}: {exc}".split())[:400]) from None


async def _quietly(step: Awaitable[Any]) -> None:
    try:
        await step
    except Exception:  # noqa: BLE001 - closing a finished generator again is no finding
        pass


def _verdict(found: _Findings, has_reference: bool) -> InstanceCheck:
    problems = list(found.problems)
    attempts = found.attempts
    first, second = (attempts + [None, None])[:2]
    if first is not None and first.grade.reward >= 1.0:
        problems.insert(0, "pays 1.0 untouched: the seeded workspace already passes its grader")
    if second is not None and has_reference and second.grade.reward < 1.0:
        problems.append(f"reference solution pays {second.grade.reward:.1f}, so no attempt can: "
                        f"{second.grade.detail[:300]}")
    reseed = _reseed_problems(first, second) if first is not None and second is not None else None
    problems += reseed or []
    cpus = [a.grade_cpu_seconds for a in attempts]
    return InstanceCheck(
        instance_id=found.instance_id, seed_seconds=first.seed_seconds if first else None,
        untouched=first.grade if first else None, reference=second.grade if second and has_reference else None,
        has_reference=has_reference, same_seed=None if reseed is None else not reseed,
        grade_seconds=max((a.grade_seconds for a in attempts), default=None),
        grade_cpu_seconds=max(cpus) if cpus and None not in cpus else None,  # type: ignore[type-var]
        problems=tuple(problems), error=found.error)


def _reseed_problems(first: _Attempt, second: _Attempt) -> list[str]:
    out = []
    if first.prompt != second.prompt:
        out.append("seeding twice gives different prompts")
    differ = listing_diff(first.listing, second.listing)
    if differ:
        more = f" (+{len(differ) - 5} more)" if len(differ) > 5 else ""
        out.append(f"seeding twice gives different files: {', '.join(differ[:5])}{more}")
    return out


async def check_all(backend: Backend, instances: list[TaskInstance], run_id: str, concurrency: int,
                    on_done: Callable[[InstanceCheck], None] = lambda _: None,
                    deadline: float = 300.0) -> list[InstanceCheck]:
    """`check_instance` for each, `concurrency` at once, in instance order; then any sandbox of
    `run_id` still there (an interrupted check) is deleted."""
    gate = asyncio.Semaphore(concurrency)

    async def one(instance: TaskInstance) -> InstanceCheck:
        async with gate:
            result = await check_instance(backend, instance, run_id, deadline)
        on_done(result)
        return result

    try:
        return list(await asyncio.gather(*(one(i) for i in instances)))
    finally:
        for sandbox in await asyncio.shield(backend.list_sandboxes(run_id)):
            await asyncio.shield(backend.delete(sandbox))
