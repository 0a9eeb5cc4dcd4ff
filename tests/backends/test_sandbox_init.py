"""The local sandbox's pid-1 helper (`sandbox_init.c`), the staged /etc and the staged root:
the helper run directly (limits, exit statuses, bad arguments), inside a sandbox (it reaps
orphans), built or not built, a broken helper making the backend fall back to the
prlimit/setpriv/sh chain, and unusable staged device nodes to bwrap's own /dev."""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import subprocess
import threading
from pathlib import Path

import pytest

from rl_daytona.backends import bwrap as bw
from rl_daytona.backends import sandbox_support as ss
from rl_daytona.backends.local import LocalBackend

needs_cc = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                              reason="no C compiler: sandboxes use the fallback chain")


@pytest.fixture(scope="module")
def init(tmp_path_factory: pytest.TempPathFactory) -> str:
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: sandboxes use the fallback chain")
    built = ss.build_init(tmp_path_factory.mktemp("init"))
    assert built is not None
    return built


def _run(init: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([init, *args], capture_output=True, text=True, timeout=30, check=False)


def test_the_helper_sets_every_limit_then_runs_the_command(init: str) -> None:
    done = _run(init, "-c=7:8", "-a=536870912:536870912", "-f=4096:4096", "-n=50:51", "--",
                "sh", "-c", "ulimit -t; ulimit -Ht; ulimit -v; ulimit -f; ulimit -p; ulimit -Hp")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["7", "8", "524288", "8", "50", "51"]


def test_the_helper_passes_the_commands_status_on(init: str) -> None:
    assert _run(init, "--", "sh", "-c", "exit 3").returncode == 3
    assert _run(init, "--", "sh", "-c", "kill -9 $$").returncode == 128 + 9
    missing = _run(init, "--", "/nonexistent/tool")
    assert missing.returncode == 127 and missing.stderr == "sandbox init: /nonexistent/tool: No such file or directory\n"


@pytest.mark.parametrize("args", [["-x=1:2", "--", "true"], ["-c=1", "--", "true"], ["-c=a:b", "--", "true"],
                                  ["-c=1:", "--", "true"], ["c=1:2", "--", "true"], ["--"], []])
def test_bad_arguments_are_one_line_and_nothing_runs(init: str, args: list[str]) -> None:
    done = _run(init, *args)
    assert done.returncode == 125 and done.stdout == ""
    assert done.stderr.startswith("sandbox init: bad argument") and done.stderr.count("\n") == 1, done.stderr


def test_a_user_switch_it_is_not_allowed_to_make_fails_closed(init: str) -> None:
    """Without the capabilities (not root) the switch fails: the command never runs."""
    import os
    if os.geteuid() == 0:
        done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
                               init, "-u=1000:1000", "--", "echo", "ran"], capture_output=True, text=True, timeout=30)
    else:
        done = _run(init, "-u=0:0", "--", "echo", "ran")
    assert done.returncode == 125 and "ran" not in done.stdout
    assert done.stderr.startswith("sandbox init: "), done.stderr


@needs_cc
def test_in_a_sandbox_it_is_pid_1_and_reaps_orphans(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "sb")
    assert backend._support is not None and backend._support.init is not None

    async def go() -> tuple[str, str]:
        box = await backend.create("run-1")
        first = await backend.exec(box, "cat /proc/1/cmdline | tr '\\0' ' '")
        # the inner shell exits at once: its sleeps are orphans, reparented to pid 1
        orphans = await backend.exec(box, "sh -c 'for i in 1 2 3; do (sleep 0.1 &); done'; sleep 1; "
                                          "ps -eo stat= | grep -c '^Z' || true")
        return first.stdout, orphans.stdout

    cmdline, zombies = asyncio.run(go())
    assert cmdline.startswith(f"{ss.INIT_PATH} -c=") and " -- sh -c " in cmdline
    assert zombies.strip() == "0", "every orphan that exited was reaped"


def test_without_a_compiler_there_is_no_helper_and_nothing_is_left(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("CC", raising=False)
    assert ss.build_init(tmp_path) is None
    monkeypatch.setenv("CC", "/bin/false")
    assert ss.build_init(tmp_path) is None
    assert list(tmp_path.iterdir()) == [], "no partial binary is left behind"


def test_a_helper_that_cannot_run_a_sandbox_falls_back_to_the_chain(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    etc = ss.stage_etc(tmp_path)
    monkeypatch.setattr(bw, "_smoke_results", {})
    monkeypatch.setattr(bw, "host_support", lambda helper=True: ss.Support(etc, "/bin/false"))
    backend = LocalBackend(tmp_path / "sb")
    assert backend._support == ss.Support(etc, None)

    async def go() -> str:
        box = await backend.create("run-1")
        return (await backend.exec(box, "id -u; ulimit -t")).stdout

    assert asyncio.run(go()).split() == ["1000", str(backend.limits.cpu_seconds)]


def test_the_staged_etc_is_named_by_content_and_made_once_under_a_race(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[Path] = []
    threads = [threading.Thread(target=lambda: made.append(ss.stage_etc(tmp_path))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(made)) == 1 and [p.name for p in tmp_path.iterdir()] == [made[0].name], "no half-made copies left"
    etc = made[0]
    assert (etc / "passwd").read_text().splitlines()[1].startswith("sandbox:x:1000:1000:")
    assert (etc / "ld.so.cache").read_bytes() == Path("/etc/ld.so.cache").read_bytes()
    assert "shadow" not in {p.name for p in etc.iterdir()}
    monkeypatch.setitem(ss._ETC_DATA, "hosts", b"127.0.0.1 localhost sandbox\n")
    changed = ss.stage_etc(tmp_path)
    assert changed != etc and (changed / "hosts").read_bytes() == b"127.0.0.1 localhost sandbox\n"


def test_the_staged_root_holds_the_mount_points_and_is_named_by_content(tmp_path: Path) -> None:
    support = ss.Support(ss.stage_etc(tmp_path), None)
    root = ss.stage_root(tmp_path, support, ("/opt/py/3.11", "/tmp/clone/.venv", "/flatten"))
    assert (root / "etc" / "passwd").read_bytes() == (support.etc / "passwd").read_bytes()
    assert os.readlink(root / "bin") == "usr/bin" and not (root / "init").exists()
    for folder in ("usr", "tmp", "proc", "workspace", "dev", "opt", "opt/py", "opt/py/3.11", "flatten"):
        assert (root / folder).is_dir() and (root / folder).stat().st_mode & 0o7777 == 0o755, folder
    assert not (root / "tmp" / "clone").exists(), "mount points under /tmp are made on its tmpfs"
    assert os.listdir(root / "dev") == [], "no nodes without the helper"
    again = ss.stage_root(tmp_path, support, ("/flatten", "/opt/py/3.11"))
    assert again == root, "the same mount points (those under /tmp aside) make the same root"
    other = ss.stage_root(tmp_path, support, ("/opt/py/3.12",))
    assert other != root and (other / "opt/py/3.12").is_dir() and not (other / "flatten").exists()


@pytest.mark.skipif(not ss.can_make_devices(Path(ss.cache_dir())), reason="this user cannot make device nodes")
def test_a_staged_root_with_devices_has_the_six_nodes(tmp_path: Path, init: str) -> None:
    support = ss.Support(ss.stage_etc(tmp_path), init, devices=True)
    dev = ss.stage_root(tmp_path, support, ()) / "dev"
    nodes = {p.name: (os.major(p.stat().st_rdev), os.minor(p.stat().st_rdev), p.stat().st_mode & 0o777)
             for p in dev.iterdir() if stat.S_ISCHR(p.lstat().st_mode)}
    assert nodes == {"null": (1, 3, 0o666), "zero": (1, 5, 0o666), "full": (1, 7, 0o666),
                     "random": (1, 8, 0o666), "urandom": (1, 9, 0o666), "tty": (5, 0, 0o666)}
    assert os.readlink(dev / "ptmx") == "pts/ptmx" and (dev / "pts").is_dir() and (dev / "shm").is_dir()
    assert (dev.parent / "init").read_bytes() == Path(init).read_bytes()


@pytest.mark.skipif(not ss.can_make_devices(Path(ss.cache_dir())), reason="this user cannot make device nodes")
def test_unusable_staged_nodes_fall_back_to_bwraps_dev(tmp_path: Path, init: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    etc = ss.stage_etc(tmp_path)
    monkeypatch.setattr(ss, "_fill_dev", lambda dev: None)  # a /dev without its nodes
    monkeypatch.setattr(ss, "cache_dir", lambda: tmp_path)
    ss._staged_root.cache_clear()
    monkeypatch.setattr(bw, "_smoke_results", {})
    monkeypatch.setattr(bw, "host_support", lambda helper=True: ss.Support(etc, init, devices=True))
    try:
        backend = LocalBackend(tmp_path / "sb")
        assert backend._support == ss.Support(etc, init, devices=False)

        async def go() -> str:
            box = await backend.create("run-1")
            return (await backend.exec(box, "echo x > /dev/null && id -u && ls /dev/pts")).stdout

        assert asyncio.run(go()).split() == ["1000", "ptmx"]
    finally:
        ss._staged_root.cache_clear()
