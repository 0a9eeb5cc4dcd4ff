"""`rl-daytona eval` end to end: Ray actors, real bwrap sandboxes, the built-in policy over HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rl_daytona.eval import EvalConfig, run_eval
from rl_daytona.source import requests_for
from rl_daytona.types import Settings


@pytest.mark.usefixtures("ray_session")
def test_eval_on_calc_writes_summary_and_rollouts(tmp_path: Path) -> None:
    out = tmp_path / "run"
    summary = run_eval(EvalConfig(out=out, taskset="calc", split="heldout", group=2, max_concurrent=16,
                                  settings=Settings(max_turns=3)))
    n_tasks = len(requests_for("calc", "heldout", 1))
    assert summary["rollouts"] == 2 * n_tasks
    assert summary["counts_by_status"] == {"ok": 2 * n_tasks}
    assert set(summary["per_task"]) and all(row["attempts"] == 2 for row in summary["per_task"].values())
    assert {"p50", "p95"} <= set(summary["timings"]["agent"])
    lines = (out / "rollouts.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert len({r["rollout_id"] for r in records}) == len(records) == summary["rollouts"]
    assert all(r["trajectory"]["token_ids"] and sum(r["trajectory"]["loss_mask"]) for r in records)
    assert json.loads((out / "summary.json").read_text())["pass_rate"] == summary["pass_rate"]
    assert summary["pool"]["deleted"] >= summary["rollouts"]
    assert not list((out / "sandboxes").glob("sb-*")), "every sandbox of the run was deleted"


@pytest.mark.usefixtures("ray_session")
def test_eval_runs_a_task_written_only_with_the_public_api(tmp_path: Path) -> None:
    summary = run_eval(EvalConfig(out=tmp_path / "ex", taskset="tests.tasks.example_task:EXAMPLE_TASKSET",
                                  split="all", group=2, max_concurrent=4))
    assert summary["rollouts"] >= 2 and summary["counts_by_status"].get("infra_error", 0) == 0


@pytest.mark.parametrize("args, message", [
    (["--split", "nope"], "no split 'nope'"),
    (["--group", "0"], "must be at least 1"),
    (["--taskset", "nowhere.module:X"], "nowhere"),
    (["--policy", "http://127.0.0.1:9/v1"], "does not answer"),
    (["--tinker-url", "http://127.0.0.1:9"], "cannot reach the Tinker service at http://127.0.0.1:9"),
    (["--backend", "daytona"], "DAYTONA_API_KEY is not set"),
])
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DAYTONA_API_KEY"}
    proc = subprocess.run([sys.executable, "-m", "rl_daytona.cli", "eval", "--out", str(tmp_path / "o"), *args],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2, proc.stderr
    assert not (tmp_path / "o").exists(), "refused before a run folder is made"
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
