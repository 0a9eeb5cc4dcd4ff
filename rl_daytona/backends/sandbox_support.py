"""What every local sandbox gets from the host besides /usr and Python, made once per machine
and cached per user: the staged /etc (a handful of host files and synthetic passwd, group and
hosts, bound as one mount instead of ten) and the compiled pid-1 helper (`sandbox_init.c`).

Invariant: both are named by their content (a changed host file or helper source makes new
ones) and made beside their final name, then renamed into place, so processes making them at
once never see one half made.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

_ETC_FILES = ("alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime",
              "nsswitch.conf", "protocols")
_ETC_DATA = {
    "passwd": b"root:x:0:0::/root:/usr/sbin/nologin\nsandbox:x:1000:1000::/workspace:/bin/sh\n",
    "group": b"root:x:0:\nsandbox:x:1000:\n",
    "hosts": b"127.0.0.1 localhost\n::1 localhost\n",
}
INIT_PATH = "/init"  # where the helper is bound in a sandbox
_INIT_SOURCE = Path(__file__).with_name("sandbox_init.c")
_supports: dict[bool, "Support"] = {}


@dataclass(frozen=True)
class Support:
    """What every sandbox gets from the host besides /usr and Python, made once per machine:
    `etc`, the staged /etc (a handful of host files and synthetic passwd/group/hosts, one bind
    instead of ten), and `init`, the compiled pid-1 helper (None: the prlimit/setpriv/sh chain)."""

    etc: Path
    init: str | None


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
    target = cache / f"etc-{digest.hexdigest()[:16]}"
    if target.is_dir():
        return target
    staging = Path(tempfile.mkdtemp(prefix=".etc-", dir=cache))
    try:
        os.chmod(staging, 0o755)
        for name in _ETC_FILES:
            host = Path("/etc", name)
            if host.is_symlink() or host.is_file():
                shutil.copy2(host, staging / name, follow_symlinks=False)
            elif host.is_dir():
                shutil.copytree(host, staging / name, symlinks=True)
        for name, data in _ETC_DATA.items():
            (staging / name).write_bytes(data)
            os.chmod(staging / name, 0o644)
        try:
            os.rename(staging, target)
        except OSError:  # another process made it first: the same content
            if not target.is_dir():
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


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
    """This machine's staged /etc and (unless `helper` is False) pid-1 helper; made once."""
    if helper not in _supports:
        cache = cache_dir()
        _supports[helper] = Support(stage_etc(cache), build_init(cache) if helper else None)
    return _supports[helper]
