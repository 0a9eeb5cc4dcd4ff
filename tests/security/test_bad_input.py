"""Bad input to `rl-daytona eval`: invalid values, unknown tasksets, splits and variants. Each is
a one-line error and exit code 2 before anything runs, or (a variant that only fails when its
task starts) every rollout recorded with a one-line error and the run ending with exit 3."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rl_daytona.tasks import TaskError, get_taskset


def _eval(tmp_path: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAY_ADDRESS": "local", "RAY_AUTH_MODE": "disabled",
           "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "rl_daytona.cli", "eval", "--out", str(tmp_path / "o"), *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.parametrize("args, message", [
    (["--temperature", "-1"], "argument --temperature: must be a number >= 0, got -1"),
    (["--temperature", "nan"], "argument --temperature: must be a number >= 0, got nan"),
    (["--deadline", "0"], "argument --deadline: must be a positive number, got 0"),
    (["--deadline", "-5"], "argument --deadline: must be a positive number, got -5"),
    (["--exec-timeout", "inf"], "argument --exec-timeout: must be a positive number, got inf"),
    (["--policy", "localhost:8000"], "argument --policy: must be 'builtin' or an http(s):// base URL"),
    (["--max-turns", "0"], "argument --max-turns: must be at least 1, got 0"),
    (["--group", "two"], "argument --group: invalid _positive_int value: 'two'"),
    (["--backend", "docker"], "argument --backend: invalid choice: 'docker'"),
    (["--warm-size", "-3"], "warm_size >= 0"),
    (["--taskset", "no_such_taskset"], "no_such_taskset"),
    (["--taskset", "tests.security.bad_tasksets:MISSING"], "MISSING"),
    (["--taskset", "tests.security.bad_tasksets:NOT_A_TASKSET"], "NOT_A_TASKSET"),
    (["--split", "validation"], "has no split 'validation' (known: heldout, train)"),
    (["--taskset", "tests.security.bad_tasksets:SPLIT_NAMES_UNKNOWN_TASK", "--split", "train"],
     "split 'train' names tasks it does not have: 'calc[variant=99]'"),
])
def test_bad_input_is_one_line_and_exit_2_before_anything_runs(tmp_path: Path, args: list[str], message: str) -> None:
    proc = _eval(tmp_path, *args)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-1000:])
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "o" / "rollouts.jsonl").exists(), "nothing ran"


def test_a_split_naming_an_unknown_task_is_a_task_error_not_a_key_error() -> None:
    """BUG (tasks.api.Taskset.split): a split listing an instance id the taskset does not hold
    raised a bare KeyError, which the CLI does not catch: a traceback instead of one line. The
    Taskset now refuses it when built."""
    with pytest.raises(TaskError, match=r"names tasks it does not have: 'calc\[variant=99\]'"):
        get_taskset("tests.security.bad_tasksets:SPLIT_NAMES_UNKNOWN_TASK")


def test_a_variant_that_fails_when_its_task_starts_marks_every_rollout_and_exits_3(tmp_path: Path) -> None:
    proc = _eval(tmp_path, "--taskset", "tests.security.bad_tasksets:UNKNOWN_VARIANT", "--split", "all",
                 "--group", "2", "--max-turns", "1", timeout=300)
    assert proc.returncode == 3, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last == f"rl-daytona: 2 of 2 rollouts hit infrastructure errors (see {tmp_path / 'o' / 'rollouts.jsonl'})"
    records = [json.loads(line) for line in (tmp_path / "o" / "rollouts.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all("calc has no variant 999" in r["error"] for r in records)
    assert all("\n" not in r["error"] and r["status"] == "infra_error" for r in records)
