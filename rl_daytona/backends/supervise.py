"""Supervising one started command on the running event loop: its output pipes read as they
fill (capped), its stdin fed, its exit seen through a pidfd, its deadline a timer.

No asyncio subprocess transport, protocol, stream or task per command: those cost the loop
~0.7 ms of CPU per command, which a 256-wide burst of one-line commands (a spin-up wave) pays
256 times on the one thread that also starts them.

Invariant: `Supervised.outcome` returns once the process has exited (or was killed at its
deadline, or could not be killed within the grace) and its pipes are closed or, when something
that escaped it still holds them after `DRAIN_GRACE`, closed by us; every process this module
starts is reaped (on the loop through its pidfd, or by `subprocess`'s own clean-up of
abandoned `Popen`s if the loop closes first), and every fd it opens is closed (a cancelled
command's pidfd once the loop has reaped it). Cancelled, it kills everything first and then
re-raises.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

OUTPUT_KILL_FACTOR = 16  # a command producing 16x the output cap is killed (limit "output")
DRAIN_GRACE = 1.0  # seconds to wait for pipes after the command exited
EXIT_GRACE = 5.0  # seconds to wait for a SIGKILLed process to be reaped
_CHUNK = 65536
_POLL = 0.02  # seconds between exit checks where there are no pidfds (Linux < 5.3)


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


class Supervised:
    """One command started by `start`: call `outcome` (once) for what it did."""

    def __init__(self, proc: subprocess.Popen[bytes], out_r: int, err_r: int, in_w: int | None,
                 stdin: bytes | None, output_cap: int, started: float) -> None:
        self.loop = asyncio.get_running_loop()
        self.proc, self.pid, self.started = proc, proc.pid, started
        self.escaped_pid: Callable[[], int | None] = lambda: None  # a sandbox's pid 1, once known
        self.capture = _Capture(output_cap, self.kill_all)
        self.exited: asyncio.Future[None] = self.loop.create_future()
        self.drained: asyncio.Future[None] = self.loop.create_future()
        self._pipes = {out_r: 0, err_r: 1}
        for fd in self._pipes:
            os.set_blocking(fd, False)
            self.loop.add_reader(fd, self._readable, fd)
        self._stdin_fd, self._stdin = in_w, memoryview(stdin or b"")
        if in_w is not None:
            os.set_blocking(in_w, False)
            self._feed()
        self._pidfd: int | None = None
        try:
            self._pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            self.loop.call_later(_POLL, self._poll)
        else:
            self.loop.add_reader(self._pidfd, self._reap)

    # ----- loop callbacks ----------------------------------------------------------------
    def _readable(self, fd: int) -> None:
        try:
            chunk = os.read(fd, _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            self.capture.take(self._pipes[fd], chunk)
        else:
            self._close_pipe(fd)

    def _close_pipe(self, fd: int) -> None:
        self.loop.remove_reader(fd)
        os.close(fd)
        del self._pipes[fd]
        if not self._pipes and not self.drained.done():
            self.drained.set_result(None)

    def close_pipes(self) -> None:
        for fd in list(self._pipes):
            self._close_pipe(fd)
        self._close_stdin()

    def _feed(self) -> None:
        fd = self._stdin_fd
        if fd is None:
            return
        try:
            while self._stdin:
                self._stdin = self._stdin[os.write(fd, self._stdin):]
        except BlockingIOError:
            self.loop.add_writer(fd, self._feed)
            return
        except OSError:  # the command closed its stdin (or died): the rest is not wanted
            pass
        self._close_stdin()

    def _close_stdin(self) -> None:
        if self._stdin_fd is not None:
            self.loop.remove_writer(self._stdin_fd)
            os.close(self._stdin_fd)
            self._stdin_fd = None

    def _reap(self) -> None:
        assert self._pidfd is not None
        self.loop.remove_reader(self._pidfd)
        os.close(self._pidfd)
        self._pidfd = None
        self._collect(0)

    def _poll(self) -> None:
        if not self._collect(os.WNOHANG):
            self.loop.call_later(_POLL, self._poll)

    def _collect(self, flags: int) -> bool:
        try:
            pid, status = os.waitpid(self.pid, flags)
        except ChildProcessError:  # reaped elsewhere: what asyncio itself reports then
            pid, status = self.pid, 255 << 8
        if pid == 0:
            return False
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self._close_stdin()
        if not self.exited.done():
            self.exited.set_result(None)
        return True

    # ----- killing ---------------------------------------------------------------------
    def kill_all(self) -> None:
        """The process group and the sandbox's escaped pid 1."""
        if self.proc.returncode is None:
            kill_now(self.pid)
        kill_escaped(self.escaped_pid())

    async def wait_exit(self, timeout: float) -> bool:
        """Whether the process itself exited within `timeout` (its pipes may stay open)."""
        return await _within(self.exited, timeout)

    # ----- the whole run ---------------------------------------------------------------
    async def outcome(self, timeout: float) -> RunOutcome:
        try:
            return await self._outcome(timeout)
        except asyncio.CancelledError:  # the caller's deadline: the command must not outlive it
            self.kill_all()
            self.close_pipes()
            raise

    async def _outcome(self, timeout: float) -> RunOutcome:
        timed_out = not await self.wait_exit(max(0.0, self.started + timeout - time.monotonic()))
        if timed_out:  # kill the children first so bwrap reaps them (their CPU time reaches us)
            kill_children(self.pid)
            if not await self.wait_exit(1.0):
                kill_now(self.pid)
                await self.wait_exit(EXIT_GRACE)
            kill_escaped(self.escaped_pid())
        seconds = time.monotonic() - self.started
        if not await _within(self.drained, DRAIN_GRACE):  # something that escaped holds them
            self.kill_all()
            self.close_pipes()
        capture = self.capture
        returncode = 124 if timed_out or self.proc.returncode is None else self.proc.returncode
        return RunOutcome(returncode, bytes(capture.kept[0]), bytes(capture.kept[1]), seconds,
                          timed_out, capture.truncated, capture.killed)


def start(argv: Sequence[str], *, stdin: bytes | None, output_cap: int, env: Mapping[str, str],
          cwd: str | None, pass_fds: Sequence[int] = (),
          preexec_fn: Callable[[], None] | None = None) -> Supervised:
    """Start `argv` in a session of its own with piped stdout/stderr (and stdin when `stdin`
    is not None); raises OSError when it cannot be started."""
    started = time.monotonic()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    in_r, in_w = os.pipe() if stdin is not None else (None, None)
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL if in_r is None else in_r,
                                stdout=out_w, stderr=err_w, env=dict(env), cwd=cwd,
                                pass_fds=tuple(pass_fds), start_new_session=True,
                                preexec_fn=preexec_fn)
    except BaseException:
        for fd in (out_r, err_r, in_w):
            if fd is not None:
                os.close(fd)
        raise
    finally:
        for fd in (out_w, err_w, in_r):
            if fd is not None:
                os.close(fd)
    return Supervised(proc, out_r, err_r, in_w, stdin, output_cap, started)


async def _within(future: asyncio.Future[None], timeout: float) -> bool:
    """Whether `future` is done within `timeout` seconds (it is never cancelled here)."""
    if future.done():
        return True
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()

    def wake(_: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    timer = loop.call_later(timeout, wake)
    future.add_done_callback(wake)
    try:
        await waiter
    finally:
        timer.cancel()
        future.remove_done_callback(wake)
    return future.done()


def kill_escaped(pid: int | None) -> None:
    """SIGKILL a sandbox's pid 1 if it outlived its bwrap (it is in its own session, and the
    kernel drops its parent-death signal when it changes credentials); its pid namespace, and
    every process in it, dies with it. Only a process that is still pid 1 of a pid namespace
    of its own is touched (not whatever later reused the pid)."""
    if pid is None or not is_namespace_init(pid):
        return
    with suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def is_namespace_init(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    nspid = next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), [])
    return len(nspid) >= 2 and nspid[-1] == "1"


def kill_children(pid: int) -> None:
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    for child in children:
        with suppress(ProcessLookupError, PermissionError):
            os.kill(int(child), signal.SIGKILL)


def kill_now(pid: int) -> None:
    """SIGKILL the process group led by `pid` (a bwrap: its pid namespace dies with it)."""
    kill_children(pid)
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
