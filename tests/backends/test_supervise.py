"""The command supervisor on the event loop (`supervise.py`), with real processes: stdin fed
past a pipe's buffer, output capped, a cancelled command killed and reaped, no fd left open,
exits seen without pidfds too, and a command that cannot start."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from rl_daytona.backends import supervise as sv

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def _run(argv: list[str], *, stdin: bytes | None = None, cap: int = 1 << 20,
         timeout: float = 30.0) -> sv.RunOutcome:
    async def go() -> sv.RunOutcome:
        return await sv.start(argv, stdin=stdin, output_cap=cap, env=ENV, cwd=None).outcome(timeout)
    return asyncio.run(go())


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_stdin_larger_than_a_pipe_is_fed_whole_and_both_streams_come_back() -> None:
    data = os.urandom(1 << 20)
    out = _run(["sh", "-c", "wc -c; echo err >&2; exit 3"], stdin=data)
    assert (out.returncode, out.stdout.split(), out.stderr) == (3, [str(len(data)).encode()], b"err\n")
    assert not out.timed_out and not out.output_truncated


def test_a_command_that_stops_reading_stdin_is_no_error() -> None:
    out = _run(["head", "-c", "4"], stdin=b"x" * (4 << 20))
    assert (out.returncode, out.stdout) == (0, b"xxxx")


def test_output_is_capped_then_killed_past_the_threshold() -> None:
    capped = _run(["sh", "-c", "head -c 5000 /dev/zero"], cap=1000)
    assert len(capped.stdout) == 1000 and capped.output_truncated and not capped.output_killed
    endless = _run(["sh", "-c", "yes"], cap=1000)
    assert endless.output_killed and len(endless.stdout) == 1000 and endless.returncode != 0


def test_the_deadline_kills_the_command() -> None:
    started = time.monotonic()
    out = _run(["sh", "-c", "echo start; sleep 30"], timeout=0.5)
    assert out.timed_out and out.returncode == 124 and out.stdout == b"start\n"
    assert time.monotonic() - started < 10


def test_a_cancelled_command_is_killed_and_reaped_and_leaves_no_fd() -> None:
    before = _open_fds()
    pids: list[int] = []

    async def go() -> None:
        run = sv.start(["sleep", "30"], stdin=b"", output_cap=64, env=ENV, cwd=None)
        pids.append(run.pid)
        task = asyncio.ensure_future(run.outcome(30))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(200):  # the loop reaps it when its pidfd says it exited
            if run.proc.returncode is not None:
                return
            await asyncio.sleep(0.01)

    asyncio.run(go())
    assert not _alive(pids[0]), "killed and reaped"
    assert _open_fds() == before


def test_many_commands_leave_no_fd_open() -> None:
    before = _open_fds()

    async def go() -> list[int]:
        runs = [sv.start(["sh", "-c", f"cat; exit {i}"], stdin=b"in", output_cap=64, env=ENV, cwd=None)
                for i in range(40)]
        return [(await run.outcome(30)).returncode for run in runs]

    assert asyncio.run(go()) == list(range(40))
    assert _open_fds() == before


def test_exits_are_seen_without_pidfds(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_pidfds(pid: int) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", no_pidfds)
    out = _run(["sh", "-c", "sleep 0.1; echo ok; exit 7"])
    assert (out.returncode, out.stdout) == (7, b"ok\n")


def test_a_command_that_cannot_start_raises_and_leaves_no_fd() -> None:
    before = _open_fds()

    async def go() -> None:
        sv.start(["/nonexistent/binary"], stdin=b"x", output_cap=64, env=ENV, cwd=None)

    with pytest.raises(FileNotFoundError):
        asyncio.run(go())
    assert _open_fds() == before
