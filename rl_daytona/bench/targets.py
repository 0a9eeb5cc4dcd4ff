"""Where a spin-up benchmark makes its sandboxes: the local backend, a daytona-sim server it
starts, or the latency model in virtual time.

Invariant: a `Target` is entered once per benchmark and leaves nothing behind: the local
backend's sandboxes live under the benchmark's own folder, the daytona-sim server is a child
process (`rl-daytona daytona-sim`, its own key, never the environment's DAYTONA_API_KEY) that is
stopped, deleting every sandbox it holds, when the target exits; the model holds no sandbox.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from rl_daytona.backends import Backend, BackendSpec, DaytonaOptions

BACKENDS = ("local", "daytona-sim", "model")


@dataclass(frozen=True)
class SimSettings:
    """How the daytona-sim child behaves (the published latency model, scaled)."""

    time_scale: float = 1.0
    create_fail_rate: float = 0.0
    seed: int = 0
    transport: str = "toolbox"


@dataclass(frozen=True)
class Target:
    """How to build a fresh backend for each mode (and the run folder the local one uses)."""

    kind: str
    root: Path
    options: DaytonaOptions | None = None
    fail_rate: float = 0.0
    seed: int = 0
    sim_pid: int | None = None

    def cpu_seconds(self) -> float:
        """CPU seconds used so far by this process, its reaped children and the daytona-sim child
        (with its own children: the sandboxes' commands), all on this machine's cores."""
        import resource

        total = 0.0
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
            usage = resource.getrusage(who)
            total += usage.ru_utime + usage.ru_stime
        if self.sim_pid is not None:
            try:
                fields = Path(f"/proc/{self.sim_pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")
            except (OSError, ValueError, IndexError):
                pass
        return total

    @property
    def probe_runs_a_command(self) -> bool:
        """Whether the pool's liveness probe already runs a command (Daytona: `echo alive`)."""
        return self.kind != "local"

    def backend(self, rep: int = 0) -> Backend:
        """A fresh backend (the model draws its delays from seed + rep)."""
        if self.kind == "local":
            from rl_daytona.backends.local import LocalBackend

            return LocalBackend(self.root / "sandboxes")
        if self.kind == "model":
            from rl_daytona.bench.model import ModelBackend

            return ModelBackend(fail_rate=self.fail_rate, seed=self.seed + rep)
        from rl_daytona.backends.daytona import DaytonaBackend
        from rl_daytona.backends.daytona_limits import LocalGate

        assert self.options is not None
        return DaytonaBackend(self.options, gate_for=lambda run_id, per_minute: LocalGate(per_minute))

    def spec(self) -> BackendSpec:
        if self.kind == "daytona-sim":
            return BackendSpec(kind="daytona", daytona=self.options or DaytonaOptions())
        return BackendSpec(kind="local", root=str(self.root / "sandboxes"))


@contextmanager
def open_target(kind: str, root: Path, sim: SimSettings = SimSettings()) -> Iterator[Target]:
    """The target of one benchmark (a started daytona-sim for 'daytona-sim')."""
    if kind not in BACKENDS:
        raise ValueError(f"unknown backend {kind!r} (choose from: {', '.join(BACKENDS)})")
    root.mkdir(parents=True, exist_ok=True)
    if kind != "daytona-sim":
        yield Target(kind, root, fail_rate=sim.create_fail_rate, seed=sim.seed)
        return
    with _sim_process(root, sim) as (api_url, gateway, key, pid):
        previous = os.environ.get("DAYTONA_API_KEY")
        os.environ["DAYTONA_API_KEY"] = key  # the sim's own key, for this process's SDK clients
        try:
            from rl_daytona.daytona_sim.catalog import VM_SNAPSHOT

            options = DaytonaOptions(snapshot=VM_SNAPSHOT, api_url=api_url, transport=sim.transport,
                                     ssh_gateway=gateway, creates_per_minute=100_000, max_creating=256,
                                     warm_pool=False)
            yield Target(kind, root, options=options, sim_pid=pid)
        finally:
            if previous is None:
                os.environ.pop("DAYTONA_API_KEY", None)
            else:
                os.environ["DAYTONA_API_KEY"] = previous


@contextmanager
def _sim_process(root: Path, sim: SimSettings) -> Iterator[tuple[str, str, str, int]]:
    """`rl-daytona daytona-sim` as a child process: (API URL, SSH gateway, key, pid)."""
    key = f"bench-{secrets.token_hex(8)}"
    argv = [sys.executable, "-m", "rl_daytona.cli", "daytona-sim", "--port", "0", "--api-key", key,
            "--time-scale", str(sim.time_scale), "--create-fail-rate", str(sim.create_fail_rate),
            "--seed", str(sim.seed), "--root", str(root / "sim")]
    log = (root / "daytona-sim.log").open("w")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        found: dict[str, Any] = {}
        assert proc.stdout is not None
        for line in proc.stdout:
            name, _, value = line.strip().partition("=")
            found[name] = value
            if name == "DAYTONA_SSH_GATEWAY":
                break
        if "DAYTONA_API_URL" not in found:
            raise RuntimeError(f"daytona-sim did not start (see {root / 'daytona-sim.log'})")
        yield found["DAYTONA_API_URL"], found.get("DAYTONA_SSH_GATEWAY", ""), key, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
