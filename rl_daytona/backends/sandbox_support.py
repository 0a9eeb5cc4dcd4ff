"""What every local sandbox gets from the host besides /usr and Python, made once per machine
and cached per user: the staged /etc (a handful of host files and synthetic passwd, group and
hosts), the compiled pid-1 helper (`sandbox_init.c`), and the staged root that holds both: the
sandbox's read-only `/`, with the mount points of everything bound over it, the /bin, /lib...
symlinks into /usr, and (where this user may make device nodes: root) a /dev of the six
nodes a sandbox gets. One read-only bind of it replaces bwrap's tmpfs root, its directories,
symlinks, the /etc and helper binds and `--dev`'s own tmpfs, six node binds and devpts
(the helper mounts a private devpts instead): ~1.4 ms of kernel time per command.

Invariant: all three are named by their content (a changed host file, helper source or
mount point makes new ones) and made beside their final name, then renamed into place, so
processes making them at once never see one half made.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

_HAS_LIB64 = os.path.isdir("/usr/lib64")
_ETC_FILES = ("alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime",
              "nsswitch.conf", "protocols")
_ETC_DATA = {
    "passwd": b"root:x:0:0::/root:/usr/sbin/nologin\nsandbox:x:1000:1000::/workspace:/bin/sh\n",
    "group": b"root:x:0:\nsandbox:x:1000:\n",
    "hosts": b"127.0.0.1 localhost\n::1 localhost\n",
}
INIT_PATH = "/init"  # where the helper is in a sandbox
EMPTY_PATH = ".empty"  # an empty read-only file in the staged root, bound over hidden files
_INIT_SOURCE = Path(__file__).with_name("sandbox_init.c")
_ROOT_FORMAT = b"root-2"  # bump when the staged root's layout changes
_ROOT_DIRS = ("usr", "tmp", "proc", "workspace", "dev")
_DEVICES = {"null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8), "urandom": (1, 9), "tty": (5, 0)}
_DEV_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
              "stderr": "/proc/self/fd/2", "core": "/proc/kcore", "ptmx": "pts/ptmx"}
_supports: dict[bool, "Support"] = {}


@dataclass(frozen=True)
class Support:
    """What every sandbox gets from the host besides /usr and Python, made once per machine:
    `etc`, the staged /etc (a handful of host files and synthetic passwd/group/hosts), `init`,
    the compiled pid-1 helper (None: the prlimit/setpriv/sh chain), and `devices`: whether the
    staged root carries its own /dev nodes (bound with devices allowed; the helper mounts the
    ptys), else bwrap's `--dev` makes /dev per command."""

    etc: Path
    init: str | None
    devices: bool = False

    @property
    def staged_dev(self) -> bool:
        """The staged /dev is used (it needs the helper, which mounts its devpts)."""
        return self.devices and self.init is not None

    def root(self, mount_points: tuple[str, ...]) -> Path:
        """The staged root with a directory for each of `mount_points` (made once, cached)."""
        return _staged_root(self, tuple(sorted(set(mount_points))))


def cache_dir() -> Path:
    """Where the staged /etc and the helper live (per user; a temp dir if home is unusable)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rl_daytona"
    try:
        base.mkdir(parents=True, exist_ok=True)
        return base
    except OSError:
        fallback = Path(tempfile.gettempdir()) / f"rl_daytona-{os.geteuid()}"
        fallback.mkdir(mode=0o700, exist_ok=True)
        return fallback


def stage_etc(cache: Path) -> Path:
    """The sandbox's /etc, named by its content (a changed host file makes a new one), made
    beside and renamed into place, so processes staging at once never see it half made."""
    digest = hashlib.sha256()
    for name in _ETC_FILES:
        host = Path("/etc", name)
        for path in sorted([host, *host.rglob("*")] if host.is_dir() else [host]):
            digest.update(str(path).encode())
            if path.is_symlink():
                digest.update(b"->" + os.readlink(path).encode())
            elif path.is_file():
                digest.update(path.read_bytes())
    for name, data in sorted(_ETC_DATA.items()):
        digest.update(name.encode() + data)
    return _publish(cache / f"etc-{digest.hexdigest()[:16]}", _fill_etc)


def _fill_etc(staging: Path) -> None:
    for name in _ETC_FILES:
        host = Path("/etc", name)
        if host.is_symlink() or host.is_file():
            shutil.copy2(host, staging / name, follow_symlinks=False)
        elif host.is_dir():
            shutil.copytree(host, staging / name, symlinks=True)
    for name, data in _ETC_DATA.items():
        (staging / name).write_bytes(data)
        os.chmod(staging / name, 0o644)


def _publish(target: Path, fill: Callable[[Path], None]) -> Path:
    """`target` (a directory named by its content), made by `fill` beside it and renamed
    into place unless it is there already."""
    if target.is_dir():
        return target
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name.split('-')[0]}-", dir=target.parent))
    try:
        os.chmod(staging, 0o755)
        fill(staging)
        try:
            os.rename(staging, target)
        except OSError:  # another process made it first: the same content
            if not target.is_dir():
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def stage_root(cache: Path, support: Support, mount_points: tuple[str, ...]) -> Path:
    """The sandbox's `/`: /etc, the helper at /init, symlinks /bin, /sbin, /lib(64) into /usr,
    empty /usr, /tmp, /proc, /workspace, /dev and a directory (0755, parents too) for each of
    `mount_points` outside /tmp (those go on the per-command tmpfs), and with
    `support.staged_dev`, /dev's nodes, symlinks and empty shm and pts, and the empty file
    `EMPTY_PATH` (bound over host files a sandbox must not see). Named by its content."""
    points = sorted({p for p in mount_points if p != "/tmp" and not p.startswith("/tmp/")})
    digest = hashlib.sha256(_ROOT_FORMAT)
    for part in (support.etc.name, Path(support.init).name if support.init else "-",
                 str(support.staged_dev), str(_HAS_LIB64), *points):
        digest.update(part.encode() + b"\0")

    def fill(staging: Path) -> None:
        shutil.copytree(support.etc, staging / "etc", symlinks=True)
        if support.init is not None:  # a hard link where it can (both live in the cache)
            try:
                os.link(support.init, staging / INIT_PATH.lstrip("/"))
            except OSError:
                shutil.copy2(support.init, staging / INIT_PATH.lstrip("/"))
        for link in ("bin", "sbin", "lib", *(("lib64",) if _HAS_LIB64 else ())):
            os.symlink(f"usr/{link}", staging / link)
        for name in (*_ROOT_DIRS, *(p.lstrip("/") for p in points)):
            relative = Path(name)
            for part in [*reversed(relative.parents), relative][1:]:  # parents first, not "."
                if not (staging / part).is_dir():
                    (staging / part).mkdir()
                    os.chmod(staging / part, 0o755)
        if support.staged_dev:
            _fill_dev(staging / "dev")
        (staging / EMPTY_PATH).touch()
        os.chmod(staging / EMPTY_PATH, 0o444)

    return _publish(cache / f"root-{digest.hexdigest()[:16]}", fill)


def _fill_dev(dev: Path) -> None:
    for name, (major, minor) in _DEVICES.items():
        os.mknod(dev / name, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        os.chmod(dev / name, 0o666)
    for name, target in _DEV_LINKS.items():
        os.symlink(target, dev / name)
    for name in ("shm", "pts"):
        (dev / name).mkdir(mode=0o755)
        os.chmod(dev / name, 0o755)


def can_make_devices(cache: Path) -> bool:
    """Whether this user may make device nodes that work where the cache lives (root, not in
    a container that forbids mknod, not on a nodev mount)."""
    probe = Path(tempfile.mkdtemp(prefix=".dev-probe-", dir=cache))
    try:
        os.mknod(probe / "null", 0o666 | stat.S_IFCHR, os.makedev(*_DEVICES["null"]))
        with open(probe / "null", "wb", buffering=0) as null:
            return null.write(b"x") == 1
    except OSError:
        return False
    finally:
        shutil.rmtree(probe, ignore_errors=True)


@functools.lru_cache(maxsize=64)
def _staged_root(support: Support, mount_points: tuple[str, ...]) -> Path:
    return stage_root(cache_dir(), support, mount_points)


def build_init(cache: Path) -> str | None:
    """The pid-1 helper compiled from `sandbox_init.c` (static when the C library allows),
    named by the source's hash; None when there is no C compiler or it fails."""
    source = _INIT_SOURCE.read_bytes()
    target = cache / f"sandbox-init-{hashlib.sha256(source).hexdigest()[:16]}"
    if os.access(target, os.X_OK):
        return str(target)
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return None
    fd, partial = tempfile.mkstemp(prefix=".sandbox-init-", dir=cache)
    os.close(fd)
    try:
        for static in (["-static"], []):
            done = subprocess.run([compiler, "-O2", *static, "-o", partial, str(_INIT_SOURCE)],
                                  capture_output=True, timeout=120, check=False)
            if done.returncode == 0:
                os.chmod(partial, 0o755)
                os.replace(partial, target)
                return str(target)
        return None
    except (OSError, subprocess.SubprocessError):
        return None
    finally:
        with suppress(FileNotFoundError):
            os.unlink(partial)


def host_support(helper: bool = True) -> Support:
    """This machine's staged /etc, (unless `helper` is False) pid-1 helper and whether its
    staged roots carry device nodes; made once."""
    if helper not in _supports:
        cache = cache_dir()
        init = build_init(cache) if helper else None
        _supports[helper] = Support(stage_etc(cache), init, init is not None and can_make_devices(cache))
    return _supports[helper]
