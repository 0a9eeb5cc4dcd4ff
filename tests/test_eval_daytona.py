"""`rl-daytona eval --backend daytona` end to end: the CLI in a subprocess (its own Ray, its actors
reading DAYTONA_API_KEY from their environment) -> the real daytona SDK over HTTP and real asyncssh
-> daytona-sim in this process -> real bwrap sandboxes, graded by pytest.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rl_daytona.backends.daytona_options import RUN_LABEL
from rl_daytona.daytona_sim import SimConfig, run_sim_in_thread
from rl_daytona.daytona_sim.catalog import DEFAULT_SNAPSHOT, VM_SNAPSHOT

EXAMPLE = "tests.tasks.example_task:EXAMPLE_TASKSET"


def _env(sim: object, key: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAYTONA_")}
    # RAY_ADDRESS=local: the CLI starts its own Ray, never joining another cluster on this machine
    env.update(DAYTONA_API_KEY=key, DAYTONA_API_URL=sim.api_url, RAY_ADDRESS="local",  # type: ignore[attr-defined]
               RAY_AUTH_MODE="disabled", PYTHONPATH=os.getcwd(),
               DAYTONA_SIM_CA_BUNDLE=str(sim.sim.objects.ca_bundle))  # type: ignore[attr-defined]
    return env


def _eval_args(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "rl_daytona.cli", "eval", "--backend", "daytona", "--taskset", EXAMPLE,
            "--split", "all", "--group", "3", "--max-concurrent", "6", "--max-turns", "3", "--warm-size", "2",
            "--out", str(out), *extra]


def _run_ids(out: Path) -> set[str]:
    return {json.loads(line)["run_id"] for line in (out / "sandboxes.jsonl").read_text().splitlines()}


def _leaks(out: Path, key: str) -> list[str]:
    return [str(p) for p in out.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]


@pytest.mark.parametrize("transport,snapshot,flags", [
    ("ssh", "auto", ()),  # Dockerfile.hud -> content-named snapshot; a warm pool serves most creates
    ("toolbox", VM_SNAPSHOT, ()),  # a VM snapshot: children forked from idle parents
    ("ssh", DEFAULT_SNAPSHOT, ("--no-warm-pool",)),  # cold creates only: the injected failures hit them
])
def test_eval_on_daytona_sim_completes_every_rollout_and_leaves_nothing(
        tmp_path: Path, transport: str, snapshot: str, flags: tuple[str, ...]) -> None:
    key = f"sim-{secrets.token_hex(12)}"
    config = SimConfig(root=str(tmp_path / "sim"), api_key=key, time_scale=0.02, create_fail_rate=0.3, seed=3)
    out = tmp_path / "run"
    with run_sim_in_thread(config) as sim:
        proc = subprocess.run(_eval_args(out, "--daytona-transport", transport, "--snapshot", snapshot, *flags),
                              env=_env(sim, key), capture_output=True, text=True, timeout=400)
        stats = sim.stats()
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["backend"] == "daytona" and summary["sandbox_backend"]["transport"] == transport
    assert summary["counts_by_status"] == {"ok": summary["rollouts"]}, "every rollout completed"
    if flags:
        assert stats.failed > 0 and not stats.served_from_warm, "injected create failures were absorbed"
    run_id = summary["run_id"]
    assert _run_ids(out) == {run_id}
    assert stats.ids_with_label(RUN_LABEL, run_id) == [], "no sandbox with the run label remains"
    ledger = [json.loads(line) for line in (out / "sandboxes.jsonl").read_text().splitlines()]
    made = {e["sandbox_id"] for e in ledger if e["event"] in ("created", "forked")}
    assert made and made == {e["sandbox_id"] for e in ledger if e["event"] == "deleted"}
    if snapshot == VM_SNAPSHOT:  # a VM snapshot: the pool forked children from idle parents
        assert summary["sandbox_backend"]["forkable"] and summary["pool"]["forked"] > 0
    elif snapshot == "auto":  # Dockerfile.hud built into a content-named snapshot, and a warm pool sized to the batch
        assert summary["sandbox_backend"]["snapshot"].startswith("rl-daytona-") and stats.snapshots_built == 1
        assert summary["sandbox_backend"]["warm_pool"] and stats.served_from_warm > 0
    assert key not in proc.stdout + proc.stderr
    assert _leaks(out, key) == [], "the API key never reaches the run folder"


def test_sigterm_mid_run_deletes_the_runs_sandboxes(tmp_path: Path) -> None:
    key = f"sim-{secrets.token_hex(12)}"
    config = SimConfig(root=str(tmp_path / "sim"), api_key=key, time_scale=0.02)
    out = tmp_path / "run"
    with run_sim_in_thread(config) as sim:
        proc = subprocess.Popen(_eval_args(out, "--snapshot", DEFAULT_SNAPSHOT, "--max-turns", "12"),
                                env=_env(sim, key), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline and not (out / "sandboxes.jsonl").exists():
                time.sleep(0.2)  # a subprocess has no event to await: poll for its first sandbox
            assert (out / "sandboxes.jsonl").exists(), "the run created sandboxes before the signal"
            assert proc.poll() is None, "the run was still going when the signal came"
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
        left = sim.stats().ids_with_label(RUN_LABEL, _run_ids(out).pop())
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted" in err and left == []


def test_missing_or_wrong_api_key_is_one_line_and_never_echoed(tmp_path: Path) -> None:
    key = f"sim-{secrets.token_hex(12)}"
    with run_sim_in_thread(SimConfig(root=str(tmp_path / "sim"), api_key=key, time_scale=0.02)) as sim:
        env = _env(sim, key)
        del env["DAYTONA_API_KEY"]
        missing = subprocess.run(_eval_args(tmp_path / "a"), env=env, capture_output=True, text=True, timeout=120)
        wrong_key = f"wrong-{secrets.token_hex(8)}"
        wrong = subprocess.run(_eval_args(tmp_path / "b", "--snapshot", DEFAULT_SNAPSHOT), env=_env(sim, wrong_key),
                               capture_output=True, text=True, timeout=300)
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    assert "DAYTONA_API_KEY is not set" in missing.stderr
    assert wrong.returncode == 2, wrong.stderr[-2000:]
    last = wrong.stderr.strip().splitlines()[-1]
    assert "rejected the credentials" in last and wrong_key not in wrong.stderr + wrong.stdout
