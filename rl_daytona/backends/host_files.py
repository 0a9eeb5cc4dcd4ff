"""Host-side file access to a local sandbox's upper layer, safe against what the sandbox put
there: a workspace path is split into checked components (never `..`, never outside
/workspace), and each component is opened relative to its parent with O_NOFOLLOW; symlinks are
followed by hand and may not leave the workspace."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from rl_daytona.backends.base import WORKSPACE


def parts(path: str) -> tuple[str, ...]:
    """Components of a workspace path; ValueError if it could name anything outside."""
    if not isinstance(path, str) or not path or "\0" in path:
        raise ValueError(f"bad sandbox path {path!r}")
    if path.startswith("/"):
        if path != WORKSPACE and not path.startswith(WORKSPACE + "/"):
            raise ValueError(f"{path!r} is outside {WORKSPACE}")
        path = path[len(WORKSPACE):]
    parts = tuple(p for p in path.split("/") if p not in ("", "."))
    if ".." in parts:
        raise ValueError(f"'..' is not allowed in sandbox paths: {path!r}")
    if not parts:
        raise ValueError(f"{path!r} names the workspace itself, not a file")
    return parts


def _resolve(root: Path, parts: tuple[str, ...], create: bool,
             owner: int | None = None) -> tuple[int, str]:
    """(fd of the parent dir, final name) of `parts` under `root`, never leaving `root`.

    Symlinks are followed by hand, as the sandbox would see them (absolute targets are
    sandbox paths); one that leads outside the workspace raises ValueError.
    """
    stack = [os.open(root, os.O_RDONLY | os.O_DIRECTORY)]
    todo, hops = list(reversed(parts)), 0
    try:
        while True:
            if not todo:  # a symlink named the workspace itself or one of its dirs
                raise IsADirectoryError(errno.EISDIR, "is a directory", "/".join(parts))
            name = todo.pop()
            if name == "..":
                if len(stack) == 1:
                    raise ValueError("a symlink in the path leads outside the workspace")
                os.close(stack.pop())
                continue
            target = _readlink(stack[-1], name)
            if target is not None:
                hops += 1
                if hops > 40:
                    raise OSError(errno.ELOOP, "too many symlinks", name)
                todo.extend(reversed(_link_parts(target, stack)))
                continue
            if not todo:
                return stack.pop(), name
            stack.append(_open_dir(stack[-1], name, create, owner))
    finally:
        for fd in stack:
            os.close(fd)


def _readlink(dir_fd: int, name: str) -> str | None:
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.EINVAL):  # absent, or not a symlink
            return None
        raise


def _link_parts(target: str, stack: list[int]) -> list[str]:
    """A symlink target as components to walk; absolute ones restart at the workspace."""
    if target.startswith("/"):
        if target != WORKSPACE and not target.startswith(WORKSPACE + "/"):
            raise ValueError(f"a symlink in the path leads outside {WORKSPACE}: {target!r}")
        while len(stack) > 1:
            os.close(stack.pop())
        target = target[len(WORKSPACE):]
    return [p for p in target.split("/") if p not in ("", ".")]


def _open_dir(dir_fd: int, name: str, create: bool, owner: int | None) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        if not create:
            raise
        os.mkdir(name, 0o755, dir_fd=dir_fd)
        fd = os.open(name, flags, dir_fd=dir_fd)
        if owner is not None:
            os.fchown(fd, owner, owner)
        return fd


def write_host(root: Path, parts: tuple[str, ...], data: bytes, owner: int | None) -> None:
    dir_fd, name = _resolve(root, parts, create=True, owner=owner)
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK,
                     0o644, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "wb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{'/'.join(parts)!r} is not a regular file")
        if owner is not None:
            os.fchown(fd, owner, owner)
        handle.write(data)


def read_host(root: Path, parts: tuple[str, ...]) -> bytes:
    dir_fd, name = _resolve(root, parts, create=False)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", "/".join(parts))
        if not stat.S_ISREG(mode):
            raise ValueError(f"{'/'.join(parts)!r} is not a regular file")
        return handle.read()
