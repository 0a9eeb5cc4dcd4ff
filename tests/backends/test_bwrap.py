"""The process supervisor under the sandboxes: a process that escapes the command's process
group and keeps its output pipes open must not hang the caller (on Python 3.11,
`Process.wait()` also waits for the pipes, so an unbounded `wait()` after a kill never returns)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from rl_daytona.backends import bwrap as bw
from rl_daytona.backends import supervise as sv
from rl_daytona.types import SandboxLimits

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def _escaper(tail: str) -> tuple[list[str], str]:
    """A shell that starts a `sleep` in a new session (outside the command's group, holding
    stdout) and then runs `tail`; returns (argv, a marker to find the sleep by)."""
    marker = f"{60 + uuid.uuid4().int % 1000 / 1000:.3f}"
    return ["sh", "-c", f"setsid sleep {marker} & {tail}"], marker


def _kill_marker(marker: str) -> None:
    subprocess.run(["pkill", "-f", f"sleep {marker}"], check=False)


def _run(argv: list[str], timeout: float) -> tuple[sv.RunOutcome, float]:
    async def go() -> sv.RunOutcome:
        return await bw.run_limited(argv, limits=SandboxLimits(), timeout=timeout, stdin=None,
                                    output_cap=4096, env=ENV, nproc=False)

    started = time.monotonic()
    outcome = asyncio.run(go())
    return outcome, time.monotonic() - started


def _run_escaper(tail: str, timeout: float) -> tuple[sv.RunOutcome, float]:
    argv, marker = _escaper(tail)
    try:
        return _run(argv, timeout)
    finally:
        _kill_marker(marker)


def test_a_timed_out_command_returns_even_if_an_escaped_process_holds_its_pipes() -> None:
    outcome, seconds = _run_escaper("echo start; sleep 30", timeout=1.0)
    assert outcome.timed_out and outcome.returncode == 124
    assert outcome.stdout == b"start\n"
    assert seconds < 15, f"took {seconds:.1f}s: waited for the escaped process (60s) instead"


def test_a_finished_command_whose_pipes_stay_open_is_not_called_timed_out() -> None:
    outcome, seconds = _run_escaper("echo done", timeout=3.0)
    assert not outcome.timed_out and outcome.returncode == 0
    assert outcome.stdout == b"done\n"
    assert seconds < 15, f"took {seconds:.1f}s"


def test_kill_escaped_touches_only_a_pid_namespace_init() -> None:
    sv.kill_escaped(None)  # nothing recorded: nothing to do
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        sv.kill_escaped(proc.pid)  # an ordinary process (a reused pid): left alone
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
    sv.kill_escaped(proc.pid)  # gone: no error


def test_kill_escaped_kills_a_sandbox_pid_1(tmp_path: Path) -> None:
    """A real sandbox's pid 1, as recorded from bwrap's info fd, dies with everything in it."""
    from rl_daytona.backends.local import LocalBackend

    async def go() -> None:
        backend = LocalBackend(tmp_path / "sb", limits=SandboxLimits())
        box = await backend.create("run-1")
        launches: list[bw.Launch] = []
        real = bw.Launch

        class Recording(real):  # type: ignore[misc, valid-type]
            def __init__(self) -> None:
                super().__init__()
                launches.append(self)

        bw.Launch = Recording  # type: ignore[misc]
        try:
            task = asyncio.create_task(backend.exec(box, "sleep 60", timeout=120))
            while not launches or launches[-1].child_pid is None:
                await asyncio.sleep(0.05)
            pid = launches[-1].child_pid
            await asyncio.sleep(0.3)
            assert sv.is_namespace_init(pid)
            sv.kill_escaped(pid)
            result = await asyncio.wait_for(task, 30)
        finally:
            bw.Launch = real  # type: ignore[misc]
        assert result.exit_code != 0 and not result.timed_out
        await backend.delete(box)

    if bw.sandbox_host_id() is None:
        pytest.skip("the sandbox's pid is only reported through the root handshake")
    asyncio.run(go())


@pytest.mark.parametrize("launcher", ["prlimit", "preexec_fn"])
def test_every_limit_binds_the_command_with_either_launcher(launcher: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Commands start through util-linux's `prlimit` (so Python can vfork: a preexec_fn makes
    a big Ray worker fork() at tens of ms a command); without prlimit the preexec_fn applies
    the same limits. Either way the command sees exactly the configured limits."""
    if launcher == "prlimit" and bw.find_prlimit() is None:
        pytest.skip("no prlimit on this machine")
    monkeypatch.setattr(bw, "_PRLIMIT", bw.find_prlimit() if launcher == "prlimit" else None)
    limits = SandboxLimits(cpu_seconds=7, memory_mb=300, max_file_mb=3, max_processes=77)

    async def go() -> sv.RunOutcome:
        return await bw.run_limited(["sh", "-c", "ulimit -t; ulimit -v; ulimit -f; ulimit -p"],
                                    limits=limits, timeout=30, stdin=None, output_cap=4096, env=ENV)

    outcome = asyncio.run(go())
    assert outcome.returncode == 0, outcome.stderr
    # dash reports -v in KiB, -f in 512-byte blocks, processes as -p
    assert outcome.stdout.decode().split() == ["7", str(300 * 1024), str(3 * 2048), "77"]


def test_the_prlimit_prefix_names_every_limit() -> None:
    limits = SandboxLimits(cpu_seconds=5, memory_mb=10, max_file_mb=2, max_processes=9)
    prefix = bw.limit_prefix(limits, nproc=True, prlimit="/usr/bin/prlimit")
    assert prefix == ["/usr/bin/prlimit", "--cpu=5:6", f"--as={10 << 20}:{10 << 20}",
                      f"--fsize={2 << 20}:{2 << 20}", "--nproc=9:9", "--"]
    assert bw.limit_prefix(limits, nproc=False, prlimit="/p")[-2] == f"--fsize={2 << 20}:{2 << 20}"
    assert bw.limit_prefix(limits, nproc=True, prlimit=None) == []


def test_commands_started_from_two_loops_in_two_threads_come_back_with_their_own_codes() -> None:
    """The supervisor keeps no loop or watcher of its own: commands started from two event
    loops in two threads at once all come back with their own exit codes."""
    import threading

    async def burst(base: int) -> list[int]:
        outcomes = await asyncio.gather(*(
            bw.run_limited(["sh", "-c", f"sleep 0.{i % 3}; exit {base + i}"], limits=SandboxLimits(),
                           timeout=30, stdin=None, output_cap=64, env=ENV, nproc=False)
            for i in range(8)))
        return [o.returncode for o in outcomes]

    results: dict[int, list[int]] = {}
    threads = [threading.Thread(target=lambda b=b: results.__setitem__(b, asyncio.run(burst(b)))) for b in (10, 40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert results == {10: list(range(10, 18)), 40: list(range(40, 48))}


_DEAD = next(p for p in range(4194303, 1, -1) if not os.path.exists(f"/proc/{p}"))  # no such process


@pytest.mark.skipif(os.geteuid() != 0, reason="the map handshake is only made as root")
@pytest.mark.parametrize("info, pid", [
    (b'{\n    "child-pid": %d,\n    "cgroup-namespace": 4026532838,\n    "ipc-namespace": 1\n}\n' % _DEAD, _DEAD),
    (b'{\n    "child-pid": %d\n}\n' % _DEAD, _DEAD),
    (b'{\n    "child-pid": %d,\n    "cgroup-namespace": 40265' % _DEAD, _DEAD),  # bwrap killed mid-write
    (b'{\n    "child-pid": 41943', None),  # the number may be cut: it names no process of ours
    (b"", None),  # killed before it cloned
])
def test_a_bwrap_killed_while_reporting_its_pid_is_no_handshake_error(info: bytes, pid: int | None) -> None:
    """A delete racing a command's start kills bwrap while it writes --info-fd: the info comes
    cut short and its sandbox is gone. The launch must not fail on it (the kill is reported by
    the supervisor), must not write maps for a pid it only has part of, and must release bwrap."""
    with bw.Launch() as launch:
        launch._finish(info)
        assert launch.child_pid == pid
        assert launch._block_w not in launch._own, "bwrap's block fd is released"
