"""`rl-daytona report RUNDIR`: exit 0 and the page's path, or exit 2 and one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.report.runs import make_train_run


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rl_daytona.cli", "report", *args], capture_output=True,
                          text=True, timeout=300)


def test_report_prints_the_path(tmp_path: Path) -> None:
    run = make_train_run(tmp_path / "tr")
    done = _cli(str(run))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(run / "report.html") and (run / "report.html").exists()


def test_not_a_run_folder_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    done = _cli(str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"rl-daytona report: error: {tmp_path} is not a run folder (no summary.json, metrics.jsonl, rollouts.jsonl)"]
