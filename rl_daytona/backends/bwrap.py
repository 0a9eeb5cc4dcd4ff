"""Run one shell command under resource limits, optionally inside a bubblewrap sandbox.

Invariant: a sandboxed command sees a read-only tmpfs root holding only /usr, the Python
install, a curated handful of /etc files, private /dev, /proc and size-capped /tmp and
/dev/shm, and `/workspace` as its only writable host path; it runs as uid 1000 in fresh user,
pid, net, ipc, uts and cgroup namespaces with a clean environment, and it dies with its bwrap.
`run_limited` always returns an outcome for a command that ran; it raises only when the
process could not be started.
"""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping

from rl_daytona.backends.base import WORKSPACE, IsolationUnavailableError
from rl_daytona.types import SandboxLimits

_MB = 1024 * 1024
OUTPUT_KILL_FACTOR = 16  # a command producing 16x the output cap is killed (limit "output")
_DRAIN_GRACE = 1.0  # seconds to wait for pipes after the command exited
_ETC_FILES = ("alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime",
              "nsswitch.conf", "protocols")
_ETC_DATA = {
    "/etc/passwd": b"root:x:0:0::/root:/usr/sbin/nologin\nsandbox:x:1000:1000::/workspace:/bin/sh\n",
    "/etc/group": b"root:x:0:\nsandbox:x:1000:\n",
    "/etc/hosts": b"127.0.0.1 localhost\n::1 localhost\n",
}
_smoke_results: dict[tuple[str, "PythonLayout"], str | None] = {}


@dataclass(frozen=True)
class PythonLayout:
    """Where the sandbox's Python lives: its bin dir (first on PATH) and prefixes to bind."""

    bin_dir: str
    prefixes: tuple[str, ...]

    @classmethod
    def probe(cls, python: str) -> PythonLayout:
        if os.path.abspath(python) == os.path.abspath(sys.executable):
            found = [sys.prefix, sys.base_prefix]
        else:
            out = subprocess.run([python, "-c", "import sys;print(sys.prefix);print(sys.base_prefix)"],
                                 capture_output=True, text=True, check=True, timeout=30)
            found = out.stdout.split()
        found.append(os.path.dirname(os.path.realpath(python)))
        return cls(os.path.dirname(os.path.abspath(python)), _outermost(found))


def _outermost(paths: list[str]) -> tuple[str, ...]:
    """Absolute paths with the ones under /usr or under another listed path dropped."""
    kept: list[str] = ["/usr"]
    for path in sorted({os.path.realpath(p) for p in paths}, key=len):
        if not any(path == k or path.startswith(k + "/") for k in kept):
            kept.append(path)
    return tuple(kept[1:])


@dataclass(frozen=True)
class WorkspaceView:
    """How /workspace is assembled: a plain bind of `upper`, or an overlay over `lowers`."""

    upper: Path
    lowers: tuple[Path, ...] = ()  # bottom first
    work: Path | None = None
    extra_binds: tuple[tuple[Path, str], ...] = ()  # writable (host, sandbox path)


def clean_env(path: str, home: str, extra: Mapping[str, str] | None) -> dict[str, str]:
    """The whole environment a command gets: never a host variable."""
    env = {"PATH": path, "HOME": home, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    env.update(extra or {})
    return env


def bwrap_argv(bwrap: str, view: WorkspaceView, python: PythonLayout, limits: SandboxLimits, *,
               env: Mapping[str, str], cwd: str, etc_fds: Mapping[str, int],
               command: list[str]) -> list[str]:
    """The full bwrap command line for `command` (see the module invariant)."""
    argv = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--uid", "1000",
            "--gid", "1000", "--hostname", "sandbox", "--die-with-parent", "--new-session",
            "--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    argv += ["--tmpfs", "/", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
             "--symlink", "usr/sbin", "/sbin", "--symlink", "usr/lib", "/lib"]
    if os.path.isdir("/usr/lib64"):
        argv += ["--symlink", "usr/lib64", "/lib64"]
    for prefix in python.prefixes:
        argv += ["--ro-bind", prefix, prefix]
    argv += _etc_args(etc_fds)
    tmp_bytes = str(limits.workspace_mb * _MB)
    argv += ["--dev", "/dev", "--size", tmp_bytes, "--tmpfs", "/dev/shm", "--proc", "/proc",
             "--size", tmp_bytes, "--tmpfs", "/tmp"]
    argv += _workspace_args(view)
    argv += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", cwd, *command]
    return argv


def _etc_args(etc_fds: Mapping[str, int]) -> list[str]:
    args: list[str] = []
    for name in _ETC_FILES:
        if os.path.exists(f"/etc/{name}"):
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    for dest, fd in etc_fds.items():
        args += ["--ro-bind-data", str(fd), dest]
    return args


def _workspace_args(view: WorkspaceView) -> list[str]:
    if view.lowers:
        args = [a for lower in view.lowers for a in ("--overlay-src", str(lower))]
        args += ["--overlay", str(view.upper), str(view.work), WORKSPACE]
    else:
        args = ["--bind", str(view.upper), WORKSPACE]
    for host, dest in view.extra_binds:
        args += ["--bind", str(host), dest]
    return args


@contextmanager
def etc_pipes() -> Iterator[dict[str, int]]:
    """Read ends of pipes holding the synthetic /etc files (closed on exit)."""
    fds: dict[str, int] = {}
    try:
        for dest, data in _ETC_DATA.items():
            read_end, write_end = os.pipe()
            fds[dest] = read_end
            os.write(write_end, data)  # tiny: always fits the pipe buffer
            os.close(write_end)
        yield fds
    finally:
        for fd in fds.values():
            os.close(fd)


def check_bwrap(bwrap: str, python: PythonLayout) -> None:
    """Raise IsolationUnavailableError unless bwrap runs (plain and overlay); cached."""
    key = (bwrap, python)
    if key not in _smoke_results:
        _smoke_results[key] = _smoke_test(bwrap, python)
    if _smoke_results[key] is not None:
        raise IsolationUnavailableError(
            f"bubblewrap cannot run here ({bwrap}): {_smoke_results[key]}; "
            "pass --isolation none to run sandboxes without isolation (explicit opt-out)")


def _smoke_test(bwrap: str, python: PythonLayout) -> str | None:
    with tempfile.TemporaryDirectory(prefix="rl-daytona-bwrap-") as tmp:
        dirs = [Path(tmp, name) for name in ("lower", "upper", "work")]
        for path in dirs:
            path.mkdir()
        view = WorkspaceView(upper=dirs[1], lowers=(dirs[0],), work=dirs[2])
        with etc_pipes() as fds:
            argv = bwrap_argv(bwrap, view, python, SandboxLimits(), env={}, cwd=WORKSPACE,
                              etc_fds=fds, command=["true"])
            try:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=30,
                                      pass_fds=tuple(fds.values()), env={})
            except (OSError, subprocess.TimeoutExpired) as exc:
                return f"{type(exc).__name__}: {exc}"
    if done.returncode == 0:
        return None
    return done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"


@dataclass(frozen=True)
class RunOutcome:
    """What one process did; stdout/stderr are already capped."""

    returncode: int
    stdout: bytes
    stderr: bytes
    seconds: float
    timed_out: bool = False
    output_truncated: bool = False
    output_killed: bool = False


def limit_setter(limits: SandboxLimits, *, nproc: bool) -> Callable[[], None]:
    """A preexec_fn applying the limits in the child right before it execs."""
    def apply() -> None:
        cpu = limits.cpu_seconds
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_mb * _MB,) * 2)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.max_file_mb * _MB,) * 2)
        if nproc:
            resource.setrlimit(resource.RLIMIT_NPROC, (limits.max_processes,) * 2)
    return apply


class _Capture:
    """Keeps the first `cap` bytes of each stream; asks for a kill past the kill threshold."""

    def __init__(self, cap: int, kill: Callable[[], None]) -> None:
        self.cap, self.kill = cap, kill
        self.kept = (bytearray(), bytearray())
        self.seen = 0
        self.truncated = self.killed = False

    def take(self, index: int, chunk: bytes) -> None:
        self.seen += len(chunk)
        room = self.cap - len(self.kept[index])
        self.kept[index].extend(chunk[:max(room, 0)])
        self.truncated |= len(chunk) > room
        if self.seen > OUTPUT_KILL_FACTOR * self.cap and not self.killed:
            self.killed = True
            self.kill()


async def run_limited(argv: list[str], *, limits: SandboxLimits, timeout: float,
                      stdin: bytes | None, output_cap: int, env: Mapping[str, str],
                      cwd: str | None = None, pass_fds: tuple[int, ...] = (),
                      nproc: bool = True, running: set[int] | None = None) -> RunOutcome:
    """Run `argv` in its own session under the limits; kill it all at the deadline."""
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(env), cwd=cwd,
        pass_fds=pass_fds, start_new_session=True, preexec_fn=limit_setter(limits, nproc=nproc))
    if running is not None:
        running.add(proc.pid)
    try:
        return await _supervise(proc, started, timeout, stdin, output_cap)
    finally:
        if running is not None:
            running.discard(proc.pid)


async def _supervise(proc: asyncio.subprocess.Process, started: float, timeout: float,
                     stdin: bytes | None, output_cap: int) -> RunOutcome:
    capture = _Capture(output_cap, lambda: kill_now(proc.pid))
    pumps = asyncio.gather(_drain(proc.stdout, 0, capture), _drain(proc.stderr, 1, capture),
                           _feed(proc.stdin, stdin))
    timed_out = False
    try:
        await asyncio.wait_for(proc.wait(), timeout)
    except TimeoutError:
        timed_out = True
        await _kill_tree(proc)
    seconds = time.monotonic() - started
    try:
        await asyncio.wait_for(asyncio.shield(pumps), _DRAIN_GRACE)
    except TimeoutError:  # something that outlived the command still holds the pipes
        kill_now(proc.pid)
        pumps.cancel()
        with suppress(asyncio.CancelledError):
            await pumps
    return RunOutcome(124 if timed_out else proc.returncode, bytes(capture.kept[0]),
                      bytes(capture.kept[1]), seconds, timed_out, capture.truncated,
                      capture.killed)


async def _drain(stream: asyncio.StreamReader | None, index: int, capture: _Capture) -> None:
    while stream is not None and (chunk := await stream.read(65536)):
        capture.take(index, chunk)


async def _feed(stream: asyncio.StreamWriter | None, data: bytes | None) -> None:
    if stream is None:
        return
    with suppress(BrokenPipeError, ConnectionResetError):
        stream.write(data or b"")
        await stream.drain()
        stream.close()


async def _kill_tree(proc: asyncio.subprocess.Process) -> None:
    """Kill the children first so bwrap reaps them (their CPU time reaches us), then all."""
    _kill_children(proc.pid)
    try:
        await asyncio.wait_for(proc.wait(), 1.0)
    except TimeoutError:
        kill_now(proc.pid)
        await proc.wait()


def _kill_children(pid: int) -> None:
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    for child in children:
        with suppress(ProcessLookupError, PermissionError):
            os.kill(int(child), signal.SIGKILL)


def kill_now(pid: int) -> None:
    """SIGKILL the process group led by `pid` (a bwrap: its pid namespace dies with it)."""
    _kill_children(pid)
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
