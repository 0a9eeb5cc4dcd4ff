"""Inside the sandbox: the grading bootstrap, sent as a program on stdin (stdlib only).

The host runs `exec python -I -B -` with this file's source plus a `main(<config>)` call on
stdin, so nothing the agent could prepare sees the program or its host nonce beforehand.

Invariant: the bootstrap prints exactly one line, `RLGRADE <json>` carrying the host nonce,
and only after it copied nothing from the workspace but the declared regular source files into
a fresh `mkdtemp` folder (`src/`, the worker's), wrote the pristine tests beside it (`tests/`,
compiled by the runner from the text it is sent, not from these files), ran `grader_runner`
(pytest, which imports the sources only through its worker) in a clean environment in its own
session, and accepted at most one report from the runner's private pipe, authenticated by a
child nonce the runner learnt through a second pipe.
The bootstrap makes itself non-dumpable first, so the agent's code in the pytest child can
neither read the host nonce from its memory nor write to its stdout through /proc.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import zlib
from typing import Any

MAX_SOURCE_BYTES = 4 << 20
MAX_REPORT_BYTES = 8 << 20
OUTPUT_TAIL = 3000


class GradeFailure(Exception):
    """A verdict reached before pytest ran (missing or refused source)."""

    def __init__(self, status: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status


def make_undumpable() -> None:
    """PR_SET_DUMPABLE=0: /proc/<pid>/{mem,fd} of this process become off limits."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)
    except Exception:  # noqa: BLE001 - best effort where prctl is unavailable
        pass


def read_source(workspace: str, rel: str) -> bytes:
    """The bytes of one declared source, refusing symlinks and anything not a regular file."""
    base = os.path.realpath(workspace)
    path = os.path.join(base, rel)
    if os.path.lexists(path) and os.path.realpath(path) != os.path.normpath(path):
        raise GradeFailure("bad_source", f"source {rel} is a symlink (or under one); refusing it")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise GradeFailure("missing_source", f"source file {rel} is missing from the workspace") from None
    except OSError as exc:
        raise GradeFailure("bad_source", f"source {rel} cannot be opened: {exc.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_SOURCE_BYTES:
        os.close(fd)
        why = "is not a regular file" if not stat.S_ISREG(info.st_mode) else f"exceeds {MAX_SOURCE_BYTES} bytes"
        raise GradeFailure("bad_source", f"source {rel} {why}; refusing it")
    with os.fdopen(fd, "rb") as handle:
        return handle.read(MAX_SOURCE_BYTES + 1)


def write_file(root: str, rel: str, data: bytes, mode: int = 0o644) -> str:
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(data)
    os.chmod(path, mode)
    return path


def file_digest(path: str) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return "unreadable"
    with os.fdopen(fd, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def ini_text(workdir: str) -> str:
    return (
        "[pytest]\naddopts =\npython_files = test_*.py *_test.py\npython_classes = Test\n"
        f"python_functions = test\nxfail_strict = true\npythonpath = {workdir}\n"
    )


def clean_env(home: str) -> dict[str, str]:
    bindir = os.path.dirname(sys.executable)
    return {
        "PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin", "HOME": home, "TMPDIR": home,
        "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }


def prepare(cfg: dict[str, Any]) -> dict[str, Any]:
    """The fresh grading folder: sources (src/), pristine tests (tests/), ini and programs (meta/)."""
    root = tempfile.mkdtemp(prefix="rlgrade-", dir=cfg.get("tmpdir") or None)
    work, src, meta, home = (os.path.join(root, d) for d in ("tests", "src", "meta", "home"))
    for folder in (work, src, meta, home):
        os.makedirs(folder)
    for rel in cfg["sources"]:
        write_file(src, rel, read_source(cfg["workspace"], rel))
    digests = {}
    for rel, text in cfg["tests"].items():
        digests[rel] = hashlib.sha256(text.encode()).hexdigest()
        write_file(work, rel, text.encode(), mode=0o444)
    ini = write_file(meta, "pytest.ini", ini_text(work).encode())
    for name, text in cfg["programs"].items():
        write_file(meta, name, text.encode())
    return {"root": root, "work": work, "src": src, "meta": meta, "home": home, "ini": ini, "digests": digests}


def pytest_args(cfg: dict[str, Any], place: dict[str, Any]) -> list[str]:
    """`--tb=line`: a failure's report carries its exception line, not the source of every
    frame (pytest builds that text for each failed test whatever it prints; it was ~1/4 of
    pytest's own CPU in a grading with five failures). Outcomes come from the runner's report."""
    work = place["work"]
    files = [rel for rel in sorted(cfg["tests"]) if os.path.basename(rel) != "conftest.py"]  # found by pytest
    return ["-p", "no:cacheprovider", "-c", place["ini"], "--rootdir", work, "--confcutdir", work,
            "-q", "-rfE", "--tb=line"] + [os.path.join(work, rel) for rel in files]


def _drain(fd: int, sink: list[bytes]) -> None:
    size = 0
    while chunk := os.read(fd, 65536):
        size += len(chunk)
        if size <= MAX_REPORT_BYTES:
            sink.append(chunk)


def _feed(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        pass
    finally:
        os.close(fd)


def _kill_session(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def run_runner(cfg: dict[str, Any], place: dict[str, Any], child_nonce: str) -> dict[str, Any]:
    """Start the pytest child, feed its config, collect its report; kill its whole session."""
    config_r, config_w = os.pipe()
    report_r, report_w = os.pipe()
    output = open(os.path.join(place["meta"], "pytest-output.txt"), "w+b")
    proc = subprocess.Popen(
        [sys.executable, "-I", "-B", os.path.join(place["meta"], "rlgrade_start.py"), str(config_r), str(report_w),
         place["meta"], place["src"], place["home"]],
        cwd=place["work"], env=clean_env(place["meta"]), stdin=subprocess.DEVNULL,
        stdout=output, stderr=subprocess.STDOUT, pass_fds=(config_r, report_w), start_new_session=True,
    )
    os.close(config_r)
    os.close(report_w)
    runner_cfg = {"nonce": child_nonce, "workdir": place["work"], "locations": cfg["locations"],
                  "pytest_args": pytest_args(cfg, place), "tests": cfg["tests"], "modules": cfg["modules"],
                  "root": place["root"], "timeout": cfg["timeout"]}
    threading.Thread(target=_feed, args=(config_w, json.dumps(runner_cfg).encode()), daemon=True).start()
    chunks: list[bytes] = []
    reader = threading.Thread(target=_drain, args=(report_r, chunks), daemon=True)
    reader.start()
    try:
        returncode, timed_out = proc.wait(timeout=cfg["timeout"]), False
    except subprocess.TimeoutExpired:
        returncode, timed_out = None, True
    _kill_session(proc.pid)
    proc.wait()
    reader.join(timeout=2.0)
    output.seek(0)
    tail = output.read()[-OUTPUT_TAIL:].decode("utf-8", "replace")
    return {"returncode": returncode, "timed_out": timed_out, "report": b"".join(chunks), "output": tail}


def parse_report(data: bytes, child_nonce: str) -> dict[str, Any] | None:
    """The runner's single report line, or None if absent, repeated, or not authenticated."""
    lines = [line for line in data.split(b"\n") if line.strip()]
    if len(lines) != 1:
        return None
    token, _, payload = lines[0].partition(b" ")
    if not hmac.compare_digest(token, child_nonce.encode()):
        return None
    try:
        report = json.loads(payload)
    except ValueError:
        return None
    return report if isinstance(report, dict) else None


def grade(cfg: dict[str, Any]) -> dict[str, Any]:
    place = prepare(cfg)
    child_nonce = secrets.token_hex(16)
    run = run_runner(cfg, place, child_nonce)
    changed = [rel for rel, digest in place["digests"].items()
               if file_digest(os.path.join(place["work"], rel)) != digest]
    verdict = {"returncode": run["returncode"], "output": run["output"], "test_files_changed": changed}
    if run["timed_out"] or run["returncode"] == -signal.SIGXCPU:
        limit = f"{cfg['timeout']}s" if run["timed_out"] else "its CPU time limit"
        return {**verdict, "status": "timeout", "detail": f"pytest did not finish within {limit}"}
    report = parse_report(run["report"], child_nonce)
    if report is None:
        status = "bad_report" if run["report"].strip() else "no_report"
        return {**verdict, "status": status, "detail": "pytest ended without a valid grader report"}
    return {**verdict, "status": "ok", "detail": "", "report": report}


def main(config_b64: str, nonce: str) -> None:
    make_undumpable()
    cfg = {**json.loads(zlib.decompress(base64.b64decode(config_b64))), "nonce": nonce}
    try:
        verdict = grade(cfg)
    except GradeFailure as exc:
        verdict = {"status": exc.status, "detail": str(exc)}
    except Exception as exc:  # noqa: BLE001 - any grader crash is a verdict, not a traceback
        verdict = {"status": "grader_error", "detail": f"{type(exc).__name__}: {exc}"}
    verdict["nonce"] = cfg["nonce"]
    sys.stdout.write("\nRLGRADE " + json.dumps(verdict) + "\n")
    sys.stdout.flush()
