"""The workspace disk quota: what a layer is charged, the watcher that kills a command growing
it past the allowance, the rollback of that growth, and the same through LocalBackend with real
bubblewrap (plain and forked workspaces). Writers are real processes; no timing is asserted."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from rl_daytona.backends import bwrap as bw
from rl_daytona.backends import supervise as sv
from rl_daytona.backends import disk_quota as dq
from rl_daytona.backends.local import LocalBackend
from rl_daytona.types import SandboxLimits

MB = 1024 * 1024
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
FILLER = "i=0; while :; do i=$((i+1)); head -c 1M /dev/zero > fill$i || exit 1; done"


def _write(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    return path


def _guarded(upper: Path, quota: int, command: str) -> tuple[dq.QuotaReport | None, int]:
    """Run `command` in `upper` under a QuotaWatch (killing its process group); settle."""
    watch = dq.QuotaWatch(upper, quota)
    watch.start()

    async def go() -> int:
        proc = await asyncio.create_subprocess_exec("sh", "-c", command, cwd=upper,
                                                    start_new_session=True)
        def kill() -> None:
            with contextlib.suppress(ProcessLookupError):  # it may have just ended
                os.killpg(proc.pid, signal.SIGKILL)

        watcher = asyncio.ensure_future(watch.watch(kill))
        code = await proc.wait()
        watcher.cancel()
        return code

    code = asyncio.run(go())
    return watch.settle(), code


# ----- the charge ------------------------------------------------------------------------------
def test_every_entry_costs_at_least_a_block_and_links_are_not_followed(tmp_path: Path) -> None:
    outside = _write(tmp_path / "outside", 8 * MB)
    root = tmp_path / "upper"
    _write(root / "src" / "big", MB)
    (root / "empty").touch()
    (root / "link").symlink_to(outside)
    entries = dict(dq.walk(root))
    assert entries["src/big"].charge == MB and entries["src"].charge == dq.ENTRY_BYTES
    assert entries["empty"].charge == entries["link"].charge == dq.ENTRY_BYTES
    assert dq.usage(root) == sum(e.charge for e in entries.values()) == MB + 3 * dq.ENTRY_BYTES


def test_preallocated_blocks_count(tmp_path: Path) -> None:
    root = tmp_path / "upper"
    (root).mkdir()
    (root / "f").touch()
    subprocess.run(["fallocate", "--keep-size", "-l", "8M", str(root / "f")], check=True)
    assert (root / "f").stat().st_size == 0 and dq.usage(root) >= 8 * MB


def test_a_scan_stops_once_past_its_limit(tmp_path: Path) -> None:
    for i in range(20):
        _write(tmp_path / f"d{i % 4}" / f"f{i}", MB)
    full = dq.usage(tmp_path)
    partial = dq.usage(tmp_path, stop_above=2 * MB)
    assert 2 * MB < partial < full


_SHUT_SCRIPT = """
import sys
from pathlib import Path
from rl_daytona.backends import disk_quota as dq
MB = 1024 * 1024
root = Path(sys.argv[1]) / "upper"
(root / "shut" / "inner").mkdir(parents=True)
(root / "ro").write_bytes(b"o" * 100)
watch = dq.QuotaWatch(root, MB)
watch.start()
(root / "shut" / "inner" / "f").write_bytes(b"x" * 2 * MB)
with open(root / "ro", "ab") as grown:
    grown.write(b"x" * 2 * MB)
for shut in ("ro", "shut/inner", "shut"):
    (root / shut).chmod(0)
print(dq.usage(root), sum(e.charge for _, e in dq.walk(root)), (root / "shut").stat().st_mode & 0o777)
report = watch.settle()
print(report.removed, report.final, dq.usage(root), (root / "ro").stat().st_size)
"""


def test_what_the_command_shut_is_counted_and_taken_back(tmp_path: Path) -> None:
    """As an owner that is not root (root reads anything): the walk opens a shut directory
    for its owner and restores its mode after; the rollback reaches inside shut directories
    and cuts back a grown file made read-only."""
    shared = Path(tempfile.mkdtemp(prefix="rl-daytona-quota-"))
    try:
        shared.chmod(0o777)
        drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
        out = subprocess.run([*drop, sys.executable, "-c", _SHUT_SCRIPT, str(shared)], capture_output=True,
                             text=True, cwd=Path(__file__).parents[2], check=True).stdout.splitlines()
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(shared)], check=False)
        shutil.rmtree(shared)
    assert out[0] == f"{4 * MB + 3 * dq.ENTRY_BYTES} " * 2 + "0", "ro: 2 MB + 100 bytes in whole blocks"
    assert out[1] == f"('shut/inner/f', 'ro') {3 * dq.ENTRY_BYTES} {3 * dq.ENTRY_BYTES} 100"


def test_the_walk_and_the_rollback_never_go_through_a_symlink(tmp_path: Path) -> None:
    host = _write(tmp_path / "host" / "secret", 8 * MB)
    root = tmp_path / "upper"
    root.mkdir()
    (root / "d").symlink_to(host.parent)  # what a racing command could swap a directory for
    assert dq.usage(root) == dq.ENTRY_BYTES
    watch = dq.QuotaWatch(root, MB)
    assert watch._take_back("d/secret", dq.Entry(8 * MB, 0, 8 * MB, "file")) == 0
    assert host.read_bytes() == b"x" * 8 * MB


def test_nesting_deeper_than_the_walk_goes_is_over_any_quota_and_taken_back(tmp_path: Path) -> None:
    watch = dq.QuotaWatch(tmp_path, 64 * MB)
    watch.start()
    deep = tmp_path.joinpath(*["n"] * (dq.MAX_DEPTH + 5))
    _write(deep / "hidden", MB)
    assert dq.usage(tmp_path) >= dq.DEEP_CHARGE
    report = watch.settle()
    assert report is not None and report.final == dq.usage(tmp_path) < 64 * MB


def test_a_scan_is_due_when_free_space_drops_or_at_the_backstop_within_its_cost(tmp_path: Path) -> None:
    watch = dq.QuotaWatch(tmp_path, 8 * MB)
    assert not watch.scan_due(dq.POLL_MIN, dropped=MB, headroom=8 * MB)
    assert watch.scan_due(dq.POLL_MIN, dropped=4 * MB, headroom=8 * MB)
    assert watch.scan_due(dq.POLL_MAX, dropped=-MB, headroom=8 * MB), "growth masked by frees"
    assert watch.scan_due(dq.POLL_MIN, dropped=dq.TRIGGER_FLOOR, headroom=0)
    watch._scan_seconds = 0.5  # a huge workspace: never more than 1/DUTY of the time scanning
    assert not watch.scan_due(dq.DUTY * 0.5 - 0.01, dropped=8 * MB, headroom=0)
    assert watch.scan_due(dq.DUTY * 0.5, dropped=8 * MB, headroom=0)


# ----- watch and rollback ----------------------------------------------------------------------
def test_a_writer_past_the_quota_is_killed_and_its_growth_taken_back(tmp_path: Path) -> None:
    keep = _write(tmp_path / "keep.txt", 2 * MB)
    report, code = _guarded(tmp_path, 8 * MB, FILLER)
    assert code == -signal.SIGKILL and report is not None and report.killed
    assert report.peak > 8 * MB >= report.final == dq.usage(tmp_path)
    assert keep.read_bytes() == b"x" * 2 * MB, "what was there before is untouched"
    left = sorted(int(p.name[4:]) for p in tmp_path.glob("fill*"))
    assert left == list(range(1, len(left) + 1)), "the newest files were taken back first"
    assert {f"fill{n}" for n in range(len(left) + 1, len(left) + 1 + len(report.removed))} \
        == set(report.removed)
    assert "disk quota exceeded" in report.message() and "8 MB" in report.message()


def test_a_command_within_the_quota_is_left_alone(tmp_path: Path) -> None:
    report, code = _guarded(tmp_path, 8 * MB, "head -c 3M /dev/zero > a && mkdir -p b/c && echo > b/c/d")
    assert (report, code) == (None, 0) and (tmp_path / "a").stat().st_size == 3 * MB


def test_a_quick_command_that_ends_over_the_quota_is_taken_back(tmp_path: Path) -> None:
    report, _ = _guarded(tmp_path, 4 * MB, "head -c 3M /dev/zero > a; head -c 3M /dev/zero > b")
    assert report is not None and report.final <= 4 * MB and (tmp_path / "a").exists()
    assert report.removed == ("b",)


def test_grown_files_are_cut_back_to_their_size_at_the_start(tmp_path: Path) -> None:
    log = _write(tmp_path / "log", MB)
    report, _ = _guarded(tmp_path, 2 * MB, "head -c 3M /dev/zero >> log")
    assert report is not None and report.removed == ("log",)
    assert log.read_bytes() == b"x" * MB


def test_new_files_go_first_then_new_directories_deepest_first_and_old_ones_stay(tmp_path: Path) -> None:
    old = _write(tmp_path / "src" / "old.py", 1000)
    watch = dq.QuotaWatch(tmp_path, MB)
    watch.start()
    _write(tmp_path / "out" / "a" / "b" / "f", 10)
    _write(tmp_path / "src" / "new.py", 10)
    for i in range(400):  # 400 directories: 1.6 MB at a block each
        (tmp_path / "many" / str(i)).mkdir(parents=True)
    report = watch.settle()
    assert report is not None and not report.killed and report.final == dq.usage(tmp_path) <= MB
    assert set(report.removed[:2]) == {"out/a/b/f", "src/new.py"}
    assert report.removed[2] == "out/a/b" and all(p.startswith("many/") for p in report.removed[3:])
    assert old.exists() and dq.usage(tmp_path) > MB - 2 * dq.ENTRY_BYTES, "no more than needed"


def test_a_layer_seeded_over_quota_may_shrink_but_not_grow(tmp_path: Path) -> None:
    for name in "abc":
        _write(tmp_path / name, MB)  # the host seeded 3 MB into a 1 MB quota
    report, code = _guarded(tmp_path, MB, "rm a")
    assert (report, code) == (None, 0)
    report, _ = _guarded(tmp_path, MB, "head -c 512K /dev/zero > d; head -c 1M /dev/zero > e")
    assert report is not None and report.final <= 2 * MB + 2 * dq.ENTRY_BYTES
    assert (tmp_path / "b").exists() and (tmp_path / "c").exists()


def test_run_limited_hands_the_watcher_its_kill_and_stops_it_after(tmp_path: Path) -> None:
    calls: list[str] = []

    async def trigger(kill: object) -> None:
        calls.append("started")
        await asyncio.sleep(0.05)
        kill()  # type: ignore[operator]

    async def idle(_kill: object) -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            calls.append("cancelled")
            raise

    async def go(watch: bw.Watcher, command: str) -> sv.RunOutcome:
        outcome = await bw.run_limited(["sh", "-c", command], limits=SandboxLimits(), timeout=60,
                                       stdin=None, output_cap=4096, env=ENV, nproc=False, watch=watch)
        await asyncio.sleep(0)
        return outcome

    killed = asyncio.run(go(trigger, "sleep 60"))
    assert killed.returncode == -signal.SIGKILL and not killed.timed_out
    done = asyncio.run(go(idle, "true"))
    assert done.returncode == 0 and calls == ["started", "cancelled"]


# ----- through LocalBackend (real bubblewrap) --------------------------------------------------
LIMITS = SandboxLimits(cpu_seconds=20, max_file_mb=8, workspace_mb=8)


def _upper(backend: LocalBackend, box: object) -> Path:
    return backend.root / box.sandbox_id / "upper"  # type: ignore[attr-defined]


@pytest.mark.parametrize("isolation", ["bwrap", "none"])
def test_a_filler_is_stopped_marked_and_the_sandbox_goes_on(tmp_path: Path, isolation: str) -> None:
    backend = LocalBackend(tmp_path / "sandboxes", limits=LIMITS, isolation=isolation)

    async def go() -> None:
        box = await backend.create("run-1")
        await backend.write_files(box, {"task.py": "print('ok')\n"})
        result = await backend.exec(box, FILLER, timeout=60)
        assert result.limit_hit == "disk" and "disk quota exceeded" in result.output, result
        assert dq.usage(_upper(backend, box)) <= 8 * MB
        after = await backend.exec(box, "python task.py && rm -f fill* && head -c 6M /dev/zero > ok")
        assert (after.stdout, after.limit_hit, after.exit_code) == ("ok\n", None, 0), after
        await backend.delete(box)

    asyncio.run(go())


def test_a_fork_is_charged_only_its_own_upper(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "sandboxes", limits=LIMITS)

    async def go() -> None:
        parent = await backend.create("run-1")
        await backend.write_files(parent, {"data.bin": b"p" * 6 * MB})
        child = await backend.fork(parent)
        within = await backend.exec(child, "head -c 6M /dev/zero > mine")
        assert within.limit_hit is None and within.exit_code == 0, within
        grown = await backend.exec(child, "head -c 4M /dev/zero >> data.bin")  # copied up: 10 MB
        assert grown.limit_hit == "disk", grown
        assert (await backend.read_file(child, "data.bin")) == b"p" * 6 * MB, "the lower version is back"
        assert (await backend.read_file(child, "mine")) == b"\0" * 6 * MB
        for box in (child, parent):
            await backend.delete(box)

    asyncio.run(go())


@pytest.mark.parametrize("files", [0, 5, dq.INLINE_ENTRIES - 1, dq.INLINE_ENTRIES, 3 * dq.INLINE_ENTRIES + 7])
def test_a_listing_walked_partly_in_a_thread_is_the_whole_walk(tmp_path: Path, files: int) -> None:
    """Short walks stay on the loop; a long one goes on in a thread from where it stopped."""
    for i in range(files):
        sub = tmp_path / f"d{i % 9}"
        sub.mkdir(exist_ok=True)
        (sub / f"f{i}").write_bytes(b"x" * (i % 3000))
    hops: list[object] = []
    real = asyncio.to_thread

    async def counted(func, *args):  # type: ignore[no-untyped-def]
        hops.append(func)
        return await real(func, *args)

    async def go() -> dict[str, dq.Entry]:
        asyncio.to_thread = counted  # type: ignore[assignment]
        try:
            return await dq.listed(tmp_path)
        finally:
            asyncio.to_thread = real  # type: ignore[assignment]

    got = asyncio.run(go())
    assert got == dict(dq.walk(tmp_path))
    assert len(hops) == (1 if len(got) >= dq.INLINE_ENTRIES else 0), (len(got), hops)
