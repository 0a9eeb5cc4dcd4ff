"""`ray job submit --working-dir . -- rl-daytona eval ...` against a head started here with token auth.

The head is a `ray start --head --block` of our own (its own ports, its own RAY_TMPDIR, its own
session), with RAY_AUTH_MODE=token and a fresh RAY_AUTH_TOKEN in its environment; it is stopped
by SIGTERM to that one process and anything left in its session is killed by pid. Never
`ray stop`: that would stop every Ray on the machine.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from tests.test_cluster import REPO, free_port, outlivers

BIN = Path(sys.executable).parent
TASKSET = "tests.tasks.example_task:EXAMPLE_TASKSET"  # ships with --working-dir, not installed


@dataclass(frozen=True)
class Head:
    gcs: str
    dashboard: str
    env: dict[str, str]
    work: Path


def _wait_for_http(url: str, seconds: float = 90.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except urllib.error.HTTPError:  # it answers (401 without a token): up
            return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"the Ray dashboard at {url} did not answer in {seconds:.0f}s")


@pytest.fixture(scope="module")
def head() -> Iterator[Head]:
    work = Path(tempfile.mkdtemp(prefix="rlj-", dir="/tmp"))  # short: Ray's socket paths live under it
    env = {**os.environ, "RAY_TMPDIR": str(work), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    gcs, dashboard = free_port(), free_port()
    command = [str(BIN / "ray"), "start", "--head", "--block", "--num-cpus", "2", "--temp-dir", str(work),
               "--port", str(gcs), "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard),
               "--include-dashboard", "true", "--disable-usage-stats", "--object-store-memory", str(200 * 2**20)]
    for flag in ("--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--ray-client-server-port",
                 "--metrics-export-port", "--runtime-env-agent-port"):
        command += [flag, str(free_port())]
    with (work / "head.log").open("wb") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_for_http(f"http://127.0.0.1:{dashboard}/api/version")
        yield Head(f"127.0.0.1:{gcs}", f"http://127.0.0.1:{dashboard}", env, work)
    finally:
        process.terminate()
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
        outlivers(process.pid)
        shutil.rmtree(work, ignore_errors=True)


def _submit(head: Head, env: dict[str, str], *entrypoint: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "ray"), "job", "submit", "--address", head.dashboard, "--working-dir", str(REPO),
                           "--", *entrypoint], env=env, cwd=REPO, capture_output=True, text=True, timeout=300)


@pytest.mark.timeout(420)
def test_job_submit_runs_the_eval_driver_on_the_cluster_and_its_logs_show_the_table(head: Head) -> None:
    out = head.work / "run"
    job = _submit(head, head.env, "rl-daytona", "eval", "--taskset", TASKSET, "--split", "all", "--group", "2",
                  "--max-turns", "2", "--max-concurrent", "4", "--out", str(out))
    logs = job.stdout + job.stderr
    assert job.returncode == 0 and "succeeded" in logs, logs[-4000:]
    assert "Connecting to existing Ray cluster" in logs, "the driver joined the cluster, not a Ray of its own"
    assert "passes/attempts" in logs and all(f"wordcount[variant={v}]" in logs for v in range(3)), logs[-4000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rollouts"] == 6 and summary["counts_by_status"] == {"ok": 6}


@pytest.mark.timeout(300)
def test_without_the_cluster_token_submit_and_join_are_refused(head: Head) -> None:
    no_token = {k: v for k, v in head.env.items() if k != "RAY_AUTH_TOKEN"}
    no_token["HOME"] = str(head.work / "no-home")  # no ~/.ray/auth_token to fall back on
    job = _submit(head, no_token, "true")
    assert job.returncode != 0 and "token" in (job.stdout + job.stderr).lower()
    joined = subprocess.run([str(BIN / "rl-daytona"), "eval", "--group", "1", "--out", str(head.work / "refused")],
                            env={**no_token, "RAY_ADDRESS": head.gcs}, capture_output=True, text=True, timeout=120)
    assert joined.returncode == 2, joined.stderr[-2000:]
    last = joined.stderr.strip().splitlines()[-1]
    assert last.startswith("rl-daytona eval: error: cannot join the Ray cluster at ") and "RAY_AUTH_TOKEN" in last
