"""The run's composition (rl_daytona.run): resolved once, in order, and no empty run folder left
by a run that was refused or failed before it recorded anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from rl_daytona import runtime
from rl_daytona.eval import EvalConfig, run_eval
from rl_daytona.run import PolicySource, open_run
from rl_daytona.train import TrainConfig, run_train
from rl_daytona.types import Trajectory
from tests.learn.builders import rollout_of

NOWHERE = "http://127.0.0.1:9/v1"  # an endpoint passed through as given (nothing dials it here)


def _refuse_ray() -> None:
    raise ValueError("cannot join the Ray cluster at 10.1.2.3:6379: nothing answers there after 30 s")


@pytest.mark.parametrize("run", [
    lambda out: run_eval(EvalConfig(out=out, policy=NOWHERE), Console(quiet=True)),
    lambda out: run_train(TrainConfig(out=out), Console(quiet=True)),
], ids=["eval", "train"])
def test_a_run_refused_by_ray_makes_no_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run) -> None:  # type: ignore[no-untyped-def]
    """Ray is joined (or refused, in one line: `ray_join`) before the run folder is made."""
    monkeypatch.setattr(runtime, "ensure_ray", _refuse_ray)
    with pytest.raises(ValueError, match="cannot join the Ray cluster"):
        run(tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.usefixtures("ray_session")
def test_a_run_that_fails_before_recording_anything_removes_only_the_folder_it_made(tmp_path: Path) -> None:
    policy = PolicySource(url=NOWHERE)
    fresh = EvalConfig(out=tmp_path / "fresh", policy=NOWHERE)
    with pytest.raises(RuntimeError, match="pool refused"):
        with open_run(fresh, Console(quiet=True), policy, ("heldout",)) as run:
            assert run.out.is_dir() and run.settings.policy_url == NOWHERE and run.splits["heldout"]
            (run.out / "sandboxes").mkdir()  # what a failed start leaves: empty folders and files
            raise RuntimeError("pool refused")
    assert not fresh.out.exists()

    mine = tmp_path / "mine"
    mine.mkdir()
    with pytest.raises(RuntimeError):
        with open_run(EvalConfig(out=mine, policy=NOWHERE), Console(quiet=True), policy, ("heldout",)):
            raise RuntimeError("pool refused")
    assert mine.is_dir(), "a folder the run did not make is never removed"

    recorded = EvalConfig(out=tmp_path / "recorded", policy=NOWHERE)
    with pytest.raises(KeyboardInterrupt):
        with open_run(recorded, Console(quiet=True), policy, ("heldout",)) as run:
            run.sink.add(rollout_of(Trajectory(), "g", 0, 1.0))
            raise KeyboardInterrupt
    rows = (recorded.out / "rollouts.jsonl").read_text().splitlines()
    assert [json.loads(r)["rollout_id"] for r in rows] == ["g/0"], "a recorded rollout keeps the folder"
