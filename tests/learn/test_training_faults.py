"""The Learner through the real `tinker` SDK against tinker-sim with injected faults.

Training calls meet 429s (with Retry-After), 500s before the call was applied, replies lost
after it was applied, slow futures and failed futures: every step still completes, the service
applies each chunk and each optimizer step exactly once (its own counters say so), and the
final weights are bit-for-bit those of the same steps sent with no faults. With every call
failing, the Learner gives up after ten failures in a row with one line and nothing applied.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rl_daytona.learn.clients import TinkerTrainingClient, TrainingCallError
from rl_daytona.learn.learner import Learner, LearnerConfig, StepReport
from rl_daytona.learn.retry import RetryPolicy
from rl_daytona.tinker_sim import SIM_API_KEY, Faults, RunningSim, SimConfig, run_sim_in_thread
from rl_daytona.types import Rollout, Trajectory
from tests.learn.builders import rollout_of

STEPS, GROUPS = 4, 3
RETRY = RetryPolicy(max_consecutive_failures=10, backoff=0.0)
ROUTES = ("forward_backward", "optim_step", "save_weights_for_sampler", "save_weights")


def _step_rollouts(trajectories: list[Trajectory], step: int) -> list[Rollout]:
    """GROUPS mixed groups of two real attempts each (rewards 1 and 0)."""
    out = []
    for g in range(GROUPS):
        for attempt, reward in enumerate((1.0, 0.0)):
            traj = trajectories[(step * GROUPS * 2 + g * 2 + attempt) % len(trajectories)]
            out.append(rollout_of(traj, f"s{step}g{g}", attempt, reward))
    return out


def _drive(sim: RunningSim, trajectories: list[Trajectory]) -> tuple[list[StepReport], Any]:
    """STEPS steps through a Learner (one chunk per group) with a checkpoint each; reports, call stats."""
    async def go() -> tuple[list[StepReport], Any]:
        learner = Learner(TinkerTrainingClient.connect(sim.url, SIM_API_KEY, "builtin", 8),
                          LearnerConfig(chunk_bytes=1, retry=RETRY))
        reports = []
        try:
            for step in range(STEPS):
                await learner.begin_step(step, {f"s{step}g{g}": 2 for g in range(GROUPS)})
                for rollout in _step_rollouts(trajectories, step):
                    await learner.add(rollout)
                reports.append(await learner.train_step(step, f"step-{step:06d}"))
            return reports, await learner.call_stats()
        finally:
            await learner.close()

    return asyncio.run(go())


def test_a_faulty_service_applies_every_chunk_and_step_exactly_once(trajectories: list[Trajectory],
                                                                    tmp_path: Path) -> None:
    faults = Faults(rate_limit=3, server_error=3, lost_reply=4, failed_future=3, slow_future=2, slow_futures=3,
                    retry_after=0.01, routes=ROUTES)
    with run_sim_in_thread(SimConfig(state_dir=tmp_path / "clean")) as clean, \
            run_sim_in_thread(SimConfig(state_dir=tmp_path / "faulty", faults=faults)) as faulty:
        clean_reports, _ = _drive(clean, trajectories)
        reports, stats = _drive(faulty, trajectories)
        (clean_model,) = clean.state.models.values()
        (model,) = faulty.state.models.values()
    assert faults.fired == {"rate_limit": 3, "server_error": 3, "lost_reply": 4, "failed_future": 3,
                            "slow_futures": 3}, faults.fired
    assert all(r.trained for r in reports) and [r.version for r in reports] == list(range(1, STEPS + 1))
    assert all(r.checkpoint.endswith(f"/weights/step-{r.step:06d}") for r in reports)
    chunks = sum(r.chunks for r in reports)
    assert chunks == STEPS * GROUPS
    # the SDK absorbed the 429s, 500s, lost replies and slow futures itself; a failed future reached
    # the Learner, whose retry is a new call (the failed one was not applied)
    assert stats.failures == stats.retries == 3
    counts = model.trainer.counts
    assert counts["forward_backward_applied"] == chunks and counts["datums_applied"] == STEPS * GROUPS * 2
    assert counts["optim_steps_applied"] == STEPS and model.trainer.model.version == STEPS
    assert faulty.state.counts.get("replayed") == 4  # each lost reply's retry was answered, not applied
    # and the weights are exactly those of the same steps with no faults
    assert [r.loss for r in reports] == [r.loss for r in clean_reports]
    clean_params, params = clean_model.trainer.model.params, model.trainer.model.params
    assert all(np.array_equal(params[k], clean_params[k]) for k in clean_params)


def test_ten_failures_in_a_row_give_up_in_one_line_with_nothing_applied(trajectories: list[Trajectory],
                                                                         tmp_path: Path) -> None:
    faults = Faults(failed_future=100, routes=("forward_backward",))
    with run_sim_in_thread(SimConfig(state_dir=tmp_path, faults=faults)) as sim:
        async def go() -> None:
            learner = Learner(TinkerTrainingClient.connect(sim.url, SIM_API_KEY, "builtin", 8),
                              LearnerConfig(retry=RETRY))
            try:
                await learner.begin_step(0, {"s0g0": 2})
                for rollout in _step_rollouts(trajectories, 0)[:2]:
                    await learner.add(rollout)
                await learner.train_step(0)
            finally:
                await learner.close()

        with pytest.raises(TrainingCallError) as info:
            asyncio.run(go())
        (model,) = sim.state.models.values()
    message = str(info.value)
    assert "\n" not in message and message.startswith("tinker forward_backward failed: RequestFailedError")
    assert message.endswith("(10 failures in a row, giving up)"), message
    assert faults.fired == {"failed_future": 10}
    assert model.trainer.model.version == 0 and model.trainer.counts["forward_backward_applied"] == 0
