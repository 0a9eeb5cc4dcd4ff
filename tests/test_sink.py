"""The sink (rl_daytona.sink): each rollout once, on disk as soon as `add` returns."""

from __future__ import annotations

import json
from pathlib import Path

from rl_daytona.sink import RolloutSink
from rl_daytona.types import Trajectory
from tests.learn.builders import rollout_of


def test_each_rollout_is_written_once_and_flushed(tmp_path: Path) -> None:
    sink = RolloutSink(tmp_path / "rollouts.jsonl")
    first, second = rollout_of(Trajectory(), "g", 0, 1.0), rollout_of(Trajectory(), "g", 1, 0.0)
    sink.add(first)
    sink.add(first)
    sink.add(second)
    lines = (tmp_path / "rollouts.jsonl").read_text().splitlines()  # read before close: already flushed
    assert [json.loads(line)["rollout_id"] for line in lines] == [first.rollout_id, second.rollout_id]
    assert sink.rollouts == [first, second]
    sink.close()


def test_a_line_is_the_whole_rollout(tmp_path: Path) -> None:
    """to_json builds the line field by field; it must say what `asdict` says, status as its value."""
    from dataclasses import asdict

    trajectory = Trajectory(token_ids=(5, 6, 7), logprobs=(0.0, -1.25, 0.0), loss_mask=(0, 1, 0),
                            messages=({"role": "user", "content": "fix it"},), turns=1, finish_reason="stop",
                            policy_version=2, segment_starts=(0,))
    rollout = rollout_of(trajectory, "g", 3, 1.0)
    expected = asdict(rollout) | {"status": rollout.status.value}
    sink = RolloutSink(tmp_path / "rollouts.jsonl")
    sink.add(rollout)
    sink.close()
    assert json.loads((tmp_path / "rollouts.jsonl").read_text()) == json.loads(json.dumps(expected))
