"""RolloutActor: many rollouts at once as asyncio tasks inside one async actor.

Invariant: every request returns exactly one typed `Rollout`; a failure becomes a status
(infra_error / agent_error / timeout), never an exception and never a silent reward 0; the
sandbox a rollout claimed is always released, off the rollout's clock. Claims carry the
actor's name, so the pool can reclaim what a lost actor held; a claim or release that the pool's
death cut off (Ray restarts the pool) is tried again, with backoff, until the restarted pool answers. Plain class: Ray
options are applied in the composition root.
"""

from __future__ import annotations

import asyncio
import os
import resource
import time
from dataclasses import dataclass
from typing import Any

from rl_daytona.agent import AgentError, run_agent
from rl_daytona.backends import BackendSpec, SandboxError, SandboxHandle, make_backend
from rl_daytona.chat_client import ChatClient
from rl_daytona.ray_errors import lost_actor_errors
from rl_daytona.tasks import GradeResult, TaskEnv, get_taskset
from rl_daytona.types import PhaseTimings, Rollout, RolloutRequest, RolloutStatus, Settings, Trajectory


@dataclass(frozen=True)
class ActorStats:
    name: str
    rollouts: int
    in_flight: int
    sandbox_cpu_seconds: float
    node_id: str
    pool_calls_retried: int = 0  # claims and releases tried again after the pool died


async def call(target: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """Call an async method on a Ray actor handle or on a plain object alike."""
    fn = getattr(target, method)
    remote = getattr(fn, "remote", None)
    return await (remote(*args, **kwargs) if remote is not None else fn(*args, **kwargs))


def _node_id() -> str:
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
    except Exception:  # noqa: BLE001 - the node id is decoration, never a failure
        return ""


POOL_CALL_TRIES = 6  # a claim or release the pool's death or restart cut off is tried up to this often


class _Phases:
    """Wall-clock marks for one rollout's phases."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.marks: dict[str, float] = {}
        self._last = self.start

    def mark(self, phase: str) -> None:
        now = time.monotonic()
        self.marks[phase] = now - self._last
        self._last = now

    def timings(self) -> PhaseTimings:
        return PhaseTimings(**self.marks, total=time.monotonic() - self.start)


class RolloutActor:
    def __init__(self, pool: Any, spec: BackendSpec, taskset: str, settings: Settings,
                 name: str = "rollout-0", max_concurrency: int = 64) -> None:
        self.pool, self.settings, self.name = pool, settings, name
        self.backend = make_backend(spec)
        self.taskset = get_taskset(taskset)
        self.client = ChatClient(settings.policy_url, os.environ.get("OPENAI_API_KEY") or "none",
                                 max_connections=max_concurrency, timeout=120.0, max_retries=2)
        self._releases: set[asyncio.Task[Any]] = set()
        self._done = 0
        self._in_flight = 0
        self._cpu_at_start = self._children_cpu()
        self._node = _node_id()
        self._pool_retries = 0

    async def _pool_call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """A call on the pool, tried again when the pool actor died under it: Ray restarts it, and
        calls made while it restarts fail at once (ActorUnavailableError), so the retries back off
        (0.25 s doubling, about 8 s in all; the rollout's deadline bounds them too)."""
        for attempt in range(POOL_CALL_TRIES):
            try:
                return await call(self.pool, method, *args, **kwargs)
            except lost_actor_errors():
                if attempt == POOL_CALL_TRIES - 1:
                    raise
                self._pool_retries += 1
                await asyncio.sleep(0.25 * 2 ** attempt)
        raise AssertionError("unreachable")

    async def run(self, request: RolloutRequest) -> Rollout:
        """Claim, seed, agent loop, grade, release: one attempt, bounded by the deadline."""
        self._in_flight += 1
        phases, state = _Phases(), _State()
        try:
            async with asyncio.timeout(self.settings.rollout_deadline):
                await self._attempt(request, phases, state)
        except TimeoutError:
            state.fail(RolloutStatus.TIMEOUT, f"rollout passed its {self.settings.rollout_deadline:.0f}s deadline")
        except (SandboxError, OSError) as exc:
            state.fail(RolloutStatus.INFRA_ERROR, f"sandbox: {type(exc).__name__}: {exc}")
        except AgentError as exc:
            state.fail(RolloutStatus.AGENT_ERROR, str(exc))
        except Exception as exc:  # noqa: BLE001 - pool, Ray or task plumbing: an infra status
            state.fail(RolloutStatus.INFRA_ERROR, f"{type(exc).__name__}: {str(exc)[:300]}")
        finally:
            self._in_flight -= 1
            self._done += 1
            if state.sandbox is not None:
                self._release(state.sandbox)
        return self._rollout(request, phases, state)

    async def _attempt(self, request: RolloutRequest, phases: _Phases, state: "_State") -> None:
        instance = self.taskset.get(request.task_id)
        state.sandbox = await self._pool_call("claim", claimer=self.name)
        phases.mark("claim")
        run = instance.start(TaskEnv(self.backend, state.sandbox, self.settings.exec_timeout))
        prompt = await run.prompt()
        phases.mark("seed")
        state.trajectory = await run_agent(self.client, self.backend, state.sandbox, prompt, self.settings)
        phases.mark("agent")
        state.grade = await run.reward()
        phases.mark("grade")

    def _release(self, sandbox: SandboxHandle) -> None:
        task = asyncio.ensure_future(self._release_quietly(sandbox))
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    def _rollout(self, request: RolloutRequest, phases: _Phases, state: "_State") -> Rollout:
        instance = self.taskset.get(request.task_id)
        grade = state.grade
        return Rollout(
            rollout_id=request.rollout_id, task_id=request.task_id, variant=instance.variant,
            group_id=request.group_id, attempt=request.attempt,
            reward=grade.reward if grade is not None and state.status is RolloutStatus.OK else 0.0,
            status=state.status, timings=phases.timings(), trajectory=state.trajectory,
            sandbox_id=state.sandbox.sandbox_id if state.sandbox else "", error=state.error,
            tests_passed=grade.passed if grade else 0, tests_expected=grade.expected if grade else 0,
            node_id=self._node, actor=self.name, started_at=time.time() - phases.timings().total,
        )

    async def _release_quietly(self, sandbox: SandboxHandle) -> None:
        try:
            await self._pool_call("release", sandbox)
        except Exception:  # noqa: BLE001 - a pool gone for good: its restart or shutdown reaps by label
            pass

    async def stats(self) -> ActorStats:
        cpu = self._children_cpu() - self._cpu_at_start
        return ActorStats(self.name, self._done, self._in_flight, cpu, self._node, self._pool_retries)

    async def close(self) -> None:
        await asyncio.gather(*self._releases, return_exceptions=True)
        await self.client.close()
        await self.backend.close()

    @staticmethod
    def _children_cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime


class _State:
    """What one attempt has gathered so far; `fail` keeps the first failure."""

    def __init__(self) -> None:
        self.sandbox: SandboxHandle | None = None
        self.trajectory = Trajectory()
        self.grade: GradeResult | None = None
        self.status = RolloutStatus.OK
        self.error = ""

    def fail(self, status: RolloutStatus, error: str) -> None:
        if self.status is RolloutStatus.OK:
            self.status, self.error = status, error[:500]
