"""`rl-daytona tasks check` in real (bubblewrap) sandboxes: sound tasks pass, broken ones are
flagged with the reason, and nothing is left behind."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from rl_daytona.backends.local import LocalBackend
from rl_daytona.cli import main
from rl_daytona.tasks import Solution, TaskEnv, task
from rl_daytona.tasks.calc import calc_instance
from rl_daytona.tasks.check import check_all, check_instance
from rl_daytona.tasks.probe import MeteredBackend, split_cpu
from tests.fakes.flaky_backend import FlakyBackend


def _check(argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, dict[str, Any]]:
    out = tmp_path / "check.json"
    with pytest.raises(SystemExit) as exit_:
        main(["tasks", "check", *argv, "--json", str(out)])
    found = {r["instance_id"]: r for r in json.loads(out.read_text())}
    return int(exit_.value.code or 0), capsys.readouterr().out, found


def test_calc_heldout_passes_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, found = _check(["calc", "--split", "heldout"], tmp_path, capsys)
    assert code == 0 and "8 ok of 8 instances" in out, out
    assert list(found) == [f"calc[variant={v}]" for v in range(24, 32)]
    for r in found.values():
        assert r["verdict"] == "ok" and r["same_seed"] is True
        assert r["untouched"]["reward"] == 0.0 and r["reference"]["reward"] == 1.0
        assert r["grade_seconds"] > 0 and r["grade_cpu_seconds"] > 0


def test_broken_tasks_are_flagged_with_the_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, found = _check(["tests.tasks.broken_tasks:BROKEN"], tmp_path, capsys)
    assert code == 1, out
    assert {i: r["verdict"] for i, r in found.items()} == {
        "calc[variant=8]": "ok", "unsolvable[variant=8]": "broken", "already_fixed[variant=8]": "broken",
        "random_seed[variant=8]": "broken"}
    assert found["unsolvable[variant=8]"]["problems"] == [
        "reference solution pays 0.0, so no attempt can: 16 tests passed, expected 17"]
    assert found["already_fixed[variant=8]"]["problems"] == [
        "pays 1.0 untouched: the seeded workspace already passes its grader"]
    assert found["random_seed[variant=8]"]["problems"] == ["seeding twice gives different files: seed.txt"]
    assert "broken unsolvable[variant=8]: reference solution pays 0.0" in out
    assert "broken already_fixed[variant=8]: pays 1.0 untouched" in out


def test_a_solution_given_as_sed_edits_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, found = _check(["tests.tasks.example_task:EXAMPLE_TASKSET", "--split", "heldout"], tmp_path, capsys)
    assert code == 0 and [r["verdict"] for r in found.values()] == ["ok"], out


async def _seed_only(env: TaskEnv, *, variant: int) -> Any:
    await env.write_files({"a.py": f"X = {variant}\n"})
    yield "fix a.py"
    yield 0.0


def test_no_reference_a_failing_fix_and_a_raising_seed(local_backend: LocalBackend) -> None:
    no_ref = task(name="no_ref")(_seed_only)(variant=1)
    bad_fix = task(name="bad_fix", solution=lambda *, variant: Solution(commands=("false",)))(_seed_only)(variant=1)

    async def explode(env: TaskEnv) -> Any:
        raise RuntimeError("no such fixture file")
        yield  # pragma: no cover

    raising = task(name="raising")(explode)()
    results = asyncio.run(check_all(local_backend, [no_ref, bad_fix, raising], "check-test", 3))
    assert [r.verdict for r in results] == ["ok, no reference", "broken", "broken"]
    assert results[1].problems == ("reference command 'false' failed (exit 1)",)
    assert results[2].problems == ("seeding raised RuntimeError: no such fixture file",)
    assert asyncio.run(local_backend.list_sandboxes("check-test")) == []


def test_metering_is_invisible_to_the_caller(local_backend: LocalBackend) -> None:
    async def run() -> None:
        sandbox = await local_backend.create("meter-test")
        metered = MeteredBackend(local_backend)
        metered.metering = True
        command = "python -c 'import sys; sum(range(10**6)); print(1); print(2, file=sys.stderr); sys.exit(3)'"
        plain, measured = await local_backend.exec(sandbox, command), await metered.exec(sandbox, command)
        assert (measured.exit_code, measured.stdout, measured.stderr) == (plain.exit_code, plain.stdout, plain.stderr)
        assert metered.cpu_seconds > 0 and metered.unmetered == 0
        await local_backend.delete(sandbox)

    asyncio.run(run())
    assert split_cpu("x\nRLCHECK-CPU 0m0.01s 0m0.00s\n1m2.50s 0m0.25s\n") == ("x", 62.75)
    assert split_cpu("no figures") == ("no figures", None)


def test_a_sandbox_failure_is_an_error_not_a_broken_task(local_backend: LocalBackend) -> None:
    backend = FlakyBackend(local_backend, fail_creates={1})  # the second attempt's sandbox
    result = asyncio.run(check_instance(backend, calc_instance(0), "err"))  # type: ignore[arg-type]
    assert result.verdict == "error" and result.error == "sandbox: SandboxError: injected create failure #1"
    assert result.untouched is not None and result.untouched.reward == 0.0 and result.same_seed is None


def test_list_prints_instances_and_splits_one_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["tasks", "list", "calc"])
    lines = capsys.readouterr().out.splitlines()
    assert exit_.value.code == 0 and lines[0] == "taskset calc: 40 instances, 2 splits"
    assert lines[1] == "instance calc[variant=0]  splits=train  reference=yes"
    assert lines[25] == "instance calc[variant=24]  splits=heldout  reference=yes"
    assert lines[33] == "instance calc[variant=32]  splits=train  reference=yes"
    assert lines[41].startswith("split train (32): calc[variant=0] calc[variant=1] ")
    assert lines[41].endswith(" calc[variant=23] calc[variant=32] calc[variant=33] calc[variant=34] calc[variant=35] "
                              "calc[variant=36] calc[variant=37] calc[variant=38] calc[variant=39]")
    assert lines[42].startswith("split heldout (8): calc[variant=24] ") and len(lines) == 43
