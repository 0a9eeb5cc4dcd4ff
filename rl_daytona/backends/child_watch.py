"""Waiting for asyncio's child processes with pidfds on Python 3.11 (3.12+ does by itself)."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Callable


class PidfdWatcher(asyncio.AbstractChildWatcher):
    """Python 3.12's way of waiting for asyncio's child processes, for 3.11: a pidfd on the
    running loop per child. 3.11's default starts a thread per child instead, which serializes
    a burst of commands on the event loop (~10% of a 256-wide spin-up wave here). Stateless,
    so any number of loops in any threads share it."""

    def add_child_handler(self, pid: int, callback: Callable[..., object], *args: object) -> None:
        loop = asyncio.get_running_loop()
        pidfd = os.pidfd_open(pid)
        loop._add_reader(pidfd, self._do_wait, pid, pidfd, callback, args)  # type: ignore[attr-defined]

    def _do_wait(self, pid: int, pidfd: int, callback: Callable[..., object], args: tuple[object, ...]) -> None:
        asyncio.get_running_loop()._remove_reader(pidfd)  # type: ignore[attr-defined]
        try:
            _, status = os.waitpid(pid, 0)
            returncode = os.waitstatus_to_exitcode(status)
        except ChildProcessError:  # reaped elsewhere: what asyncio itself reports then
            returncode = 255
        os.close(pidfd)
        callback(pid, returncode, *args)

    def remove_child_handler(self, pid: int) -> bool:
        return True

    def attach_loop(self, loop: asyncio.AbstractEventLoop | None) -> None:
        pass

    def close(self) -> None:
        pass

    def is_active(self) -> bool:
        return True

    def __enter__(self) -> PidfdWatcher:
        return self

    def __exit__(self, *_exc: object) -> None:
        pass


_WATCHER_CHECKED: list[bool] = []


def use_pidfd_children() -> None:
    """Once per process, on Python < 3.12 with pidfds: replace asyncio's default (threaded)
    child watcher by `PidfdWatcher`; a watcher someone else chose is left alone."""
    if _WATCHER_CHECKED or sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return
    _WATCHER_CHECKED.append(True)
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        return
    if type(asyncio.get_child_watcher()) is asyncio.ThreadedChildWatcher:
        asyncio.set_child_watcher(PidfdWatcher())
