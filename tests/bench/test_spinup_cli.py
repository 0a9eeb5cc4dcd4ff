"""`rl-daytona bench spinup` end to end: the CSVs and the plot it writes, on the latency model
(virtual time), the local backend and a daytona-sim child process; nothing left behind."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from rl_daytona.cli import main


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as done:
        main(argv)
    return int(done.value.code), capsys.readouterr().out


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as rows:
        return list(csv.DictReader(rows))


def test_a_ladder_on_the_model_writes_one_row_per_level_one_per_wave_and_the_plot(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ladder"
    code, printed = _run(["bench", "spinup", "--backend", "model", "--ladder", "8,64", "--mode", "cold,auto",
                          "--reps", "2", "--out", str(out)], capsys)
    assert code == 0
    levels = _rows(out / "ladder.csv")
    assert [(r["mode"], r["width"]) for r in levels] == [("cold", "8"), ("cold", "64"), ("auto", "8"), ("auto", "64")]
    assert all(r["delivered"] == str(2 * int(r["width"])) and r["lost"] == "0" for r in levels)
    assert all(float(r["usable_p50"]) <= float(r["usable_p95"]) <= float(r["usable_max"]) for r in levels)
    auto64 = levels[3]
    assert int(auto64["forked"]) > 0 and auto64["on_hand"] == "32"  # 16 on hand per wave, 2 waves
    assert len(_rows(out / "ladder_waves.csv")) == 8
    assert (out / "ladder.png").stat().st_size > 10_000
    assert json.loads(printed.splitlines()[0])["mode"] == "cold"


def test_bad_flags_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for flags in (["--mode", "lukewarm"], ["--ladder", "8,x"], ["--backend", "aws"]):
        with pytest.raises(SystemExit) as done:
            main(["bench", "spinup", "--out", str(tmp_path), *flags])
        assert done.value.code == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_a_local_ladder_times_a_command_in_every_sandbox_and_deletes_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rl_daytona.backends.local import LocalBackend

    out = tmp_path / "local"
    code, _ = _run(["bench", "spinup", "--backend", "local", "--ladder", "4", "--mode", "cold,warm,auto",
                    "--reps", "1", "--out", str(out)], capsys)
    assert code == 0
    levels = _rows(out / "ladder.csv")
    assert [r["mode"] for r in levels] == ["cold", "warm", "auto"]
    assert all(r["delivered"] == "4" and r["lost"] == "0" for r in levels)
    assert levels[1]["created"] == "4" and levels[2]["on_hand"] == "16"
    # handed out by the pool first, usable once its command answered
    assert all(0 <= float(r["handed_p50"]) <= float(r["usable_p50"]) for r in levels)
    import asyncio

    assert asyncio.run(LocalBackend(out / "work" / "sandboxes").list_sandboxes()) == []


def test_a_daytona_sim_ladder_runs_every_mode_through_the_sdk_and_stops_the_sim(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sim"
    code, _ = _run(["bench", "spinup", "--backend", "daytona-sim", "--time-scale", "0.02", "--ladder", "24",
                    "--mode", "cold,warm,fork,auto", "--reps", "1", "--fail-rate", "0.05", "--out", str(out)], capsys)
    assert code == 0
    levels = {r["mode"]: r for r in _rows(out / "ladder.csv")}
    assert all(r["delivered"] == "24" and r["lost"] == "0" for r in levels.values())
    assert levels["cold"]["forked"] == "0" and levels["warm"]["forked"] == "0"
    assert int(levels["fork"]["forked"]) > 0 and int(levels["auto"]["forked"]) > 0  # (how many: the planner's call)
    log = (out / "work" / "daytona-sim.log").read_text()
    assert "deleted 0 sandboxes still alive" in log  # every sandbox was gone before the sim stopped
