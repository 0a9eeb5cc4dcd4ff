"""Tolerant reading of eval, train, half-written and non-run folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rl_daytona.report.load import NotARunFolder, load_run
from tests.report.runs import make_eval_run, make_half_run, make_train_run


def test_eval_run_reads_every_rollout_and_nothing_is_missing(tmp_path: Path) -> None:
    data = load_run(make_eval_run(tmp_path / "ev"))
    assert data.kind == "eval" and data.missing == ()
    assert len(data.rollouts) == 8 and {r.phase for r in data.rollouts} == {("eval", -1)}
    assert data.rollouts[0].usable == pytest.approx(0.06)


def test_train_run_knows_steps_and_evals(tmp_path: Path) -> None:
    data = load_run(make_train_run(tmp_path / "tr"))
    assert data.kind == "train" and data.missing == () and len(data.metrics) == 3
    phases = {r.phase for r in data.rollouts}
    assert phases == {("train", 0), ("train", 1), ("eval", 0), ("eval", 2)}


def test_half_written_run_says_what_is_missing(tmp_path: Path) -> None:
    data = load_run(make_half_run(tmp_path / "half"))
    assert data.kind == "train" and data.summary is None and data.rollouts == ()
    assert [m["step"] for m in data.metrics] == [-1, 0]  # the truncated third line is skipped
    notes = " | ".join(data.missing)
    assert "summary.json is missing" in notes and "rollouts.jsonl is missing" in notes
    assert "metrics.jsonl: 1 unreadable line" in notes


def test_garbage_lines_and_a_broken_summary_become_notes(tmp_path: Path) -> None:
    run = make_eval_run(tmp_path / "ev")
    with (run / "rollouts.jsonl").open("a") as fh:
        fh.write("[1, 2]\n" + json.dumps({"reward": "not a number"}) + "\n")
    (run / "summary.json").write_text("{ truncated")
    data = load_run(run)
    assert len(data.rollouts) == 8
    notes = " | ".join(data.missing)
    assert "summary.json is unreadable" in notes
    assert "rollouts.jsonl: 1 unreadable line" in notes and "1 line(s) without the expected fields" in notes


def test_a_folder_without_run_files_is_not_a_run_folder(tmp_path: Path) -> None:
    with pytest.raises(NotARunFolder, match="not a run folder"):
        load_run(tmp_path)
    with pytest.raises(NotARunFolder, match="not a directory"):
        load_run(tmp_path / "nope")


def test_a_train_run_with_only_rollouts_is_still_a_train_run(tmp_path: Path) -> None:
    run = make_train_run(tmp_path / "tr")
    (run / "metrics.jsonl").unlink()
    (run / "summary.json").unlink()
    data = load_run(run)
    assert data.kind == "train" and len(data.rollouts) == 16
    assert "metrics.jsonl is missing" in data.missing
