"""The pytest grader: pristine tests against the agent's declared sources, in a fresh folder.

Invariant: reward is 1.0 only when one `RLGRADE` line carrying this call's host nonce reports
that pytest exited 0, that the passed test node ids are exactly the pristine tests' ids (their
count equal to `expected_passed`, each test's setup, call and teardown passed) and that no
tampering was seen and no test needed what cannot cross the grading boundary. Anything else (a
timeout, a missing or refused source, no verdict, a crash, an `os._exit`, a forged line) pays
0.0 with a detail saying why.

How (backend neutral, `backend.exec` only): where the backend's processes outlive a command
(Daytona; `grading_needs_reap`, default True), the host first runs `grader_reap`, which ends
every process of the sandbox user but its own ancestors, so nothing the agent started is alive
when grading begins (LocalBackend: each command's processes die with its pid namespace). Then
it sends `grader_bootstrap` plus a config (the host nonce, the declared sources, the pristine
tests, the grading programs) on stdin to `python -I -B -`. The bootstrap (non-dumpable) copies
only the declared regular files from the workspace into a fresh `mkdtemp` folder, and starts
`grader_start` in a clean environment (`-I`; plugin autoload off; its own `-c` ini,
`--rootdir`, `--confcutdir`, `--noconftest`), so the agent's conftest.py, ini files,
sitecustomize/usercustomize, .pth files and edited tests are never seen. `grader_start` forks
the worker, then becomes the trusted pytest process (`grader_runner`, non-dumpable before the
worker runs anything): it learns a child nonce through a pipe, runs the pristine tests compiled
from memory, and imports the declared sources only as proxies (`grader_imports`,
`grader_proxy`): every call into the code under test crosses a socketpair to the worker
(`grader_worker`), the only process that imports the agent's code, as JSON data
(`grader_codec`, never pickle; handles for what cannot be copied). The runner writes one
report line to a pipe the worker never had; the bootstrap accepts exactly one report with the
child nonce and prints the verdict line with the host nonce. Printed fake summaries or fake
`RLGRADE` lines are ignored: stdout of pytest is never parsed for outcomes.

Defended (tests/tasks/test_grader*.py, tests/security/test_grader_attacks.py): code in the
agent's sources runs only in the worker, which holds no nonce, no report descriptor and no
test code; forging the report from memory (`gc`), patching pytest or builtins, lying on the
channel, results equal to everything or lying about their type (`type()` decides, and a handle
never compares with a plain value), huge or deeply nested results (size and depth limits),
a worker that crashes, hangs or kills the grader: each fails the tests or the grading (0.0).
Files the worker writes (a planted test, __init__.py, .pyc or conftest) never run in the
trusted process. A daemon the agent left behind is gone before grading (reap, or pid
namespaces).

Residual threats (still true): (1) unless the grader runs as root (then the worker drops to
nobody), the worker has the trusted process's uid: a sandbox user cannot switch uid
(bubblewrap's user namespace maps one uid; Daytona's sandbox user is not root). It cannot
ptrace or read the non-dumpable runner, but it can signal it (which only ends the grading with
0) and write whatever that uid can, which the trusted process no longer reads. (2) An object of the code under test
decides comparisons with another such object (`Stack(1) == Stack(2)`), as in any pytest run;
and a test that hard-codes expected values can be satisfied by code that hard-codes them too.
(3) The interpreter and site-packages must be read-only to the agent (true for the local
bubblewrap backend and a Daytona user without root); the trusted process imports only from
the interpreter's prefixes. (4) On Daytona the reap assumes the sandbox's own services run as
another user (or are ancestors of the command); an agent that gained root is out of scope.
"""

from __future__ import annotations

import ast
import base64
import hmac
import json
import posixpath
import secrets
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from rl_daytona.backends.base import WORKSPACE, Backend, SandboxHandle
from rl_daytona.tasks.verdict import GradeResult, TaskError

BOOTSTRAP_COMMAND = "exec python -I -B -"
EXEC_SLACK_SECONDS = 15.0
VERDICT_PREFIX = "RLGRADE "
PHASES = ("setup", "call", "teardown")
_HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class GradePlan:
    """What to grade: validated sources and pristine tests, and where each test is defined."""

    sources: tuple[str, ...]
    tests: tuple[tuple[str, str], ...]
    expected_passed: int
    timeout: float
    locations: tuple[tuple[str, str, str, tuple[int, ...]], ...]  # (node id, file, name, lines)

    @property
    def expected_ids(self) -> frozenset[str]:
        return frozenset(node for node, *_ in self.locations)


def _check_relpath(rel: str, what: str) -> str:
    if not rel or rel.startswith("/") or posixpath.normpath(rel) != rel or rel.split("/")[0] == "..":
        raise TaskError(f"{what} {rel!r} must be a normalised path relative to the workspace")
    return rel


@lru_cache(maxsize=256)
def _test_defs(rel: str, text: str) -> tuple[tuple[str, str, str, tuple[int, ...]], ...]:
    """The test functions a pristine test file defines (node id, file, name, lines); kept per
    text, since every attempt at a task grades against the same files."""
    try:
        tree = ast.parse(text, filename=rel)
    except SyntaxError as exc:
        raise TaskError(f"pristine test file {rel} does not parse: {exc}") from None
    defs = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            defs.append((f"{rel}::{node.name}", rel, node.name, _lines(node)))
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            defs.extend((f"{rel}::{node.name}::{item.name}", rel, item.name, _lines(item))
                        for item in node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                        and item.name.startswith("test"))
    return tuple(defs)


def _lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[int, ...]:
    return tuple(sorted({node.lineno, *(d.lineno for d in node.decorator_list)}))


def plan_grade(sources: list[str], tests: Mapping[str, str], expected_passed: int, timeout: float) -> GradePlan:
    """Validate a grading request (a task author's mistake raises `TaskError`)."""
    checked = tuple(_check_relpath(s, "source") for s in sources)
    if not checked or not tests:
        raise TaskError("grade_pytest needs at least one source and one test file")
    for rel in tests:
        _check_relpath(rel, "test file")
    clashes = [s for s in checked if s in tests or posixpath.basename(s) == "conftest.py"]
    if clashes:
        raise TaskError(f"sources {clashes} clash with the pristine tests or are conftest.py")
    locations = tuple(d for rel in sorted(tests) for d in _test_defs(rel, tests[rel]))
    if not locations:
        raise TaskError("the pristine test files define no test functions")
    return GradePlan(checked, tuple(sorted(tests.items())), int(expected_passed), float(timeout), locations)


def module_names(sources: tuple[str, ...]) -> list[str]:
    """The importable module names of the declared sources (`pkg/__init__.py` -> `pkg`)."""
    names = []
    for rel in sources:
        if not rel.endswith(".py"):
            continue
        parts = rel[:-3].split("/")
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts and all(p.isidentifier() for p in parts):
            names.append(".".join(parts))
    return names


def bootstrap_program(plan: GradePlan, nonce: str, workspace: str = WORKSPACE, tmpdir: str = "/tmp") -> bytes:
    """The Python program sent on stdin: the bootstrap source, its embedded config, the nonce."""
    return f"{_bootstrap_source()}\n\nmain({_config_blob(plan, workspace, tmpdir)!r}, {nonce!r})\n".encode()


@lru_cache(maxsize=256)
def _config_blob(plan: GradePlan, workspace: str, tmpdir: str) -> str:
    """The config, compressed once per plan (every attempt at a task grades against the same
    one): the programs would take the Daytona toolbox transport past its 64 KiB of stdin."""
    config = {
        "workspace": workspace, "tmpdir": tmpdir, "timeout": plan.timeout,
        "sources": list(plan.sources), "tests": dict(plan.tests),
        "locations": {node: {"file": f, "name": n, "lines": list(ls)} for node, f, n, ls in plan.locations},
        "programs": {f"rlgrade_{name}.py": (_HERE / f"grader_{name}.py").read_text()
                     for name in ("start", "runner", "worker", "codec", "proxy", "imports")},
        "modules": module_names(plan.sources),
    }
    return base64.b64encode(zlib.compress(json.dumps(config).encode(), 9)).decode()


@lru_cache(maxsize=1)
def _bootstrap_source() -> str:
    return (_HERE / "grader_bootstrap.py").read_text()


def parse_grade_output(stdout: str, nonce: str) -> dict[str, Any] | None:
    """The last `RLGRADE <json>` line whose nonce matches, or None."""
    for line in reversed(stdout.splitlines()):
        if not line.startswith(VERDICT_PREFIX):
            continue
        try:
            verdict = json.loads(line[len(VERDICT_PREFIX):])
        except ValueError:
            continue
        if isinstance(verdict, dict) and hmac.compare_digest(str(verdict.get("nonce", "")), nonce):
            return verdict
    return None


def final_outcome(phases: Mapping[str, str]) -> str:
    """'passed' only when setup, call and teardown all passed."""
    if all(phases.get(p) == "passed" for p in PHASES):
        return "passed"
    if "failed" in (phases.get("setup"), phases.get("teardown")):
        return "error"
    for phase in ("call", "setup"):
        if phases.get(phase) not in (None, "passed"):
            return phases[phase]
    return "incomplete"


def _base_id(node_id: str) -> str:
    return node_id.split("[", 1)[0]


def _listing(items: list[str], limit: int = 6) -> str:
    more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def _problems(verdict: Mapping[str, Any], outcomes: Mapping[str, str], plan: GradePlan) -> list[str]:
    report = verdict["report"]
    passed = [n for n, o in outcomes.items() if o == "passed"]
    bases = {_base_id(n) for n in passed}
    problems = [f"tampering detected: {_listing(list(report.get('tampered') or []), 3)}"] if report.get("tampered") else []
    if verdict.get("test_files_changed"):
        problems.append(f"pristine test files changed while grading: {_listing(verdict['test_files_changed'])}")
    if report.get("crossing_errors"):
        problems.append("needed something that cannot cross the grading boundary (a task-authoring error "
                        f"if the code is right): {_listing(list(report['crossing_errors']), 3)[:900]}")
    if report.get("collect_errors"):
        problems.append(f"collection errors: {_listing(report['collect_errors'], 1)[:600]}")
    not_passed = [f"{n} ({o})" for n, o in sorted(outcomes.items()) if o != "passed"]
    if not_passed:
        problems.append(f"did not pass: {_listing(not_passed)}")
    if bases - plan.expected_ids:
        problems.append(f"unexpected tests: {_listing(sorted(bases - plan.expected_ids))}")
    if plan.expected_ids - bases - {_base_id(n) for n in outcomes}:
        problems.append(f"did not run: {_listing(sorted(plan.expected_ids - {_base_id(n) for n in outcomes}))}")
    if len(passed) != plan.expected_passed:
        problems.append(f"{len(passed)} tests passed, expected {plan.expected_passed}")
    if report.get("exitstatus") != 0 or verdict.get("returncode") != 0:
        problems.append(f"pytest exit status {report.get('exitstatus')} (process {verdict.get('returncode')})")
    return problems


def judge(verdict: Mapping[str, Any], plan: GradePlan) -> GradeResult:
    """Turn an authenticated bootstrap verdict into a `GradeResult`."""
    expected = plan.expected_passed
    if verdict.get("status") == "timeout":
        return GradeResult(0.0, 0, expected, timed_out=True, detail=str(verdict.get("detail", "timed out")))
    if verdict.get("status") != "ok" or not isinstance(verdict.get("report"), dict):
        tail = str(verdict.get("output") or "")[-300:].strip()
        detail = f"{verdict.get('status')}: {verdict.get('detail', '')}" + (f"; pytest output: {tail}" if tail else "")
        return GradeResult(0.0, 0, expected, detail=detail)
    tests = verdict["report"].get("tests") or {}
    outcomes = {str(n): final_outcome(p if isinstance(p, dict) else {}) for n, p in tests.items()}
    good = sum(1 for n, o in outcomes.items() if o == "passed" and _base_id(n) in plan.expected_ids)
    failed = sum(1 for o in outcomes.values() if o != "passed") + len(verdict["report"].get("collect_errors") or [])
    problems = _problems(verdict, outcomes, plan)
    if verdict["report"].get("tampered") or verdict.get("test_files_changed"):
        good = 0  # outcomes from a tampered run mean nothing
    if problems:
        return GradeResult(0.0, good, expected, failed=failed, detail="; ".join(problems))
    return GradeResult(1.0, good, expected, failed=0, detail=f"{good}/{expected} tests passed")


async def end_leftover_processes(backend: Backend, sandbox: SandboxHandle) -> str:
    """Where processes outlive a command, end every one the agent left ('' or why it failed)."""
    if not getattr(backend, "grading_needs_reap", True):
        return ""  # e.g. LocalBackend: each command's processes die with its pid namespace
    program = (_HERE / "grader_reap.py").read_bytes()
    result = await backend.exec(sandbox, BOOTSTRAP_COMMAND, stdin=program, timeout=EXEC_SLACK_SECONDS, cwd="/")
    if result.exit_code != 0 or "RLREAP " not in result.stdout:
        return f"could not end the agent's processes before grading (exit {result.exit_code}): {result.output[-300:]}"
    return ""


async def grade_pytest(
    backend: Backend,
    sandbox: SandboxHandle,
    *,
    sources: list[str],
    tests: Mapping[str, str],
    expected_passed: int,
    timeout: float = 60.0,
) -> GradeResult:
    """Grade the sandbox's `sources` against pristine `tests` (see the module docstring)."""
    plan = plan_grade(sources, tests, expected_passed, timeout)
    failed_reap = await end_leftover_processes(backend, sandbox)
    if failed_reap:
        return GradeResult(0.0, 0, plan.expected_passed, detail=failed_reap)
    nonce = secrets.token_hex(16)
    result = await backend.exec(sandbox, BOOTSTRAP_COMMAND, stdin=bootstrap_program(plan, nonce),
                                timeout=plan.timeout + EXEC_SLACK_SECONDS)
    if result.timed_out:
        return GradeResult(0.0, 0, plan.expected_passed, timed_out=True,
                           detail=f"grading exceeded {plan.timeout + EXEC_SLACK_SECONDS:.0f}s")
    verdict = parse_grade_output(result.stdout, nonce)
    if verdict is None:
        why = f"exit {result.exit_code}" + (f", {result.limit_hit} limit" if result.limit_hit else "")
        return GradeResult(0.0, 0, plan.expected_passed,
                           detail=f"grader produced no verdict ({why}): {result.output[-500:]}")
    return judge(verdict, plan)
