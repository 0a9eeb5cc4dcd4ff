"""The train run's step mechanics (rl_daytona.train_steps) on typed fakes; end to end in test_train."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def test_a_learner_that_stops_taking_rollouts_stops_the_step_in_one_line(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """`Learner.add` is bounded: a wedged Learner ends the run with a TrainingCallError (exit 4
    from the CLI) instead of a step that waits forever; the rollout is already in the sink."""
    import asyncio

    from rl_daytona import train_steps
    from rl_daytona.sink import RolloutSink
    from rl_daytona.learn.clients import TrainingCallError
    from rl_daytona.types import RolloutRequest, Trajectory
    from tests.learn.builders import rollout_of

    monkeypatch.setattr(train_steps, "LEARNER_ADD_TIMEOUT", 0.3)
    request = RolloutRequest(rollout_id="g/0", task_id="calc[variant=8]", group_id="g", attempt=0)
    rollout = rollout_of(Trajectory(policy_version=0), "g", 0, 1.0)

    class Fleet:
        async def run(self, _request: RolloutRequest) -> tuple[object, object]:
            return object(), rollout

    class Never:
        def remote(self, _ref: object) -> asyncio.Future[list[RolloutRequest]]:
            return asyncio.get_running_loop().create_future()  # never answered

    class Learner:
        add = Never()

    sink = RolloutSink(tmp_path / "rollouts.jsonl")
    with pytest.raises(TrainingCallError, match=r"took no rollout for 0.3 s \(g/0 is in rollouts.jsonl\)") as err:
        asyncio.run(train_steps.collect(Fleet(), Learner(), [request], sink, lambda _r: None))  # type: ignore[arg-type]
    assert "\n" not in str(err.value) and not err.value.retryable
    assert [json.loads(line)["rollout_id"] for line in (tmp_path / "rollouts.jsonl").read_text().splitlines()] == ["g/0"]
