"""Daytona snapshots named by content: one snapshot per distinct build input, built once.

Invariant: `snapshot_name` is a pure function of the bytes that shape the image: the
Dockerfile's text, and every entry under each local COPY/ADD source it names (relative path,
executable bit, contents; symlinks by target), plus the sandbox class when one is asked for.
Equal inputs give the same name and any change gives a new one. Python's caches
(`__pycache__`, `*.pyc`, `.pytest_cache`, `.mypy_cache`) are left out: they do not change what the
image runs, and would otherwise rename the snapshot whenever a test imports the code.

`ensure_snapshot` returns that name only once the snapshot is active: it reuses an active one
(no build), activates an inactive one, waits for one another run is building, and builds a
missing one with `Image.from_dockerfile`, streaming its log to `on_log` line by line. A failed
build raises `SnapshotBuildError` with one line carrying the build's error reason; a snapshot
left failed by an earlier run is deleted and built again (its failure may have been transient).

The build context is the Dockerfile's folder, as for `Image.from_dockerfile` and for
`docker build -f Dockerfile.hud .` at the repo top, so the Dockerfile must sit in `repo_root`.
"""

from __future__ import annotations

import asyncio
import glob
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable, Iterator

from daytona import (
    AsyncDaytona, CreateSnapshotParams, DaytonaConflictError, DaytonaNotFoundError, Image, SandboxClass,
)

__all__ = ["ContextUploadTLSError", "SnapshotBuildError", "build_inputs", "copy_sources", "ensure_snapshot", "print_log", "snapshot_name"]

NAME_PREFIX = "rl-daytona-"
HASH_CHARS = 12
IGNORED_DIRS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache"})
IGNORED_SUFFIXES = (".pyc", ".pyo")
FAILED = frozenset({"build_failed", "error"})
_REMOTE = ("http://", "https://", "git@")


class SnapshotBuildError(RuntimeError):
    """The snapshot could not be built or made active; the message is one line."""


class ContextUploadTLSError(SnapshotBuildError):
    """The build context could not be uploaded: the object storage's certificate is not trusted
    (not a fault of the Dockerfile)."""


def print_log(line: str) -> None:
    """The default `on_log`: the build log to the console as it arrives."""
    print(line, flush=True)


def _instructions(text: str) -> Iterator[str]:
    """Logical Dockerfile lines: comments and blanks dropped, `\\` continuations joined."""
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        yield (pending + line).strip()
        pending = ""
    if pending.strip():
        yield pending.strip()


def copy_sources(dockerfile_text: str) -> list[str]:
    """The local sources of every COPY and ADD, in order (not COPY --from=, heredocs or ADD URLs)."""
    sources: list[str] = []
    for line in _instructions(dockerfile_text):
        word, _, rest = line.partition(" ")
        if word.upper() not in ("COPY", "ADD") or "<<" in rest:
            continue
        args = rest.split()
        if any(a.startswith("--from=") for a in args):
            continue
        args = [a for a in args if not a.startswith("--")]
        if args and args[0].startswith("["):  # JSON form: ["src", ..., "dest"]
            args = [str(a) for a in json.loads(" ".join(args))]
        sources += [s for s in args[:-1] if not s.startswith(_REMOTE)]
    return sources


def _dockerfile_path(repo_root: Path, dockerfile: str | Path) -> Path:
    path = (repo_root / dockerfile).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no Dockerfile at {path}")
    if path.parent != repo_root.resolve():
        raise ValueError(f"{path} must sit in {repo_root} (its folder is the build context)")
    return path


def _ignored(path: Path) -> bool:
    return path.name in IGNORED_DIRS or path.suffix in IGNORED_SUFFIXES


def _entries_under(path: Path) -> Iterator[Path]:
    yield path
    if path.is_dir() and not path.is_symlink():
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if d not in IGNORED_DIRS)
            yield from (Path(root) / name for name in dirs + sorted(files) if not _ignored(Path(name)))


def build_inputs(repo_root: str | Path, dockerfile: str | Path) -> list[Path]:
    """Every file, folder and symlink the Dockerfile's COPY/ADD sources bring in, sorted."""
    path = _dockerfile_path(Path(repo_root), dockerfile)
    context = path.parent
    found: set[Path] = set()
    for source in copy_sources(path.read_text()):
        for match in sorted(glob.glob(str(context / source))):
            entry = Path(os.path.normpath(match))
            if not entry.is_relative_to(context):
                raise ValueError(f"COPY source {source!r} lies outside the build context {context}")
            if not _ignored(entry):
                found.update(_entries_under(entry))
    return sorted(found, key=lambda p: p.relative_to(context).as_posix())


def _digest_entry(digest: Any, entry: Path, rel: str) -> None:
    if entry.is_symlink():
        digest.update(f"l\0{rel}\0{os.readlink(entry)}\0".encode())
    elif entry.is_dir():
        digest.update(f"d\0{rel}\0".encode())
    else:
        data = entry.read_bytes()
        kind = "x" if os.access(entry, os.X_OK) else "f"
        digest.update(f"{kind}\0{rel}\0{len(data)}\0".encode())
        digest.update(data)


def snapshot_name(repo_root: str | Path, dockerfile: str | Path,
                  sandbox_class: SandboxClass | None = None) -> str:
    """`rl-daytona-<12 hex>`: a hash of the Dockerfile and everything it copies in."""
    path = _dockerfile_path(Path(repo_root), dockerfile)
    digest = hashlib.sha256(b"rl-daytona snapshot v1\0")
    if sandbox_class is not None:
        digest.update(f"class\0{SandboxClass(sandbox_class).value}\0".encode())
    digest.update(b"dockerfile\0" + path.read_bytes() + b"\0")
    for entry in build_inputs(repo_root, dockerfile):
        _digest_entry(digest, entry, entry.relative_to(path.parent).as_posix())
    return f"{NAME_PREFIX}{digest.hexdigest()[:HASH_CHARS]}"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _by_line(on_log: Callable[[str], None]) -> Callable[[str], None]:
    """The SDK hands over chunks of the stream; `on_log` gets one line per call."""
    def emit(chunk: str) -> None:
        for line in chunk.splitlines():
            if line.strip():
                on_log(line.rstrip())
    return emit


async def _state(client: AsyncDaytona, name: str) -> tuple[str, str | None] | None:
    """(state, error reason) of the snapshot called `name`; None when there is none."""
    try:
        snap = await client.snapshot.get(name)
    except DaytonaNotFoundError:
        return None
    return str(getattr(snap.state, "value", snap.state)), snap.error_reason


def _failed(name: str, reason: str | None) -> SnapshotBuildError:
    return SnapshotBuildError(_one_line(f"snapshot {name} failed to build: {reason or 'no reason given'}"))


async def _wait_active(client: AsyncDaytona, name: str, poll_seconds: float, timeout: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        found = await _state(client, name)
        if found is None:
            raise SnapshotBuildError(f"snapshot {name} disappeared while waiting for it to become active")
        if found[0] == "active":
            return
        if found[0] in FAILED:
            raise _failed(name, found[1])
        if asyncio.get_running_loop().time() > deadline:
            raise SnapshotBuildError(f"snapshot {name} is still {found[0]} after {timeout:.0f} s")
        await asyncio.sleep(poll_seconds)


async def _delete_failed(client: AsyncDaytona, name: str, reason: str | None, on_log: Callable[[str], None],
                         poll_seconds: float) -> None:
    on_log(_one_line(f"snapshot {name} failed before ({reason}); deleting it to build it again"))
    await client.snapshot.delete(name)
    while await _state(client, name) is not None:
        await asyncio.sleep(poll_seconds)


async def _build(client: AsyncDaytona, name: str, dockerfile: Path, sandbox_class: SandboxClass | None,
                 on_log: Callable[[str], None], timeout: float) -> None:
    """Build the snapshot; DaytonaConflictError when another run created it first."""
    image = Image.from_dockerfile(dockerfile, strict_context=True)
    params = CreateSnapshotParams(name=name, image=image, sandbox_class=sandbox_class)
    try:
        await client.snapshot.create(params, on_logs=_by_line(on_log), timeout=timeout)
    except DaytonaConflictError:
        raise
    except Exception as exc:  # the SDK raises DaytonaError, the upload obstore's errors
        found = await _state(client, name)
        if found is not None and found[0] in FAILED:
            raise _failed(name, found[1]) from exc
        if _is_tls_failure(exc):
            raise ContextUploadTLSError(_one_line(
                f"snapshot {name}: uploading its build context failed TLS verification (the object storage's "
                f"certificate is not trusted here); against daytona-sim set DAYTONA_SIM_CA_BUNDLE to the CA file "
                f"its banner prints, else check SSL_CERT_FILE and this machine's CA store")) from exc
        raise SnapshotBuildError(_one_line(f"snapshot {name} could not be built: {exc}")) from exc


def _is_tls_failure(exc: BaseException) -> bool:
    """The error, or one it was raised from, is a certificate verification failure."""
    seen: BaseException | None = exc
    while seen is not None:
        text = str(seen).lower()
        if "certificate" in text and ("verif" in text or "unknown" in text or "trust" in text):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


async def ensure_snapshot(client: AsyncDaytona, repo_root: str | Path, dockerfile: str | Path,
                          on_log: Callable[[str], None] = print_log, *,
                          sandbox_class: SandboxClass | None = None, poll_seconds: float = 1.0,
                          timeout: float = 3600.0) -> str:
    """The name of an active snapshot built from `dockerfile` (built only if none exists yet)."""
    path = _dockerfile_path(Path(repo_root), dockerfile)
    name = snapshot_name(repo_root, path, sandbox_class)
    found = await _state(client, name)
    if found is not None and found[0] in FAILED:
        await _delete_failed(client, name, found[1], on_log, poll_seconds)
        found = None
    if found is None:
        on_log(f"snapshot {name}: building from {path.name}")
        try:
            await _build(client, name, path, sandbox_class, on_log, timeout)
            return name
        except DaytonaConflictError:
            on_log(f"snapshot {name} is being built by another run; waiting for it")
    elif found[0] == "active":
        on_log(f"snapshot {name} is active: reusing it (same content, no build)")
        return name
    elif found[0] == "inactive":
        on_log(f"snapshot {name} is inactive: activating it")
        await client.snapshot.activate(name)
    else:
        on_log(f"snapshot {name} is {found[0]}; waiting for it")
    await _wait_active(client, name, poll_seconds, timeout)
    return name
