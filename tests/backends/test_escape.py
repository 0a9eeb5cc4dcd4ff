"""No one gets out: escape attempts from inside real bubblewrap sandboxes (LocalBackend) fail.

Each test plays the agent: it runs shell commands in a sandbox that try to write outside the
workspace, read the host's files or processes, reach the network, or see the host's
environment, then checks from the host side that nothing happened. (The basics, uid 1000 and
own namespaces, live in test_local.py; these are the attacks.)
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from pathlib import Path
from typing import Awaitable, Iterator, TypeVar

import pytest

from rl_daytona.backends.base import SandboxHandle
from rl_daytona.backends.local import LocalBackend
from rl_daytona.types import SandboxLimits

T = TypeVar("T")
LIMITS = SandboxLimits(cpu_seconds=10, memory_mb=1024, max_processes=64, max_file_mb=4,
                       max_output_bytes=64 * 1024)
CANARIES = {name: f"canary-{name.lower()}-{uuid.uuid4().hex}"
            for name in ("DAYTONA_API_KEY", "TINKER_API_KEY", "OPENAI_API_KEY", "RL_DAYTONA_HOST_ONLY")}


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A run folder like the CLI's: the sandboxes live in `run_dir/sandboxes`."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "rollouts.jsonl").write_text('{"rollout_id": "r-0"}\n')
    return out


@pytest.fixture
def backend(run_dir: Path) -> LocalBackend:
    return LocalBackend(run_dir / "sandboxes", limits=LIMITS)


async def _two_boxes(backend: LocalBackend) -> tuple[SandboxHandle, SandboxHandle]:
    """An attacker sandbox and a victim holding a secret file."""
    attacker = await backend.create("run-1")
    victim = await backend.create("run-1")
    await backend.write_files(victim, {"secret.txt": "victim-data"})
    return attacker, victim


async def _sh(backend: LocalBackend, box: SandboxHandle, command: str) -> str:
    result = await backend.exec(box, command, timeout=30)
    return result.output


# ----- writing outside the workspace ------------------------------------------------------
def test_writes_outside_the_workspace_never_reach_the_host(backend: LocalBackend, run_dir: Path) -> None:
    marker = f"escape-{uuid.uuid4().hex}"
    host_tmp = Path("/tmp") / marker

    async def go() -> tuple[list[Path], Path]:
        attacker, victim = await _two_boxes(backend)
        victim_upper = backend.root / victim.sandbox_id / "upper"
        targets = [Path("/") / marker, host_tmp, Path("/etc") / marker, run_dir / marker,
                   run_dir / "rollouts.jsonl", backend.root / marker, victim_upper / "secret.txt",
                   victim_upper / marker, Path.home() / marker]
        for target in targets:  # plain paths (mkdir -p of the parents may succeed in the tmpfs root)
            await _sh(backend, attacker, f"mkdir -p '{target.parent}'; echo pwned > '{target}'")
        await _sh(backend, attacker,  # through `..` and through symlinks made inside
                  f"echo pwned > /workspace/../{marker}; cd /workspace/../../..; echo pwned > {marker}; "
                  f"ln -s / root_link; echo pwned > root_link/tmp/{marker}; "
                  f"ln -s '{victim_upper}' victim_link; echo pwned > victim_link/secret.txt; "
                  f"ln -s '{run_dir}' run_link; echo pwned > run_link/rollouts.jsonl")
        assert await backend.read_file(victim, "secret.txt") == b"victim-data"
        return targets, victim_upper

    targets, victim_upper = run(go())
    for target in targets:
        if target.name not in ("secret.txt", "rollouts.jsonl"):
            assert not target.exists(), f"a sandbox wrote {target} on the host"
    assert (victim_upper / "secret.txt").read_text() == "victim-data"
    assert (run_dir / "rollouts.jsonl").read_text() == '{"rollout_id": "r-0"}\n'
    assert sorted(p.name for p in run_dir.iterdir()) == ["rollouts.jsonl", "sandboxes"]


def test_host_side_file_access_never_follows_a_sandbox_symlink_out(backend: LocalBackend,
                                                                   tmp_path: Path) -> None:
    host_file = tmp_path / "host.txt"
    host_file.write_text("host-data")

    async def go() -> None:
        attacker, victim = await _two_boxes(backend)
        victim_secret = backend.root / victim.sandbox_id / "upper" / "secret.txt"
        await _sh(backend, attacker, f"ln -s '{victim_secret}' steal.txt; ln -s '{host_file}' host.txt; "
                                     f"ln -s '{tmp_path}' host_dir")
        for link in ("steal.txt", "host.txt", "host_dir/host.txt"):
            with pytest.raises(ValueError):  # the grader reading the agent's file must not leak
                await backend.read_file(attacker, link)
            with pytest.raises(ValueError):  # seeding a task must not write through
                await backend.write_files(attacker, {link: "overwritten"})
        await backend.delete(attacker)  # deleting must not follow the links either
        assert await backend.read_file(victim, "secret.txt") == b"victim-data"

    run(go())
    assert host_file.read_text() == "host-data" and sorted(os.listdir(tmp_path)) == ["host.txt", "run"]


# ----- reading the host --------------------------------------------------------------------
def test_host_files_and_other_sandboxes_are_unreadable(backend: LocalBackend, run_dir: Path) -> None:
    async def go() -> None:
        attacker, victim = await _two_boxes(backend)
        victim_upper = backend.root / victim.sandbox_id / "upper"
        probes = ["/etc/shadow", "/etc/hostname", "/etc/resolv.conf", "/root/.bash_history",
                  "/root/.ssh", "/home", str(Path.home() / ".cache"), str(run_dir), str(backend.root),
                  str(victim_upper / "secret.txt"), "/work/main/README.md", "/var", "/run", "/sys/fs"]
        seen = await _sh(backend, attacker, " ; ".join(f"test -e '{p}' && echo SEEN {p}" for p in probes))
        assert "SEEN" not in seen, seen
        found = await _sh(backend, attacker, f"find / -path /proc -prune -o -path /sys -prune -o -path /usr -prune "
                                             f"-o -name '{victim.sandbox_id}' -print -o -name secret.txt -print")
        assert found.strip() == "", found  # the victim's sandbox is nowhere in the attacker's view
        assert await _sh(backend, attacker, "cat /etc/passwd | cut -d: -f1") == "root\nsandbox\n"

    run(go())


def test_proc_shows_only_the_sandbox_own_processes(backend: LocalBackend) -> None:
    async def go() -> None:
        box = await backend.create("run-1")
        out = await _sh(backend, box, "for p in /proc/[0-9]*; do echo ${p#/proc/} $(tr '\\0' ' ' < $p/cmdline); done")
        pids = {int(line.split()[0]): line for line in out.splitlines()}
        assert pids and max(pids) < 20 and len(pids) < 10, out  # a fresh pid namespace
        assert os.getpid() not in pids or "pytest" not in pids[os.getpid()]
        assert "pytest" not in out and "ray" not in out and "bwrap" not in out, out
        if os.getpid() not in pids:  # the host's processes cannot be signalled either
            kill = await backend.exec(box, f"kill -9 {os.getpid()}")
            assert kill.exit_code != 0, kill
    run(go())


# ----- network -----------------------------------------------------------------------------
@pytest.fixture
def host_servers() -> Iterator[tuple[socket.socket, socket.socket, socket.socket, str]]:
    """A TCP and a UDP socket on 127.0.0.1 and an abstract unix socket, all on the host."""
    tcp, udp, unix = socket.socket(), socket.socket(socket.AF_INET, socket.SOCK_DGRAM), socket.socket(socket.AF_UNIX)
    name = f"rl-daytona-escape-{uuid.uuid4().hex}"
    tcp.bind(("127.0.0.1", 0)), tcp.listen(), udp.bind(("127.0.0.1", 0)), unix.bind("\0" + name), unix.listen()
    for sock in (tcp, udp, unix):
        sock.setblocking(False)
    try:
        yield tcp, udp, unix, name
    finally:
        for sock in (tcp, udp, unix):
            sock.close()


PROBE = """
import socket, sys
tcp_port, udp_port, name = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def attempt(label, fn):
    try:
        fn()
        print("OPEN", label)
    except OSError as exc:
        print("blocked", label, type(exc).__name__)
attempt("tcp-loopback", lambda: socket.create_connection(("127.0.0.1", tcp_port), timeout=3))
attempt("tcp-internet", lambda: socket.create_connection(("1.1.1.1", 53), timeout=3))
attempt("dns", lambda: socket.getaddrinfo("example.com", 443))
attempt("dns-udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"q", ("8.8.8.8", 53)))
# a datagram to 127.0.0.1 is "sent" into the sandbox's own loopback: the host must not get it
attempt("udp-own-loopback", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"hi", ("127.0.0.1", udp_port)))
attempt("unix-abstract", lambda: socket.socket(socket.AF_UNIX).connect("\\0" + name))
print("interfaces", sorted(n for _, n in socket.if_nameindex()))
"""


def test_no_network_connection_leaves_the_sandbox(backend: LocalBackend, host_servers: tuple) -> None:
    tcp, udp, unix, name = host_servers

    async def go() -> str:
        box = await backend.create("run-1")
        await backend.write_files(box, {"probe.py": PROBE})
        return await _sh(backend, box, f"python probe.py {tcp.getsockname()[1]} {udp.getsockname()[1]} {name}")

    out = run(go())
    assert "OPEN" not in out.replace("OPEN udp-own-loopback", ""), out
    labels = ("tcp-loopback", "tcp-internet", "dns", "dns-udp", "unix-abstract")
    assert all(f"blocked {label} " in out for label in labels), out
    assert "interfaces ['lo']" in out, out  # only the sandbox's own loopback
    for sock in (tcp, unix):  # nothing ever reached the host's listeners
        with pytest.raises(BlockingIOError):
            sock.accept()
    with pytest.raises(BlockingIOError):
        udp.recv(16)


# ----- environment -------------------------------------------------------------------------
def test_host_environment_variables_never_reach_the_sandbox(backend: LocalBackend,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in CANARIES.items():
        monkeypatch.setenv(key, value)

    async def go() -> str:
        box = await backend.create("run-1")
        child = await backend.fork(box)
        outs = [await _sh(backend, b, "env; cat /proc/[0-9]*/environ | tr '\\0' '\\n'; "
                                      "python -c 'import os; print(dict(os.environ))'")
                for b in (box, child)]
        return "\n".join(outs)

    out = run(go())
    assert "PATH=" in out and "HOME=/workspace" in out  # the probe did print an environment
    for key, value in CANARIES.items():
        assert value not in out and key not in out, key
    names = {line.split("=", 1)[0] for line in out.splitlines() if "=" in line and not line.startswith("{")}
    assert names <= {"PATH", "HOME", "LANG", "PYTHONDONTWRITEBYTECODE", "PYTEST_DISABLE_PLUGIN_AUTOLOAD",
                     "PWD", "SHLVL", "_", "OLDPWD"}, names
