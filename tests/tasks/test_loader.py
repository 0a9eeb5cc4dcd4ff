"""Loading a user's taskset: every way a module can be wrong is one line naming the file and
line and the cause, and exit code 2, before Ray starts or a sandbox is created."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from rl_daytona.cli import main

HEAD = "from rl_daytona.tasks import Taskset\nfrom rl_daytona.tasks.calc import calc_instance, calc_task\n"

# name -> (module body after HEAD, attribute, line of the fault counted in the whole file, cause)
CASES = {
    "syntax": ("X = 1\ndef broken(:\n    pass\n", "TASKS", 4, "SyntaxError: invalid syntax"),
    "misspelt_keyword": ("TASKS = Taskset(name='t', instances=(calc_task(varient=3),))\n", "TASKS", 3,
                         "task 'calc': unexpected keyword argument 'varient'; did you mean 'variant'? (it takes: variant)"),
    "missing_attr": ("TASKSET = Taskset(name='t', instances=(calc_instance(0),))\n", "TASKS", None,
                     "has no attribute 'TASKS'; did you mean 'TASKSET'?"),
    "duplicate_ids": ("I = calc_instance(0)\nTASKS = Taskset(name='dup', instances=(I, calc_instance(1), I))\n",
                      "TASKS", 4, "taskset 'dup' has duplicate instances: 'calc[variant=0]' (x2)"),
    "unknown_split_instance": ("TASKS = Taskset(name='t', instances=(calc_instance(0),),\n"
                               "                splits={'train': ('calc[variant=0]', 'calc[variant=7]')})\n",
                               "TASKS", 3, "split 'train' names tasks it does not have: 'calc[variant=7]'"),
    "import_error": ("import no_such_dependency_xyz\n", "TASKS", 3,
                     "ModuleNotFoundError: No module named 'no_such_dependency_xyz'"),
    "wrong_type": ("\nTASKS = [calc_instance(0)]\n", "TASKS", 4, "names a list, not a Taskset"),
    "task_not_instance": ("def make():\n    return Taskset(name='t', instances=(calc_task,))\n", "make", 4,
                          "instances[0] is a Task, not a task instance (call the task: my_task(variant=0))"),
    "unknown_calc_variant": ("\n\nTASKS = Taskset(name='t', instances=(calc_instance(99),))\n", "TASKS", 5,
                             "calc has no variant 99 (variants are 0..39)"),
    "runtime_error": ("LIMIT = 3\nN = LIMIT // 0\n", "TASKS", 4, "ZeroDivisionError: integer division or modulo by zero"),
}


def _write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str) -> tuple[Path, str]:
    body, attr, _, _ = CASES[case]
    module = f"user_tasks_{case}"
    path = tmp_path / f"{module}.py"
    path.write_text(HEAD + textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(tmp_path))
    return path, f"{module}:{attr}"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    return int(exit_.value.code or 0), capsys.readouterr().err


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_module_is_one_line_naming_file_line_and_cause(
        case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    path, spec = _write(tmp_path, monkeypatch, case)
    code, err = _run(["tasks", "list", spec], capsys)
    _, _, line, cause = CASES[case]
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    where = f"{path}:{line}: " if line else f"{path}: "
    assert err.startswith(f"rl-daytona tasks: error: {where}") and cause in err, err


@pytest.mark.parametrize("case", ["misspelt_keyword", "duplicate_ids"])
def test_eval_refuses_a_bad_module_before_ray_or_a_sandbox(
        case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from rl_daytona import runtime

    joined: list[bool] = []
    monkeypatch.setattr(runtime, "ensure_ray", lambda: joined.append(True))  # Ray may already run in this session
    path, spec = _write(tmp_path, monkeypatch, case)
    code, err = _run(["eval", "--taskset", spec, "--out", str(tmp_path / "run")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and f"{path}:{CASES[case][2]}: " in err, err
    assert joined == [] and not (tmp_path / "run").exists()


def test_a_missing_module_names_the_spec(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(["tasks", "list", "no_such_module_xyz:TASKS"], capsys)
    assert code == 2 and err.strip() == ("rl-daytona tasks: error: taskset spec 'no_such_module_xyz:TASKS': cannot "
                                         "import 'no_such_module_xyz' (no module named 'no_such_module_xyz' on the "
                                         "path; run from the folder that holds it)")
