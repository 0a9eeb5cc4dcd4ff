"""`rl-daytona train --backend daytona` end to end against daytona-sim: its summary names the
sandbox backend, the snapshot and the warm pool the run used, as eval's does (one code path)."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path

from rl_daytona.daytona_sim import SimConfig, run_sim_in_thread
from rl_daytona.daytona_sim.catalog import DEFAULT_SNAPSHOT
from tests.test_eval_daytona import _env


def test_train_on_daytona_sim_names_its_backend_snapshot_and_warm_pool(tmp_path: Path) -> None:
    key = f"sim-{secrets.token_hex(12)}"
    out = tmp_path / "run"
    with run_sim_in_thread(SimConfig(root=str(tmp_path / "sim"), api_key=key, time_scale=0.02)) as sim:
        proc = subprocess.run(
            [sys.executable, "-m", "rl_daytona.cli", "train", "--backend", "daytona", "--snapshot", DEFAULT_SNAPSHOT,
             "--taskset", "tests.learn.small_calc:SMALL_CALC", "--steps", "1", "--tasks-per-step", "2",
             "--group", "2", "--eval-group", "1", "--max-turns", "2", "--max-concurrent", "4", "--warm-size", "2",
             "--out", str(out)], env=_env(sim, key), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    backend = summary["sandbox_backend"]
    assert summary["backend"] == "daytona" and backend["kind"] == "daytona"
    assert backend["snapshot"] == DEFAULT_SNAPSHOT and backend["api_url"] == sim.api_url
    assert backend["warm_pool"] and backend["warm_pool_events"], backend
    assert key not in (out / "summary.json").read_text()
    assert "step 1/1  train " in proc.stdout, proc.stdout[-2000:]
