"""LocalBackend against real bubblewrap and real processes: isolation, limits, forks, cleanup."""

from __future__ import annotations

import asyncio
import os
import sys
import socket
import time
import uuid
from pathlib import Path
from typing import Any, Awaitable, TypeVar

import pytest

from rl_daytona.backends.base import (
    Backend, IsolationUnavailableError, SandboxError, SandboxHandle,
)
from rl_daytona.backends import sandbox_support as ss
from rl_daytona.backends.local import LocalBackend
from rl_daytona.types import SandboxLimits

T = TypeVar("T")
LIMITS = SandboxLimits(cpu_seconds=5, memory_mb=1024, max_processes=64, max_file_mb=4,
                       max_output_bytes=4096)


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


@pytest.fixture(params=[True, False], ids=["helper", "fallback"])
def backend(tmp_path: Path, request: pytest.FixtureRequest) -> LocalBackend:
    """Every test runs with the compiled pid-1 helper and with the prlimit/setpriv/sh chain
    that machines without a C compiler get."""
    made = LocalBackend(tmp_path / "sandboxes", limits=LIMITS, pid1_helper=request.param)
    assert (made._support is not None and made._support.init is not None) == request.param, made._support
    # where this user may make device nodes (root), the helper's sandboxes use the staged /dev
    assert made._support.staged_dev == (request.param and ss.can_make_devices(ss.cache_dir())), made._support
    return made


def _tree(root: Path) -> list[tuple[str, int, int]]:
    """Every path under `root` with its mode and size (what a sandbox could have changed)."""
    found = []
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            info = os.lstat(os.path.join(folder, name))
            found.append((os.path.relpath(os.path.join(folder, name), root), info.st_mode, info.st_size))
    return sorted(found)


async def _sandbox(backend: LocalBackend, files: dict[str, str] | None = None) -> SandboxHandle:
    box = await backend.create("run-1", {"task": "t"})
    await backend.write_files(box, files or {})
    return box


async def _out(backend: LocalBackend, box: SandboxHandle, command: str, **kw: Any) -> str:
    result = await backend.exec(box, command, **kw)
    return result.stdout


def _descendants(roots: set[int]) -> int:
    """How many live processes descend from `roots` (the sandbox's bwrap), counted from /proc:
    only the sandbox's own processes, whatever else this machine is running."""
    parent: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = open(f"/proc/{name}/stat", encoding="utf-8", errors="replace").read()
            except OSError:
                continue
            parent[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])
    count = 0
    for pid in parent:
        seen, p = 0, pid
        while p in parent and p not in roots and seen < 64:
            p, seen = parent[p], seen + 1
        count += p in roots and pid not in roots
    return count


# ----- basics ----------------------------------------------------------------------------
def test_satisfies_protocol(backend: LocalBackend) -> None:
    assert isinstance(backend, Backend) and backend.name == "local"


def test_round_trip(backend: LocalBackend) -> None:
    async def go() -> None:
        box = await _sandbox(backend, {"a.txt": "hello", "src/b.py": "print(6 * 7)"})
        assert await backend.read_file(box, "a.txt") == b"hello"
        assert await backend.read_file(box, "/workspace/src/b.py") == b"print(6 * 7)"
        result = await backend.exec(box, "cat a.txt && python src/b.py && pwd")
        assert (result.exit_code, result.stdout) == (0, "hello42\n/workspace\n")
        result = await backend.exec(box, "cat; echo $FOO; pwd", stdin=b"in|", env={"FOO": "bar"},
                                    cwd="/workspace/src")
        assert result.stdout == "in|bar\n/workspace/src\n"
        await backend.exec(box, "echo made > out.txt; exit 3")
        assert await backend.read_file(box, "out.txt") == b"made\n"
        failed = await backend.exec(box, "echo oops >&2; exit 3")
        assert (failed.exit_code, failed.stderr, failed.limit_hit) == (3, "oops\n", None)
        with pytest.raises(FileNotFoundError):
            await backend.read_file(box, "missing.txt")
        assert await backend.is_alive(box)
    run(go())


def test_pytest_runs_inside(backend: LocalBackend) -> None:
    async def go() -> None:
        box = await _sandbox(backend, {"test_x.py": "def test_ok():\n    assert 1 + 1 == 2\n"})
        result = await backend.exec(box, "python -m pytest -q -p no:cacheprovider test_x.py")
        assert result.exit_code == 0, result.output
        assert "1 passed" in result.stdout
    run(go())


# ----- isolation -------------------------------------------------------------------------
def test_runs_as_unprivileged_user_in_own_namespaces(backend: LocalBackend) -> None:
    async def go() -> None:
        box = await _sandbox(backend)
        out = await _out(backend, box, "id -u; id -g; hostname; echo $$; ls /proc | grep -c '^[0-9]'")
        uid, gid, host, pid, nprocs = out.split()
        assert (uid, gid, host) == ("1000", "1000", "sandbox")
        assert int(pid) < 10 and int(nprocs) < 10
        caps = await _out(backend, box, "grep -E '^(Cap|NoNewPrivs)' /proc/self/status")
        fields = dict(line.split(":\t") for line in caps.splitlines())
        assert {k: v for k, v in fields.items() if k.startswith("Cap")} == dict.fromkeys(
            ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"], "0000000000000000"), fields
        assert fields["NoNewPrivs"] == "1"
        groups = await _out(backend, box, "id -G")
        assert groups.split() == ["1000"]
    run(go())


def test_network_is_blocked(backend: LocalBackend) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    probe = ("import socket\nfor host, port in [('1.1.1.1', 80), ('127.0.0.1', %d)]:\n"
             "    try:\n        socket.create_connection((host, port), timeout=2)\n"
             "        print('connected', host)\n    except OSError as e:\n"
             "        print('blocked', host)\n") % port

    async def go() -> None:
        box = await _sandbox(backend, {"probe.py": probe})
        assert await _out(backend, box, "python probe.py") == "blocked 1.1.1.1\nblocked 127.0.0.1\n"
    try:
        run(go())
    finally:
        listener.close()


def test_nothing_is_written_outside_the_workspace(backend: LocalBackend, tmp_path: Path) -> None:
    marker = f"rl-daytona-escape-{os.getpid()}"
    host_target = tmp_path / "escape.txt"
    attempts = [f"/etc/{marker}", f"/usr/{marker}", f"/{marker}", f"/root/{marker}",
                f"/tmp/{marker}", str(host_target), f"/dev/{marker}"]

    staged = backend._support.root(backend._python.prefixes)  # the sandbox's / on the host
    before = _tree(staged)

    async def go() -> None:
        box = await _sandbox(backend)
        for path in attempts + ["/dev/shm/../x", "/dev/pts/x", "/init", "/etc/passwd", "/dev/null/x"]:
            await backend.exec(box, f"mkdir -p $(dirname {path}); echo x > {path}; chmod 777 {path}")
    run(go())
    assert not host_target.exists()
    for path in attempts[:5]:
        assert not os.path.exists(path), path
    assert _tree(staged) == before, "the staged root is unchanged"


def test_dev_has_working_nodes_and_private_ptys(backend: LocalBackend) -> None:
    async def go() -> None:
        box = await _sandbox(backend)
        nodes = await backend.exec(box, "echo x > /dev/null && head -c 5 /dev/urandom | wc -c && "
                                        "head -c 3 /dev/zero | wc -c && ls /dev/pts")
        assert nodes.exit_code == 0, nodes.stderr
        assert nodes.stdout.split() == ["5", "3", "ptmx"], "no host pty is visible"
        pty = await backend.exec(box, "python -c 'import os, pty; m, s = pty.openpty(); os.write(m, b\"hi\\n\"); "
                                      "print(os.ttyname(s), os.read(s, 3))'")
        assert pty.stdout.split() == ["/dev/pts/0", "b'hi\\n'"], pty.stderr
        shm = await backend.exec(box, "python -c 'import multiprocessing as m; m.Lock(); print(1)'")
        assert shm.stdout == "1\n", shm.stderr
    run(go())


def test_host_secrets_and_files_are_invisible(backend: LocalBackend, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAYTONA_API_KEY", "secret-xyz")
    (tmp_path / "host-only.txt").write_text("host data")

    async def go() -> None:
        box = await _sandbox(backend)
        out = await _out(backend, box, "env; cat /proc/1/environ /proc/self/environ; "
                                       "cat /proc/*/environ 2>/dev/null")
        assert "secret-xyz" not in out and "DAYTONA" not in out
        assert await _out(backend, box, "ls -A /root") == ".pyenv\n" or not Path("/root/.pyenv").exists()
        probes = ["/etc/shadow", "/work/main/rl_daytona", "/work/shared", "/root/.bash_history",
                  str(tmp_path / "host-only.txt"), "/etc/hostname", "/home"]
        listing = await _out(backend, box, " ; ".join(f"test -e {p} && echo SEEN {p}" for p in probes))
        assert listing == ""
        etc = (await _out(backend, box, "ls /etc")).split()
        assert "shadow" not in etc and "passwd" in etc and len(etc) < 15
    run(go())


# ----- limits ----------------------------------------------------------------------------
def test_fork_bomb_is_contained(backend: LocalBackend) -> None:
    async def go() -> None:
        box = await _sandbox(backend)
        started = time.monotonic()
        task = asyncio.create_task(backend.exec(box, "bomb(){ bomb|bomb& }; bomb; sleep 30",
                                                timeout=5))
        peak = 0
        while not task.done():  # the sandbox's process count, sampled while the bomb runs
            peak = max(peak, _descendants(set(backend._running.get(box.sandbox_id, set()))))
            await asyncio.sleep(0.05)
        result = await task
        assert time.monotonic() - started < 25  # killed, not left to its `sleep 30`
        assert result.timed_out or result.limit_hit == "processes"
        assert peak < LIMITS.max_processes + 20, peak
        fresh = await backend.create("run-1")
        assert await _out(backend, fresh, "echo alive") == "alive\n"
    run(go())


def test_process_limit_is_per_command(backend: LocalBackend) -> None:
    script = "for i in $(seq 30); do sleep 1 & done; wait; echo done"

    async def go() -> None:
        boxes = [await _sandbox(backend) for _ in range(6)]  # 6 x 31 processes > 64 at once
        results = await asyncio.gather(*(backend.exec(b, script, timeout=20) for b in boxes))
        assert [r.stdout for r in results] == ["done\n"] * 6, [r.stderr[:200] for r in results]
    run(go())


@pytest.mark.parametrize("helper", [True, False], ids=["helper", "fallback"])
def test_cpu_limit_kills_busy_loop(tmp_path: Path, helper: bool) -> None:
    backend = LocalBackend(tmp_path / "sb", limits=SandboxLimits(cpu_seconds=2), pid1_helper=helper)

    async def go() -> None:
        box = await backend.create("run-1")
        spent = backend.cpu_seconds()
        started = time.monotonic()
        # the CPU limit ends it, not the wall clock (however slowly a loaded machine runs it)
        result = await backend.exec(box, "python -c 'while True: pass'", timeout=300)
        assert not result.timed_out and time.monotonic() - started < 300
        assert result.limit_hit == "cpu" and result.exit_code != 0
        assert backend.cpu_seconds() - spent >= 1.5  # the sandbox's CPU time is accounted
        shell = await backend.exec(box, "while :; do :; done", timeout=300)
        assert shell.limit_hit == "cpu" and not shell.timed_out
    run(go())


@pytest.mark.parametrize("helper", [True, False], ids=["helper", "fallback"])
def test_memory_limit(tmp_path: Path, helper: bool) -> None:
    backend = LocalBackend(tmp_path / "sb", limits=SandboxLimits(memory_mb=256), pid1_helper=helper)

    async def go() -> None:
        box = await backend.create("run-1")
        result = await backend.exec(box, "python -c 'b = bytearray(4 * 1024**3)'", timeout=20)
        assert result.exit_code != 0 and result.limit_hit == "memory", result
    run(go())


def test_file_size_limit(backend: LocalBackend) -> None:
    async def go() -> None:
        box = await _sandbox(backend)
        result = await backend.exec(box, "dd if=/dev/zero of=big bs=1M count=20")
        assert result.exit_code != 0 and result.limit_hit == "file_size"
        size = int(await _out(backend, box, "stat -c %s big"))
        assert size <= LIMITS.max_file_mb * 1024 * 1024
        tmp = await backend.exec(box, "dd if=/dev/zero of=/tmp/big bs=1M count=20")
        assert tmp.limit_hit == "file_size"
    run(go())


def test_endless_output_is_truncated_and_killed(backend: LocalBackend) -> None:
    async def go() -> None:
        box = await _sandbox(backend)
        started = time.monotonic()
        result = await backend.exec(box, "yes", timeout=30)
        assert time.monotonic() - started < 20 and not result.timed_out  # the output cap, not the clock
        assert result.output_truncated and result.limit_hit == "output"
        assert len(result.stdout) == LIMITS.max_output_bytes
        small = await backend.exec(box, "head -c 10000 /dev/zero | tr '\\0' a")
        assert small.output_truncated and small.limit_hit is None and small.exit_code == 0
    run(go())


def test_wall_clock_timeout(backend: LocalBackend) -> None:
    async def go() -> None:
        box = await _sandbox(backend)
        started = time.monotonic()
        result = await backend.exec(box, "echo start; sleep 30", timeout=1)
        assert time.monotonic() - started < 20  # the 1 s timeout, not the `sleep 30`
        assert result.timed_out and result.exit_code == 124 and result.stdout == "start\n"
        assert await _out(backend, box, "echo after") == "after\n"
    run(go())


# ----- forks -----------------------------------------------------------------------------
def test_fork_is_copy_on_write_both_ways(backend: LocalBackend) -> None:
    async def go() -> None:
        parent = await _sandbox(backend, {"shared.txt": "v1", "doomed.txt": "x"})
        child = await backend.fork(parent)
        assert child.parent_id == parent.sandbox_id and child.run_id == "run-1"
        assert child.labels == {"task": "t"}
        assert await backend.read_file(child, "shared.txt") == b"v1"
        await backend.exec(child, "echo child > child.txt; echo v2 > shared.txt; rm doomed.txt")
        await backend.write_files(parent, {"late.txt": "parent-after-fork"})
        assert await _out(backend, parent, "cat shared.txt; ls") == "v1doomed.txt\nlate.txt\nshared.txt\n"
        assert await _out(backend, child, "ls") == "child.txt\nshared.txt\n"
        assert await backend.read_file(child, "shared.txt") == b"v2\n"
        with pytest.raises(FileNotFoundError):
            await backend.read_file(child, "doomed.txt")
        with pytest.raises(FileNotFoundError):
            await backend.read_file(parent, "child.txt")
        await backend.write_files(child, {"deep/new.txt": "n"})
        assert await backend.read_file(child, "deep/new.txt") == b"n"
    run(go())


def test_fork_tree_survives_deletes(backend: LocalBackend) -> None:
    async def go() -> None:
        parent = await _sandbox(backend, {"base.txt": "base"})
        child = await backend.fork(parent)
        await backend.write_files(child, {"gen1.txt": "1"})
        grandchild = await backend.fork(child)
        await backend.write_files(grandchild, {"gen2.txt": "2"})
        await backend.delete(child)
        assert not await backend.is_alive(child)
        assert await _out(backend, grandchild, "cat base.txt gen1.txt gen2.txt") == "base12"
        await backend.delete(parent)
        assert await _out(backend, grandchild, "cat base.txt") == "base"
        other = await _sandbox(backend, {"p.txt": "p"})
        kid = await backend.fork(other)
        await backend.delete(kid)
        assert await _out(backend, other, "cat p.txt; echo more >> p.txt; cat p.txt") == "ppmore\n"
    run(go())


def test_many_forks_of_one_template_share_layers(backend: LocalBackend) -> None:
    async def go() -> None:
        template = await _sandbox(backend, {"seed.txt": "s"})
        kids = await asyncio.gather(*(backend.fork(template) for _ in range(8)))
        assert len(os.listdir(backend.root / "_layers")) == 1
        outs = await asyncio.gather(*(_out(backend, k, "cat seed.txt") for k in kids))
        assert outs == ["s"] * 8
    run(go())


def test_deep_fork_chain_flattens(backend: LocalBackend) -> None:
    async def go() -> None:
        box = await _sandbox(backend, {"f0": "0"})
        for depth in range(1, 40):
            child = await backend.fork(box)
            await backend.delete(box) if depth % 2 else None
            await backend.write_files(child, {f"f{depth}": str(depth)})
            box = child
        assert await _out(backend, box, "cat $(ls | sort -V)") == "".join(map(str, range(40)))
    run(go())


# ----- lifecycle -------------------------------------------------------------------------
def test_delete_leaves_nothing_behind(backend: LocalBackend) -> None:
    async def go() -> None:
        parent = await _sandbox(backend, {"a": "a"})
        child = await backend.fork(parent)
        await backend.exec(child, "mkdir locked && echo x > locked/f && chmod 000 locked; rm a")
        await backend.exec(parent, "echo p > p")
        for box in (parent, child, parent):
            await backend.delete(box)
        with pytest.raises(SandboxError):
            await backend.exec(parent, "true")
        assert not await backend.is_alive(parent)
    run(go())
    assert sorted(os.listdir(backend.root)) == ["_layers", "_spare"]
    assert os.listdir(backend.root / "_layers") == []
    for spare in (backend.root / "_spare").iterdir():  # emptied folders kept for the next create
        assert sorted(os.listdir(spare)) == ["meta.json", "upper"] and (spare / "meta.json").stat().st_size == 0
        assert os.listdir(spare / "upper") == [], "with a new empty upper"
        assert os.stat(spare / "upper").st_uid == (backend._owner if backend._owner is not None else os.getuid())


def test_a_recycled_folder_holds_nothing_of_its_last_sandbox(backend: LocalBackend) -> None:
    async def go() -> None:
        old = await _sandbox(backend, {"secret.txt": "from the last rollout"})
        done = await backend.exec(old, "mkdir -p deep/er && echo x > deep/er/f && chmod 000 deep "
                                       "&& ln -s /etc/passwd link && chmod 700 /workspace")
        assert done.exit_code == 0, done.stderr
        os.setxattr(backend._upper(old.sandbox_id), "user.mark", b"1")  # (no setfattr in the sandbox)
        folder = os.stat(backend._dir(old.sandbox_id)).st_ino
        old_upper = os.open(backend._upper(old.sandbox_id), os.O_RDONLY | os.O_DIRECTORY)
        try:
            await backend.delete(old)
            new = await backend.create("run-2", {"k": "v"})
            assert os.stat(backend._dir(new.sandbox_id)).st_ino == folder, "the spare folder was reused"
            # a process of the old sandbox still alive (here: an open directory) holds an upper
            # that no sandbox uses any more
            assert os.fstat(old_upper).st_nlink == 0
            assert os.stat(backend._upper(new.sandbox_id)).st_ino != os.fstat(old_upper).st_ino
        finally:
            os.close(old_upper)
        listing = await backend.exec(new, "ls -A /workspace; stat -c %a /workspace; id -u")
        assert listing.stdout.split() == ["755", "1000"], listing
        assert os.listxattr(backend._upper(new.sandbox_id)) == []
        assert [(h.sandbox_id, h.run_id, h.labels) for h in await backend.list_sandboxes()] == \
            [(new.sandbox_id, "run-2", {"k": "v"})], "no sandbox of the old one's is listed"
        await backend.write_files(new, {"mine.txt": "new"})
        assert await _out(backend, new, "ls") == "mine.txt\n"
    run(go())


def test_spares_are_capped(backend: LocalBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    import rl_daytona.backends.local as local

    monkeypatch.setattr(local, "_MAX_SPARES", 2)

    async def go() -> None:
        boxes = [await _sandbox(backend, {"f": "x"}) for _ in range(5)]
        for box in boxes:
            await backend.delete(box)
        assert len(os.listdir(backend.root / "_spare")) == 2
        again = [await backend.create("run-1") for _ in range(3)]  # two spares, one new folder
        assert os.listdir(backend.root / "_spare") == []
        assert {h.sandbox_id for h in await backend.list_sandboxes()} == {h.sandbox_id for h in again}
    run(go())


def test_list_sandboxes_from_a_fresh_backend(backend: LocalBackend) -> None:
    async def go() -> None:
        first = await backend.create("run-a", {"k": "v"})
        kid = await backend.fork(first)
        await backend.create("run-b")
        fresh = LocalBackend(backend.root)
        listed = {h.sandbox_id: h for h in await fresh.list_sandboxes("run-a")}
        assert set(listed) == {first.sandbox_id, kid.sandbox_id}
        assert listed[kid.sandbox_id].parent_id == first.sandbox_id
        assert listed[first.sandbox_id].labels == {"k": "v"}
        assert len(await fresh.list_sandboxes()) == 3
        for handle in await fresh.list_sandboxes("run-a"):  # reap orphans
            await fresh.delete(handle)
        assert [h.run_id for h in await backend.list_sandboxes()] == ["run-b"]
        await fresh.close()
    run(go())


def test_create_is_fast(backend: LocalBackend) -> None:
    async def go() -> float:
        started = time.monotonic()
        for _ in range(50):
            await backend.create("run-1")
        return (time.monotonic() - started) / 50
    assert run(go()) < 0.05


# ----- paths -----------------------------------------------------------------------------
@pytest.mark.parametrize("layered", [False, True])
def test_path_escapes_are_refused(backend: LocalBackend, layered: bool) -> None:
    async def go() -> None:
        box = await _sandbox(backend, {"real/inside.txt": "in"})
        if layered:
            box = await backend.fork(box)
        await backend.exec(box, "ln -s /etc etc_link; ln -s ../../.. up_link; "
                                "ln -s real alias; ln -s /workspace/real abs_alias")
        for bad in ["../x", "/etc/passwd", "/workspace/../x", "a/../../x", "etc_link/passwd",
                    "up_link/etc/passwd", "/workspacex/y", ""]:
            with pytest.raises(ValueError):
                await backend.read_file(box, bad)
            with pytest.raises(ValueError):
                await backend.write_files(box, {bad: "evil"})
        assert await backend.read_file(box, "alias/inside.txt") == b"in"
        await backend.write_files(box, {"abs_alias/new.txt": "ok"})
        assert await backend.read_file(box, "real/new.txt") == b"ok"
    run(go())
    assert not os.path.exists("/workspace")


# ----- isolation modes -------------------------------------------------------------------
def test_isolation_none_is_explicit_and_works(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAYTONA_API_KEY", "secret-xyz")
    backend = LocalBackend(tmp_path / "sb", isolation="none", limits=LIMITS)

    async def go() -> None:
        box = await _sandbox(backend, {"a.txt": "A"})
        result = await backend.exec(box, "cat a.txt; env; pwd")
        assert result.stdout.startswith("A") and "secret-xyz" not in result.stdout
        assert result.stdout.strip().endswith(f"{box.sandbox_id}/upper")
        child = await backend.fork(box)
        await backend.exec(child, "echo c > a.txt")
        assert await backend.read_file(box, "a.txt") == b"A"
        assert await backend.read_file(child, "a.txt") == b"c\n"
        timed = await backend.exec(box, "sleep 30", timeout=1)
        assert timed.timed_out
        await backend.delete(child)
        await backend.delete(box)
    run(go())


def test_unusable_bwrap_raises_clear_error(tmp_path: Path) -> None:
    for bogus in ["/nonexistent/bwrap", "/bin/false"]:
        with pytest.raises(IsolationUnavailableError, match="--isolation none"):
            LocalBackend(tmp_path / "sb", bwrap=bogus)
    with pytest.raises(ValueError):
        LocalBackend(tmp_path / "sb", isolation="chroot")


_STARTER = """
import asyncio, sys
from pathlib import Path
from rl_daytona.backends.local import LocalBackend

async def main() -> None:
    backend = LocalBackend(Path(sys.argv[1]), pid1_helper=sys.argv[2] == "1")
    box = await backend.create("orphan")
    await backend.exec(box, "echo up > started; sleep " + sys.argv[3])

asyncio.run(main())
"""


@pytest.mark.parametrize("helper", [True, False], ids=["helper", "fallback"])
def test_a_sandbox_dies_with_the_process_that_started_it(tmp_path: Path, helper: bool) -> None:
    """Its pid 1 changes uid, which clears the parent-death signal bwrap gave it: set again,
    a command outlives neither its bwrap nor a starter killed outright (a lost actor)."""
    import signal
    import subprocess
    import sys

    marker = f"{70 + uuid.uuid4().int % 1000 / 1000:.3f}"
    starter = subprocess.Popen([sys.executable, "-c", _STARTER, str(tmp_path / "sb"), "1" if helper else "0", marker])

    def sleepers() -> list[int]:
        found = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    if open(f"/proc/{name}/cmdline", "rb").read().split(b"\0")[:2] == [b"sleep", marker.encode()]:
                        found.append(int(name))
                except OSError:
                    continue
        return found

    try:
        deadline = time.monotonic() + 60
        while not sleepers() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sleepers(), "the command started"
        starter.send_signal(signal.SIGKILL)
        starter.wait(timeout=30)
        deadline = time.monotonic() + 10
        while sleepers() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sleepers() == [], "the sandbox's command died with its starter"
    finally:
        starter.kill()
        for pid in sleepers():
            os.kill(pid, signal.SIGKILL)
