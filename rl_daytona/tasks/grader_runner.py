"""Inside the sandbox: the trusted pytest process of the grading bootstrap (stdlib + pytest only).

Started by `grader_start` (which forked the worker first) as `main([_, <config_fd>, <report_fd>],
channel, worker pid)` in the process `grader_bootstrap` launched. It makes itself
non-dumpable (no ptrace, no /proc/<pid>/mem or fd access by other processes of its uid), reads
its config (a child nonce, the pristine test texts, the declared module names, the pytest
arguments, where each pristine test function is defined) from a pipe and closes it, installs
the import boundary (`grader_imports`: declared modules become proxies of a worker process,
pristine tests are compiled from memory, any other file is refused), runs
`pytest.main(..., plugins=[plugin])`, kills the worker, and writes exactly one report line
`<child nonce> <json>` to the inherited report pipe. The agent's code runs only in the worker
(`grader_worker`), a child started with nothing but its channel.

Invariant: a test counts as passed only when its setup, call and teardown phases all passed,
its function is the one defined in the pristine test file, and nothing the tests rely on
(builtins, pytest's runner and reports, pluggy, math, operator, json) was altered and no
plugin (a conftest, a hook registered at import time) appeared after collection began.
Anything else is written into the report's `tampered` list, which the host treats as reward 0.

The tamper checks below guard against this process's own imports only (the agent's code no
longer runs here); they are kept as a cheap second line. A test that needed something that
cannot cross the boundary is listed in the report's `crossing_errors`.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import types
from typing import Any

import pytest

MAX_PROBLEMS = 50
GUARDED_MODULES = (
    "builtins", "pytest", "_pytest.runner", "_pytest.reports", "_pytest.python", "_pytest.main",
    "_pytest.outcomes", "_pytest.fixtures", "_pytest.skipping", "_pytest.assertion.rewrite",
    "_pytest.assertion.util", "pluggy._hooks", "pluggy._callers", "pluggy._manager",
    "math", "operator", "json", "json.encoder",
)


Scope = tuple[str, str]  # (module name, class name or "")


def _namespace(scope: Scope) -> dict[str, Any]:
    module = sys.modules.get(scope[0])
    owner = getattr(module, scope[1], None) if scope[1] else module
    return dict(vars(owner)) if owner is not None else {}


def snapshot_state(module_names: tuple[str, ...] = GUARDED_MODULES) -> dict[Scope, dict[str, Any]]:
    """Every guarded module's namespace, and the namespace of each class it defines."""
    state: dict[Scope, dict[str, Any]] = {}
    for name in module_names:
        __import__(name)
        state[(name, "")] = _namespace((name, ""))
        for attr, value in state[(name, "")].items():
            if isinstance(value, type) and value.__module__ == name:
                state[(name, attr)] = _namespace((name, attr))
    return state


def changed_names(before: dict[Scope, dict[str, Any]]) -> list[str]:
    """Names whose binding changed since `before` (builtins also may not gain names)."""
    changed: list[str] = []
    for scope, snap in before.items():
        now, label = _namespace(scope), ".".join(part for part in scope if part)
        changed.extend(f"{label}.{key}" for key, value in snap.items()
                       if key not in now or now[key] is not value)
        if scope == ("builtins", ""):
            changed.extend(f"builtins.{key} (added)" for key in now.keys() - snap.keys())
    return changed


def phase_outcome(report: Any) -> str:
    """One phase's outcome; an xfail/xpass never counts as passed."""
    if hasattr(report, "wasxfail"):
        return "xfail"
    return str(report.outcome)


class GradePlugin:
    """Records per-phase outcomes and tampering, then writes one report line."""

    def __init__(self, nonce: str, report_fd: int, locations: dict[str, dict[str, Any]],
                 workdir: str, crossing_errors: list[str] | None = None) -> None:
        self._nonce = nonce
        self._report_fd = report_fd
        self._locations = locations
        self._workdir = workdir
        self._write, self._dumps = os.write, json.dumps
        self._state = snapshot_state()
        self._phases: dict[str, dict[str, str]] = {}
        self._collect_errors: list[str] = []
        self._tampered: list[str] = []
        self._plugins: set[int] | None = None
        self._exitstatus: int | None = None
        self._written = False
        self._crossing_errors = crossing_errors if crossing_errors is not None else []

    def pytest_collection(self, session: Any) -> None:
        self._plugins = {id(p) for p in session.config.pluginmanager.get_plugins()}

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self._collect_errors.append(f"{report.nodeid or '<session>'}: {report.longreprtext[-600:]}")

    def pytest_collection_finish(self, session: Any) -> None:
        self._check_integrity(session, "during collection")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: Any) -> None:
        problem = self._function_problem(item)
        if problem:
            self._tampered.append(f"{item.nodeid}: {problem}")

    def pytest_runtest_logreport(self, report: Any) -> None:
        self._phases.setdefault(report.nodeid, {})[report.when] = phase_outcome(report)

    def pytest_sessionfinish(self, session: Any, exitstatus: int) -> None:
        self._exitstatus = int(exitstatus)
        self._check_integrity(session, "by the end of the session")
        self.write_report()

    def _check_integrity(self, session: Any, when: str) -> None:
        self._tampered.extend(f"{name} was modified {when}" for name in changed_names(self._state))
        if self._plugins is not None:
            now = session.config.pluginmanager.get_plugins()
            extra = [repr(p)[:120] for p in now if id(p) not in self._plugins]
            self._tampered.extend(f"plugin registered {when}: {p}" for p in extra)

    def _function_problem(self, item: Any) -> str:
        base = item.nodeid.split("[", 1)[0]
        where = self._locations.get(base)
        if where is None:
            return "not a test of the pristine test files"
        fn = inspect.unwrap(getattr(getattr(item, "obj", None), "__func__", getattr(item, "obj", None)))
        code = getattr(fn, "__code__", None)
        if not isinstance(code, types.CodeType):
            return "test object has no code"
        expected_file = os.path.realpath(os.path.join(self._workdir, where["file"]))
        same_place = os.path.realpath(code.co_filename) == expected_file
        if not (same_place and code.co_name == where["name"] and code.co_firstlineno in where["lines"]):
            return "test function is not the one defined in the pristine test file"
        return ""

    def write_report(self) -> None:
        """Write the single report line (once)."""
        if self._written:
            return
        self._written = True
        tampered = list(dict.fromkeys(self._tampered))[:MAX_PROBLEMS]
        body = {"tests": self._phases, "collect_errors": self._collect_errors[:MAX_PROBLEMS],
                "tampered": tampered, "exitstatus": self._exitstatus,
                "crossing_errors": list(dict.fromkeys(self._crossing_errors))[:MAX_PROBLEMS]}
        data = f"{self._nonce} {self._dumps(body)}\n".encode()
        while data:
            data = data[self._write(self._report_fd, data):]
        os.close(self._report_fd)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def make_undumpable() -> None:
    """PR_SET_DUMPABLE=0 before the worker exists: its uid cannot ptrace or read us via /proc."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)
    except Exception:  # noqa: BLE001 - best effort where prctl is unavailable
        pass


def boundary(config: dict[str, Any], sock: Any, worker_pid: int) -> Any:
    """The worker channel, with the proxy finder and the firewall installed."""
    import rlgrade_imports
    import rlgrade_proxy

    channel = rlgrade_proxy.Channel(sock, worker_pid, float(config["timeout"]))
    pristine = {os.path.realpath(os.path.join(config["workdir"], rel)): text for rel, text in config["tests"].items()}
    rlgrade_imports.install(channel, config["modules"], pristine, config["root"])
    return channel, rlgrade_proxy.CROSSING_ERRORS


def main(argv: list[str], sock: Any, worker_pid: int) -> int:
    """Grade (argv: config fd, report fd); the worker is already forked (`grader_start`)."""
    make_undumpable()
    config = json.loads(_read_all(int(argv[1])))
    channel, crossing_errors = boundary(config, sock, worker_pid)
    plugin = GradePlugin(config["nonce"], int(argv[2]), config["locations"], config["workdir"], crossing_errors)
    try:
        code = pytest.main(list(config["pytest_args"]), plugins=[plugin])
    finally:
        channel.close()
    plugin.write_report()
    return int(code)
