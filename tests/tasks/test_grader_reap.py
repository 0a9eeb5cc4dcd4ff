"""Nothing the agent started survives into grading (real bubblewrap sandboxes).

On the local backend every command's processes die with its pid namespace, so a daemon the
agent leaves cannot touch the grade; where processes outlive commands (Daytona) the grader
first runs `grader_reap`, shown here ending a forking daemon inside one sandbox command (its
own pid namespace, so it can end nothing outside), and run before grading by a backend that
asks for it.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from rl_daytona.backends.base import ExecResult, SandboxHandle
from rl_daytona.backends.local import LocalBackend
from rl_daytona.tasks import GradeResult
from rl_daytona.tasks.calc import N_TESTS, TEST_SOURCE, buggy_source, pristine_source
from rl_daytona.tasks.grader import bootstrap_program, grade_pytest, judge, parse_grade_output, plan_grade

REAP = (Path(__file__).resolve().parents[2] / "rl_daytona/tasks/grader_reap.py").read_text()
# A daemon that, were it alive while grading, would put a fixed calc.py and trivial tests into
# every grading folder it can find.
SABOTEUR_FILES = {"fixed.py": pristine_source(), "trivial.py": "def test_x():\n    pass\n", "saboteur.sh": (
    "while :; do for d in /tmp/rlgrade-*; do cp /workspace/fixed.py $d/src/calc.py; "
    "cp /workspace/trivial.py $d/tests/test_calc.py; done; done\n")}
SABOTEUR = "nohup setsid sh /workspace/saboteur.sh >/dev/null 2>&1 &"
FORKING_DAEMON = "setsid sh -c 'while :; do sleep 30 & sleep 0.01; done' >/dev/null 2>&1 &"
COUNT_DAEMON = "python -I -c " + shlex.quote(
    "import os\nn = 0\nfor p in filter(str.isdigit, os.listdir('/proc')):\n    try:\n"
    "        n += open(f'/proc/{p}/cmdline', 'rb').read().startswith((b'sleep\\x0030', b'sh\\x00-c\\x00while'))\n"
    "    except OSError:\n        pass\nprint(n)")


class ReapingLocalBackend(LocalBackend):
    """A local backend that asks the grader to reap first, recording every command."""

    grading_needs_reap = True

    def __init__(self, root: Path) -> None:
        super().__init__(root, isolation="bwrap")
        self.commands: list[tuple[str, bytes | None]] = []

    async def exec(self, sandbox: SandboxHandle, command: str, **kwargs: Any) -> ExecResult:
        self.commands.append((command, kwargs.get("stdin")))
        return await super().exec(sandbox, command, **kwargs)


async def _grade_after(backend: LocalBackend, calc: str, setup: str) -> GradeResult:
    sandbox = await backend.create("reap-test")
    try:
        await backend.write_files(sandbox, {"calc.py": calc, "test_calc.py": TEST_SOURCE, **SABOTEUR_FILES})
        assert (await backend.exec(sandbox, setup)).exit_code == 0
        result = await grade_pytest(backend, sandbox, sources=["calc.py"], tests={"test_calc.py": TEST_SOURCE},
                                    expected_passed=N_TESTS, timeout=20)
        return result
    finally:
        await backend.delete(sandbox)


def test_a_daemon_the_agent_left_cannot_touch_the_grade(local_backend: LocalBackend) -> None:
    assert asyncio.run(_grade_after(local_backend, buggy_source(0), SABOTEUR)).reward == 0.0
    honest = asyncio.run(_grade_after(local_backend, pristine_source(), SABOTEUR))
    assert honest.reward == 1.0, honest.detail


def test_the_reap_ends_a_forking_daemon(local_backend: LocalBackend) -> None:
    async def run() -> ExecResult:
        sandbox = await local_backend.create("reap-test")
        try:
            command = (f"{FORKING_DAEMON} before=$({COUNT_DAEMON}); python -I -B -c {shlex.quote(REAP)} && "
                       f"echo before=$before after=$({COUNT_DAEMON})")
            return await local_backend.exec(sandbox, command, timeout=30)
        finally:
            await local_backend.delete(sandbox)

    result = asyncio.run(run())
    assert result.exit_code == 0, result.output
    reaped = int(result.stdout.split("RLREAP ")[1].split()[0])
    assert reaped >= 1 and result.stdout.strip().endswith("after=0"), result.stdout


def test_a_backend_whose_processes_outlive_commands_is_reaped_before_grading(tmp_path: Path) -> None:
    backend = ReapingLocalBackend(tmp_path / "sandboxes")
    result = asyncio.run(_grade_after(backend, pristine_source(), "true"))
    assert result.reward == 1.0, result.detail
    (setup, _), (reap, reap_stdin), (grading, _) = backend.commands
    assert reap_stdin == REAP.encode() and reap == grading == "exec python -I -B -"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can drop to another uid")
def test_where_graders_run_as_root_the_worker_runs_as_nobody(tmp_path: Path) -> None:
    # the bootstrap run directly as this (root) user, on a workspace folder of the test's own
    only_as_nobody = "import os\nif os.getuid() != 65534:\n    raise SystemExit('the worker is not nobody')\n"
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "calc.py").write_text(only_as_nobody + pristine_source())
    plan = plan_grade(["calc.py"], {"test_calc.py": TEST_SOURCE}, N_TESTS, 30)
    grading_tmp = tempfile.mkdtemp(prefix="grader-nobody-")  # nobody must reach it (pytest's tmp is 0700)
    os.chmod(grading_tmp, 0o711)
    program = bootstrap_program(plan, "ab" * 16, workspace=str(tmp_path / "ws"), tmpdir=grading_tmp)
    try:
        out = subprocess.run([sys.executable, "-I", "-B", "-"], input=program, capture_output=True, timeout=60)
    finally:
        shutil.rmtree(grading_tmp)
    verdict = parse_grade_output(out.stdout.decode(), "ab" * 16)
    assert verdict is not None and judge(verdict, plan).reward == 1.0, verdict
