"""Reading a stopped run back (learn.run_state) and where `--resume` starts (run_state.starting_point),
on run folders laid out as `rl-daytona train` writes them; no Ray."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rl_daytona.learn.run_state import (INTERRUPTED, RunState, prepare_to_continue, prune_checkpoints, read_run,
                                        starting_point)
from rl_daytona.policy.model import PolicyModel


def _line(step: int, version: int, checkpoint: str | None) -> str:
    return json.dumps({"step": step, "policy_version": version, "checkpoint": checkpoint}) + "\n"


def _record(rollout_id: str, group_id: str) -> str:
    return json.dumps({"rollout_id": rollout_id, "group_id": group_id}) + "\n"


@pytest.fixture
def stopped(tmp_path: Path) -> Path:
    """Steps 0 and 1 done (1 trained to version 1), step 2 interrupted mid-rollouts, a torn last line."""
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    ckpt = str(out / "checkpoints" / "step-000001")
    PolicyModel(version=1).save(ckpt)
    PolicyModel(version=0).save(out / "checkpoints" / "step-000002")  # saved, but its line never written
    (out / "metrics.jsonl").write_text(_line(-1, 0, None) + _line(0, 0, None) + _line(1, 1, ckpt) + '{"step": 2, "po')
    (out / "rollouts.jsonl").write_text(
        _record("eval0-a-0", "eval0/a") + _record("train0/0/a/0", "train0/0/a") + _record("train1/0/a/0", "train1/0/a")
        + _record("train2/0/a/0", "train2/0/a") + _record("eval3-a-0", "eval3/a") + '{"rollout_id": "tor')
    return out


def test_a_stopped_run_continues_after_its_last_complete_line(stopped: Path) -> None:
    state = read_run(stopped)
    assert state.next_step == 2 and state.version == 1 and state.initial_eval_done
    assert state.checkpoint == str(stopped / "checkpoints" / "step-000001")
    assert state.completed == {-1, 0, 1}


def test_continuing_sets_aside_what_the_interrupted_step_wrote(stopped: Path) -> None:
    moved = prepare_to_continue(stopped, read_run(stopped))
    assert moved == 2
    kept = [json.loads(t)["rollout_id"] for t in (stopped / "rollouts.jsonl").read_text().splitlines()]
    aside = [json.loads(t)["rollout_id"] for t in (stopped / INTERRUPTED).read_text().splitlines()]
    assert kept == ["eval0-a-0", "train0/0/a/0", "train1/0/a/0"] and aside == ["train2/0/a/0", "eval3-a-0"]
    assert [json.loads(t)["step"] for t in (stopped / "metrics.jsonl").read_text().splitlines()] == [-1, 0, 1]
    assert prepare_to_continue(stopped, read_run(stopped)) == 0, "continuing twice moves nothing more"
    prune_checkpoints(stopped, read_run(stopped).checkpoint)
    assert sorted(p.name for p in (stopped / "checkpoints").iterdir()) == ["step-000001.json", "step-000001.npz"]


def test_a_run_killed_in_its_first_eval_keeps_nothing_twice(tmp_path: Path) -> None:
    """Killed before any metrics line: the rerun of the untrained eval reuses its rollout ids,
    so what the first eval wrote is set aside too."""
    (tmp_path / "metrics.jsonl").write_text("")
    (tmp_path / "rollouts.jsonl").write_text(_record("eval0-a-0", "eval0/a"))
    assert prepare_to_continue(tmp_path, read_run(tmp_path)) == 1
    assert (tmp_path / "rollouts.jsonl").read_text() == ""


def test_lines_out_of_order_end_the_completed_prefix(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text(_line(-1, 0, None) + _line(0, 0, None) + _line(2, 0, None))
    assert read_run(tmp_path).next_step == 1
    (tmp_path / "metrics.jsonl").write_text("")
    assert read_run(tmp_path) == RunState((), 0, None, 0, continuing=True)


def test_where_resume_starts(stopped: Path, tmp_path: Path) -> None:
    run = tmp_path / "tinker-run"
    run.mkdir()
    ckpt = "tinker://sim-1:train:0/weights/step-000001"
    (run / "metrics.jsonl").write_text(_line(-1, 0, None) + _line(0, 0, None) + _line(1, 1, ckpt))
    in_place = starting_point(run, run, 4)
    assert (in_place.next_step, in_place.version, in_place.checkpoint) == (2, 1, ckpt)
    with pytest.raises(ValueError, match=r"its 2 steps are done; pass --steps above 2"):
        starting_point(run, run, 2)
    # another --out: a new run from the folder's last checkpoint, or from a tinker:// path
    fresh = starting_point(run, tmp_path / "new", 4)
    assert fresh == RunState((), 0, ckpt, 1)
    assert starting_point(ckpt, tmp_path / "new", 4) == RunState((), 0, ckpt, 0)
    with pytest.raises(ValueError, match="no metrics.jsonl there"):
        starting_point(tmp_path / "empty", tmp_path / "empty", 4)
    # a run folder from before training went through Tinker names a file, not a tinker:// checkpoint
    with pytest.raises(ValueError, match="is not a tinker:// path"):
        starting_point(stopped, stopped, 4)
