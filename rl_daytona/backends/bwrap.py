"""Run one shell command under resource limits, optionally inside a bubblewrap sandbox.

Invariant: a sandboxed command sees a read-only staged root (`sandbox_support.stage_root`)
holding only /usr, the Python install (its `PythonLayout.hidden` files read as empty), a
curated handful of /etc files, private /dev (six nodes and its own ptys), /proc and size-capped
/tmp and /dev/shm, and `/workspace` as its only writable host path; it runs as uid 1000 (never host
root, so RLIMIT_NPROC binds, counted per command) in fresh user, pid, net, ipc, uts and cgroup
namespaces with a clean environment and no capabilities, and it dies with its bwrap.
Its pid 1 is the compiled `sandbox_init.c` helper (limits, user drop, reaping: one exec), or,
where no C compiler is found, util-linux prlimit + setpriv + a pid-1 sh (~3 ms more per command).
`run_limited` always returns an outcome for a command that ran; it raises only when the
process could not be started. A `watch` coroutine (e.g. `disk_quota.QuotaWatch.watch`) runs
beside the command and is handed the same kill as every other limit: the process group and
the sandbox's escaped pid 1; it is cancelled once the command has exited.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Awaitable, Callable, Mapping

from rl_daytona.backends.base import WORKSPACE, IsolationUnavailableError
from rl_daytona.backends import supervise as sv
from rl_daytona.backends.sandbox_support import EMPTY_PATH, INIT_PATH, Support, host_support
from rl_daytona.backends.supervise import RunOutcome
from rl_daytona.types import SandboxLimits

_MB = 1024 * 1024
HOST_ID = 1_000_000  # as root: the host uid/gid of sandbox processes (never root: NPROC)
_PID1 = ["sh", "-c", '"$@"; exit $?', "sh"]  # pid 1 forks the command; its CPU time reaches us
_CHILD_PID = re.compile(rb'"child-pid":\s*(\d+)\s*[,}]')
_smoke_results: dict[tuple[str, "PythonLayout", bool], tuple["Support", str | None]] = {}


@dataclass(frozen=True)
class PythonLayout:
    """Where the sandbox's Python lives: its bin dir (first on PATH), prefixes to bind, and
    `hidden`: files under them a sandbox sees empty (`_OWN_EDITABLE`)."""

    bin_dir: str
    prefixes: tuple[str, ...]
    hidden: tuple[str, ...] = ()

    @classmethod
    def probe(cls, python: str) -> PythonLayout:
        if os.path.abspath(python) == os.path.abspath(sys.executable):
            import site

            found, sites = [sys.prefix, sys.base_prefix], site.getsitepackages()
        else:
            out = subprocess.run([python, "-c", "import sys,site;print(sys.prefix);print(sys.base_prefix);"
                                  "print(*site.getsitepackages(),sep=chr(10))"],
                                 capture_output=True, text=True, check=True, timeout=30)
            lines = out.stdout.splitlines()
            found, sites = lines[:2], lines[2:]
        found.append(os.path.dirname(os.path.realpath(python)))
        hidden = sorted(str(p) for d in sites for p in Path(d).glob(_OWN_EDITABLE) if p.is_file())
        return cls(os.path.dirname(os.path.abspath(python)), _outermost(found), tuple(hidden))


# An editable install of rl_daytona itself: its .pth imports a finder (pathlib, importlib.util,
# urllib...) in every Python start, ~25 ms CPU each, for a package whose source folder is not
# in the sandbox anyway. Sandboxes see the file empty (the package stays out of their sys.path).
_OWN_EDITABLE = "__editable__.rl_daytona-*.pth"


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
    """The whole environment a command gets: never a host variable.

    The sandbox's Python is the host interpreter, so pytest plugins installed for the host
    (ray's, anyio's) are not the task's: autoloading them only doubles every test run's startup.
    """
    env = {"PATH": path, "HOME": home, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env.update(extra or {})
    return env


def init_args(limits: SandboxLimits, *, switch_user: bool, devpts: bool = False) -> list[str]:
    """The helper's command line up to `--`: every limit, the drop to 1000 as root, and the
    private devpts a staged /dev needs."""
    args = [INIT_PATH, *(f"-{name[0]}={soft}:{hard}" for name, _, soft, hard in _limit_pairs(limits, nproc=True))]
    return [*args, *(["-u=1000:1000"] if switch_user else []), *(["-t"] if devpts else []), "--"]


def bwrap_argv(bwrap: str, view: WorkspaceView, python: PythonLayout, limits: SandboxLimits, *,
               env: Mapping[str, str], cwd: str, launch: Launch, command: list[str],
               support: Support) -> list[str]:
    """The full bwrap command line for `command` (see the module invariant). With the helper
    it runs the limits itself; without it the caller adds the prlimit prefix (`run_limited`)."""
    argv = [bwrap, "--unshare-all", "--as-pid-1", "--hostname", "sandbox", "--die-with-parent",
            "--new-session", "--clearenv", *launch.user_args(devpts=support.staged_dev)]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    mount_points = (*python.prefixes, *(dest for _, dest in view.extra_binds))
    tmp_bytes = str(limits.workspace_mb * _MB)
    root = support.root(mount_points)
    argv += ["--ro-bind", str(root), "/", "--ro-bind", "/usr", "/usr",
             "--perms", "1777", "--size", tmp_bytes, "--tmpfs", "/tmp"]
    argv += _dirs_under_tmp(mount_points)  # e.g. a CI clone's venv: bound on top of /tmp
    for prefix in python.prefixes:
        argv += ["--ro-bind", prefix, prefix]
    for hidden in python.hidden:
        argv += ["--ro-bind", str(root / EMPTY_PATH), hidden]
    # the staged nodes, bound with devices allowed (read-only would also mean nodev): the
    # directory is host root's, so the sandbox user cannot change it
    argv += ["--dev-bind", str(root / "dev"), "/dev"] if support.staged_dev \
        else ["--dev", "/dev"]
    argv += ["--perms", "1777", "--size", tmp_bytes, "--tmpfs", "/dev/shm", "--proc", "/proc"]
    argv += _workspace_args(view)
    if not support.staged_dev:
        argv += ["--remount-ro", "/dev"]
    argv += ["--chdir", cwd]
    if support.init is not None:
        return argv + init_args(limits, switch_user=launch.host_id is not None,
                                devpts=support.staged_dev) + command
    return argv + launch.drop_to_sandbox_user() + _PID1 + command


@functools.lru_cache(maxsize=256)
def _dirs_under_tmp(paths: tuple[str, ...]) -> tuple[str, ...]:
    """World-readable directories on the per-command /tmp for bind targets under it (the
    staged root holds every other mount point; bwrap would copy e.g. /root's mode 700)."""
    under = sorted({str(p) for path in paths for p in (Path(path), *Path(path).parents)
                    if str(p).startswith("/tmp/")}, key=len)
    return tuple(a for path in under for a in ("--perms", "0755", "--dir", path))


def _workspace_args(view: WorkspaceView) -> list[str]:
    if view.lowers:
        args = [a for lower in view.lowers for a in ("--overlay-src", str(lower))]
        args += ["--overlay", str(view.upper), str(view.work), WORKSPACE]
    else:
        args = ["--bind", str(view.upper), WORKSPACE]
    for host, dest in view.extra_binds:
        args += ["--bind", str(host), dest]
    return args


def sandbox_host_id() -> int | None:
    """The host uid/gid sandbox processes run as when we are root (None: our own uid)."""
    return HOST_ID if os.geteuid() == 0 else None


@functools.lru_cache(maxsize=1)
def _setpriv_pdeathsig() -> tuple[str, ...]:
    try:
        usage = subprocess.run(["setpriv", "--help"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    return ("--pdeathsig", "KILL") if "--pdeathsig" in usage else ()


class Launch:
    """The fds one bwrap launch needs as root: the userns handshake.

    As root, bwrap's own mapping would make the sandbox user host root, for which the kernel
    skips RLIMIT_NPROC. So we write the maps ourselves (uid/gid 1000 -> HOST_ID, 0 -> 0 for
    setup only) while bwrap waits on --userns-block-fd; the helper (or setpriv) then drops to
    1000, no caps.
    """

    def __init__(self) -> None:
        self.host_id = sandbox_host_id()
        self.child_pid: int | None = None  # the sandbox's pid 1 (host pid), once bwrap reports it
        self._own: list[int] = []
        if self.host_id is not None:
            self._info_r, self._info_w = self._pair()
            self._block_r, self._block_w = self._pair()

    def _pair(self) -> tuple[int, int]:
        read_end, write_end = os.pipe()
        self._own += [read_end, write_end]
        return read_end, write_end

    def user_args(self, devpts: bool = False) -> list[str]:
        """bwrap's user-namespace options; `devpts`: pid 1 also keeps CAP_SYS_ADMIN (in the
        sandbox's namespaces only) to mount its devpts, then drops it with the rest."""
        if self.host_id is None:
            return ["--unshare-user", "--disable-userns", "--uid", "1000", "--gid", "1000"]
        return ["--unshare-user", "--info-fd", str(self._info_w), "--userns-block-fd",
                str(self._block_r), "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
                *(["--cap-add", "CAP_SYS_ADMIN"] if devpts else [])]

    def drop_to_sandbox_user(self) -> list[str]:
        """setpriv's drop to 1000; it also sets again the parent-death signal the uid switch
        clears, where its util-linux is new enough (2.33+) to."""
        if self.host_id is None:
            return []
        return ["setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "--inh-caps=-all",
                "--bounding-set=-all", "--no-new-privs", *_setpriv_pdeathsig(), "--"]

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return () if self.host_id is None else (self._info_w, self._block_r)

    def spawned(self) -> None:
        """Close our copies of the child's ends (so EOF means bwrap went away)."""
        for fd in self.pass_fds:
            self._close(fd)

    async def handshake(self, timeout: float = 30.0) -> None:
        if self.host_id is not None:
            info = await asyncio.wait_for(_read_until_eof(self._info_r), timeout)
            self._finish(info)

    def handshake_blocking(self) -> None:
        if self.host_id is not None:
            with os.fdopen(os.dup(self._info_r), "rb") as info:
                self._finish(info.read())

    def _finish(self, info: bytes) -> None:
        """Write the sandbox's maps, then release bwrap. Only the pid is read from the info
        (JSON): a bwrap killed while writing it (a delete racing the command's start) leaves
        it cut short or empty, and then no maps are written: `_supervise` reports the kill.
        The pid counts only when a delimiter follows it (a cut number names another process)."""
        found = _CHILD_PID.search(info)
        if found:
            pid = self.child_pid = int(found.group(1))
            line = f"0 0 1\n1000 {self.host_id} 1\n".encode()
            try:
                for name in ("uid_map", "gid_map"):
                    fd = os.open(f"/proc/{pid}/{name}", os.O_WRONLY | os.O_CLOEXEC)
                    try:
                        os.write(fd, line)
                    finally:
                        os.close(fd)
            except (FileNotFoundError, ProcessLookupError):
                pass  # the sandbox died with its bwrap before we got here
        self._close(self._block_w)  # EOF on the block fd releases bwrap

    def _close(self, fd: int) -> None:
        if fd in self._own:
            self._own.remove(fd)
            os.close(fd)

    def close(self) -> None:
        for fd in list(self._own):
            self._close(fd)

    def __enter__(self) -> Launch:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


async def _read_until_eof(fd: int) -> bytes:
    """Read a pipe to EOF without blocking the loop (bwrap closes --info-fd after writing)."""
    loop, chunks = asyncio.get_running_loop(), []
    os.set_blocking(fd, False)
    while True:
        ready = loop.create_future()
        loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
        try:
            await ready
        finally:
            loop.remove_reader(fd)
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            continue
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def check_bwrap(bwrap: str, python: PythonLayout, *, helper: bool = True) -> Support:
    """The support sandboxes run with here, the first that runs a sandbox (plain and overlay,
    /dev/null and a pty usable): the helper with the staged /dev, the helper with bwrap's
    `--dev`, the prlimit/setpriv/sh chain; IsolationUnavailableError when none does.
    Cached per process."""
    key = (bwrap, python, helper)
    if key not in _smoke_results:
        best = host_support(helper)
        fallbacks = [replace(best, devices=False), Support(best.etc, None)]
        support, error = best, _smoke_test(bwrap, python, best)
        for fallback in fallbacks:
            if error is None:
                break
            if fallback != support and _smoke_test(bwrap, python, fallback) is None:
                support, error = fallback, None
        _smoke_results[key] = (support, error)
    support, error = _smoke_results[key]
    if error is not None:
        raise IsolationUnavailableError(
            f"bubblewrap cannot run here ({bwrap}): {error}; "
            "pass --isolation none to run sandboxes without isolation (explicit opt-out)")
    return support


def _smoke_test(bwrap: str, python: PythonLayout, support: Support) -> str | None:
    with tempfile.TemporaryDirectory(prefix="rl-daytona-bwrap-") as tmp, Launch() as launch:
        view = WorkspaceView(Path(tmp, "upper"), (Path(tmp, "lower"),), Path(tmp, "work"))
        for path in (view.upper, view.work, *view.lowers):
            path.mkdir()
            if launch.host_id is not None:
                os.chown(path, launch.host_id, launch.host_id)
        argv = bwrap_argv(bwrap, view, python, SandboxLimits(), env={}, cwd=WORKSPACE,
                          launch=launch, command=["sh", "-c", _SMOKE_COMMAND], support=support)
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    pass_fds=launch.pass_fds, env={}, text=True)
            launch.spawned()
            launch.handshake_blocking()
            _, stderr = proc.communicate(timeout=30)
        except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
            return f"{type(exc).__name__}: {exc}"
        if proc.returncode == 0 and Path(tmp, "upper", "ok").exists():
            return None
    return stderr.strip().splitlines()[-1] if stderr.strip() else f"exit {proc.returncode}"


_SMOKE_COMMAND = f": >/dev/null && test -c /dev/pts/ptmx && touch {WORKSPACE}/ok"


Watcher = Callable[[Callable[[], None]], Awaitable[None]]  # given the kill; runs beside a command


def _limit_pairs(limits: SandboxLimits, *, nproc: bool) -> list[tuple[str, int, int, int]]:
    """(prlimit option, resource, soft, hard) for every limit a command runs under."""
    cpu = limits.cpu_seconds
    pairs = [("cpu", resource.RLIMIT_CPU, cpu, cpu + 1),
             ("as", resource.RLIMIT_AS, limits.memory_mb * _MB, limits.memory_mb * _MB),
             ("fsize", resource.RLIMIT_FSIZE, limits.max_file_mb * _MB, limits.max_file_mb * _MB)]
    if nproc:
        pairs.append(("nproc", resource.RLIMIT_NPROC, limits.max_processes, limits.max_processes))
    return pairs


def limit_setter(limits: SandboxLimits, *, nproc: bool) -> Callable[[], None]:
    """A preexec_fn applying the limits in the child right before it execs (the fallback when
    util-linux's `prlimit` is missing: a preexec_fn makes Python fork() instead of vfork(),
    which costs a big process such as a Ray worker tens of milliseconds per command)."""
    pairs = _limit_pairs(limits, nproc=nproc)

    def apply() -> None:
        for _, which, soft, hard in pairs:
            resource.setrlimit(which, (soft, hard))
    return apply


def limit_prefix(limits: SandboxLimits, *, nproc: bool, prlimit: str | None) -> list[str]:
    """`prlimit --cpu=S:H ... --` setting the same limits on itself before it execs the
    command, so the spawn needs no preexec_fn (see `limit_setter`); [] without prlimit."""
    if prlimit is None:
        return []
    return [prlimit, *(f"--{name}={soft}:{hard}" for name, _, soft, hard in _limit_pairs(limits, nproc=nproc)),
            "--"]


def find_prlimit() -> str | None:
    """util-linux's prlimit, when this machine has one."""
    for candidate in ("/usr/bin/prlimit", "/bin/prlimit"):
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("prlimit")


_PRLIMIT = find_prlimit()


async def run_limited(argv: list[str], *, limits: SandboxLimits, timeout: float,
                      stdin: bytes | None, output_cap: int, env: Mapping[str, str],
                      cwd: str | None = None,
                      nproc: bool = True, running: set[int] | None = None,
                      launch: Launch | None = None, watch: Watcher | None = None,
                      limits_inside: bool = False) -> RunOutcome:
    """Run `argv` in its own session under the limits (set by `argv` itself when
    `limits_inside`: the sandbox's helper); kill it all at the deadline."""
    prefix = [] if limits_inside else limit_prefix(limits, nproc=nproc, prlimit=_PRLIMIT)
    setter = None if limits_inside or prefix else limit_setter(limits, nproc=nproc)
    run = sv.start([*prefix, *argv], stdin=stdin, output_cap=output_cap, env=env, cwd=cwd,
                   pass_fds=launch.pass_fds if launch else (), preexec_fn=setter)
    if running is not None:
        running.add(run.pid)
    try:
        if launch is not None:
            run.escaped_pid = lambda: launch.child_pid
            launch.spawned()
            await _handshake(launch, run)
        watching = asyncio.ensure_future(watch(run.kill_all)) if watch else None
        try:
            return await run.outcome(timeout)
        finally:
            if watching is not None:
                watching.cancel()  # done by now, or waiting on its next scan: nothing to await
    finally:
        if running is not None:
            running.discard(run.pid)


async def _handshake(launch: Launch, run: sv.Supervised) -> None:
    try:
        await launch.handshake()
    except asyncio.CancelledError:
        run.kill_all()
        run.close_pipes()
        raise
    except (OSError, ValueError, KeyError, TimeoutError) as exc:
        run.kill_all()
        await run.wait_exit(sv.EXIT_GRACE)
        run.close_pipes()
        raise OSError(f"bwrap user-namespace handshake failed: {exc!r}") from exc
