"""`rl-daytona tasks calibrate`: per-instance signal and the band check, from eval's own run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rl_daytona.cli import main
from rl_daytona.tasks.calibrate import Band, calibrate


def _summary(rewards_by_task: dict[str, list[float]]) -> dict[str, Any]:
    per_task = {}
    for task_id, rewards in rewards_by_task.items():
        passes = sum(r >= 1.0 for r in rewards)
        mean = sum(rewards) / len(rewards)
        std = (sum((r - mean) ** 2 for r in rewards) / len(rewards)) ** 0.5
        per_task[task_id] = {"passes": passes, "attempts": len(rewards), "pass_rate": passes / len(rewards),
                             "reward_std": std}
    flat = [r for rs in rewards_by_task.values() for r in rs]
    return {"per_task": per_task, "pass_rate": sum(r >= 1.0 for r in flat) / len(flat)}


def test_signal_per_instance_and_an_in_band_taskset() -> None:
    cal = calibrate(_summary({"a": [1, 0, 0, 1], "b": [0, 0, 1, 0], "c": [1, 1, 1, 1], "d": [0, 0, 0, 0]}), 4)
    assert [r.signal for r in cal.instances] == ["mixed", "mixed", "always passes", "always fails"]
    assert cal.base_rate == 0.4375 and cal.mixed_fraction == 0.5 and cal.in_band
    assert cal.advice[0].startswith("in band: base pass rate 44% within 10%-90%, 50% of instances with spread")
    assert cal.advice[1] == "no training signal at this policy: 1 always fail, 1 always pass"


def test_out_of_band_says_why() -> None:
    hard = calibrate(_summary({"a": [0, 0], "b": [0, 1]}), 2, Band(0.3, 0.9))
    assert not hard.in_band and hard.advice[0].startswith("base pass rate 25% is below 30%: too hard")
    easy = calibrate(_summary({"a": [1, 1], "b": [1, 1], "c": [1, 0]}), 2)
    assert not easy.in_band and easy.base_rate == 5 / 6  # inside the band, but too few groups disagree
    assert easy.advice[0].startswith("only 33% of instances have attempts that disagree (want 50%+): raise --group")
    assert "looks uniform 50% of the time" in easy.advice[0]
    assert calibrate(_summary({"a": [1] * 10, "b": [1] * 9 + [0]}), 10).advice[0].startswith(
        "base pass rate 95% is above 90%: too easy")


def test_calibrate_on_calc_with_the_builtin_policy_prints_the_table(
        ray_session: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cal"
    with pytest.raises(SystemExit) as exit_:
        main(["tasks", "calibrate", "calc", "--split", "heldout", "--group", "2", "--max-turns", "2",
              "--max-concurrent", "16", "--rollout-actors", "1", "--warm-size", "4", "--out", str(out)])
    printed = capsys.readouterr().out
    assert exit_.value.code == 0, printed[-2000:]
    assert "tasks calibrate calc / heldout (group 2)" in printed and "group disagrees" in printed
    assert "BAND: base pass rate" in printed and "calc[variant=31]" in printed
    cal, summary = (json.loads((out / name).read_text()) for name in ("calibration.json", "summary.json"))
    assert len(cal["instances"]) == 8 and cal["group"] == 2 and summary["rollouts"] == 16
    assert cal["base_rate"] == summary["pass_rate"] and (out / "rollouts.jsonl").exists()
    assert (out / "report.html").exists()
