"""Per-attempt costs: commands, test runs, tokens and datum bytes read from finished rollouts."""

from __future__ import annotations

import json

import pytest

from rl_daytona.bench.attempt_cost import attempt_costs
from rl_daytona.bench.rollouts import bench_requests
from rl_daytona.learn.datum import Datum
from rl_daytona.policy import vocab as V
from rl_daytona.types import PhaseTimings, Rollout, RolloutStatus, Trajectory


def _rollout(commands: list[str], reward: float, status: RolloutStatus = RolloutStatus.OK) -> Rollout:
    messages: list[dict] = [{"role": "user", "content": "fix it"}]
    for i, command in enumerate(commands):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}
        messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"c{i}", "content": "ok"}]
    ids = tuple(range(10 + 5 * len(commands)))
    mask = tuple(i % 2 for i in range(len(ids)))
    trajectory = Trajectory(token_ids=ids, logprobs=tuple(-0.5 * m for m in mask), loss_mask=mask,
                            messages=tuple(messages), turns=len(commands) + 1)
    return Rollout("r", "t", "0", "g", 0, reward, status, PhaseTimings(), trajectory)


def test_costs_count_the_graders_run_and_tell_quick_runs_from_pytest() -> None:
    a = _rollout([V.LOOK_VERB, "f=x.py; sed -i '1s/ < / <= /' \"$f\"" + V.EDIT_SUFFIXES[0]], 1.0)
    b = _rollout([V.PYTEST_COMPACT], 0.0)
    lost = _rollout(["python -m pytest -q"] * 9, 0.0, RolloutStatus.INFRA_ERROR)
    figures = attempt_costs([a, b, lost], sandbox_cpu_seconds=3.0)
    assert figures["attempts"] == 2 and figures["pass_rate"] == 0.5
    assert figures["sandbox_commands"] == pytest.approx((3 + 2) / 2)  # + the grader's command each
    assert figures["pytest_runs"] == pytest.approx((1 + 2) / 2)  # the grader's pytest run each
    assert figures["quick_test_runs"] == pytest.approx((2 + 0) / 2)
    assert figures["tokens"] == pytest.approx((20 + 15) / 2)
    assert figures["bytes_per_datum"] == pytest.approx((Datum.from_rollout(a, 1.0).nbytes
                                                        + Datum.from_rollout(b, 1.0).nbytes) / 2, abs=0.01)
    assert figures["sandbox_cpu_seconds"] == pytest.approx(1.0)  # the run's CPU over every rollout
    assert attempt_costs([lost]) == {"attempts": 0}


def test_requests_come_in_whole_groups_over_any_taskset() -> None:
    requests = bench_requests(64, "textkit")
    assert len(requests) == 64 and {r.task_id.split("[")[0] for r in requests} == {"textkit"}
    assert len({r.group_id for r in requests}) == 32
