"""RolloutActor as a plain class on a plain SandboxPool: every request yields one typed Rollout."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rl_daytona.backends import BackendSpec
from rl_daytona.pool import PoolConfig, SandboxPool
from rl_daytona.rollout import RolloutActor
from rl_daytona.types import RolloutRequest, RolloutStatus, Settings
from tests.fakes.flaky_backend import FlakyBackend
from rl_daytona.backends import make_backend
from tests.fakes.scripted_llm import Reply, ScriptedLLM

TASKSET = "tests.tasks.example_task:EXAMPLE_TASKSET"


def _request(task_id: str, attempt: int = 0) -> RolloutRequest:
    return RolloutRequest(rollout_id=f"r-{attempt}", task_id=task_id, group_id="g", attempt=attempt)


def _run(tmp_path: Path, replies: list[Reply], pool_config: PoolConfig = PoolConfig(warm_size=1),
         flaky: set[int] | None = None, **settings: object):
    async def go(url: str):
        from rl_daytona.tasks import get_taskset

        spec = BackendSpec(root=str(tmp_path / "sb"))
        backend = make_backend(spec)
        if flaky is not None:
            backend = FlakyBackend(backend, fail_creates=flaky)  # type: ignore[assignment]
        pool = SandboxPool(spec, "run-r", pool_config, backend=backend)
        await pool.start()
        actor = RolloutActor(pool, spec, TASKSET, Settings(policy_url=url, **settings))  # type: ignore[arg-type]
        task_id = get_taskset(TASKSET).instances[0].instance_id
        rollout = await actor.run(_request(task_id))
        await actor.close()
        stats = await pool.shutdown()
        return rollout, stats

    with ScriptedLLM(replies) as llm:
        return asyncio.run(go(llm.url))


def test_a_scripted_fix_is_graded_ok_and_the_sandbox_released(tmp_path: Path) -> None:
    from tests.tasks.example_task import FIXES

    rollout, stats = _run(tmp_path, [Reply(command=FIXES[0]), Reply(content="fixed")])
    assert rollout.status is RolloutStatus.OK and rollout.reward == 1.0, rollout.error
    assert rollout.timings.total >= rollout.timings.agent > 0
    assert rollout.trajectory.turns == 2 and rollout.sandbox_id
    assert stats.claimed == 1 and stats.released == 1


def test_no_fix_is_ok_with_reward_zero(tmp_path: Path) -> None:
    rollout, _ = _run(tmp_path, [Reply(content="I give up")])
    assert rollout.status is RolloutStatus.OK and rollout.reward == 0.0


def test_a_hanging_rollout_times_out_and_its_sandbox_is_deleted(tmp_path: Path) -> None:
    rollout, stats = _run(tmp_path, [Reply(command="sleep 30")], rollout_deadline=1.5, exec_timeout=60)
    assert rollout.status is RolloutStatus.TIMEOUT and rollout.reward == 0.0
    assert stats.released == 1 and stats.in_use == 0


def test_a_broken_endpoint_is_an_agent_error(tmp_path: Path) -> None:
    rollout, _ = _run(tmp_path, [Reply(status=500)])
    assert rollout.status is RolloutStatus.AGENT_ERROR and "policy endpoint failed" in rollout.error


def test_no_sandbox_is_an_infra_error_never_a_silent_zero(tmp_path: Path) -> None:
    config = PoolConfig(warm_size=1, claim_timeout=0.5, create_retries=0, retry_backoff=0.01)
    rollout, _ = _run(tmp_path, [Reply(content="x")], pool_config=config, flaky=set(range(1000)))
    assert rollout.status is RolloutStatus.INFRA_ERROR and "no sandbox ready" in rollout.error
