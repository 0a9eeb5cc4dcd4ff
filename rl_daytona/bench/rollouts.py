"""Rollout throughput: N rollouts of the built-in policy on a taskset (calc by default), local
backend, through the same SandboxPool, RolloutFleet and Learner hand-off a training step uses
(no training call).

Figures, precisely:
- `per_attempt` (see `attempt_cost`): sandbox commands, pytest runs, sandbox CPU-s, tokens and
  bytes per datum, each a mean per attempt, the grader's own command and pytest run included;
- rollouts/s = N / wall, wall from the first dispatch to the last rollout handed to the Learner;
- wall / CPU floor, the CPU floor = CPU seconds of the sandbox processes (every RolloutActor's
  RUSAGE_CHILDREN) / cores: 1.0 means the cores did nothing but sandbox work;
- the machine's load average while it ran (mean and max of 5 s samples), since on a shared
  machine other users' work stretches the wall time but not the CPU floor;
- orchestration overhead per rollout, two ways:
  CPU: the CPU milliseconds per rollout of the driver (dispatch, fleet), the pool actor, the
  Learner actor and Ray's own processes (raylet, GCS, ...): the Ray / pool / learner hand-off
  machinery (`orchestration_cpu_ms_per_rollout`); the RolloutActors' own CPU (agent loop, HTTP
  to the policy, Ray worker threads) and the policy server are reported beside it, not in it.
  Much of that gross figure is not per rollout at all: Ray's processes and every idle actor
  burn CPU by the second (polling, heartbeats, metrics), so a longer run charges more of it to
  each rollout. Those same processes are therefore watched for `idle_seconds` once the run is
  over (every sandbox deleted, nothing dispatched: the steady background; right after actor
  start-up Ray is still busy settling in, a window there once read more than the whole run),
  and the marginal figure (`orchestration_marginal_cpu_ms_per_rollout`) is the gross CPU minus
  that idle rate x the run's wall time, per rollout: what dispatching, claiming, releasing and
  handing off cost;
  latency: each a mean over the rollouts (p50 and p95 too): Ray = the fleet's round trip minus
  the rollout's own time inside its actor (dispatch, queueing in a busy actor, result through
  the object store); pool = the rollout's claim phase (a call to the pool actor and, when none
  is ready, the wait for a sandbox); learner = the `Learner.add` round trip. With the cores kept
  busy by sandbox work (the point of a CPU floor near 1) every one of these waits for a core,
  so the latency figures grow with the load while the CPU figures do not.
  Releases are off the rollout's clock (background).
Dispatch is bounded by `max_concurrent` outside the fleet as well, so waiting for a free slot
is never counted as overhead.

Invariant: the pool is shut down (every sandbox deleted) and the policy server stopped whether
the benchmark ends well or not.
"""

from __future__ import annotations

import asyncio
import os
import resource
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rl_daytona.bench.attempt_cost import attempt_costs
from rl_daytona.cpu_floor import CpuFloor, cpu_floor
from rl_daytona.types import Rollout, RolloutRequest, RolloutStatus, Settings


@dataclass(frozen=True)
class RolloutBench:
    n: int = 1024
    max_concurrent: int = 64
    rollout_actors: int = 2
    out: Path = Path("runs/bench-rollouts")
    idle_seconds: float = 30.0  # the idle baseline window (0: none, marginal figure not reported)
    taskset: str = "calc"


def bench_requests(n: int, taskset: str = "calc") -> list[RolloutRequest]:
    """n attempts over the taskset's first tasks in whole groups: the most tasks (at least half
    of them, or of n) that split n evenly, so calc's 40 tasks take 1,024 as 32 groups of 32;
    else whole groups over every task (n rounded down to a multiple of the task count); n
    below the task count: n tasks once."""
    from rl_daytona.source import requests_for
    from rl_daytona.tasks import get_taskset

    count = len(get_taskset(taskset).instances)
    most = min(n, count)
    tasks = max(t for t in range(1, most + 1) if n % t == 0)
    group = n // tasks if 2 * tasks >= most else max(1, n // count)
    return requests_for(taskset, "all", group, tag="bench")[:n]


def run_rollout_bench(cfg: RolloutBench) -> dict[str, Any]:
    """Run the benchmark; returns its figures (see the module docstring)."""
    from rl_daytona import runtime
    from rl_daytona.run import sigterm_interrupts
    from rl_daytona.serving.launch import start_builtin_server

    cfg.out.mkdir(parents=True, exist_ok=True)
    runtime.ensure_ray()
    sigterm_interrupts()
    with start_builtin_server() as server:
        return asyncio.run(_run(cfg, server.url))


async def _run(cfg: RolloutBench, policy_url: str) -> dict[str, Any]:
    from rl_daytona import runtime
    from rl_daytona.backends import BackendSpec
    from rl_daytona.fleet import FleetPlan
    from rl_daytona.learn.learner import LearnerConfig
    from rl_daytona.pool import PoolConfig

    requests = bench_requests(cfg.n, cfg.taskset)
    spec = BackendSpec(kind="local", root=str(cfg.out / "sandboxes"))
    pool = runtime.start_pool(spec, f"bench-{uuid.uuid4().hex[:8]}",
                              PoolConfig(ledger=str(cfg.out / "sandboxes.jsonl")))
    learner = runtime.start_learner(None, LearnerConfig())
    try:
        await pool.start.remote()
        plan = FleetPlan(actors=cfg.rollout_actors, max_concurrent=cfg.max_concurrent)
        fleet = runtime.start_fleet(pool, spec, cfg.taskset, Settings(policy_url=policy_url), plan)
        await fleet.start()
        await fleet.stats()  # every actor is up before the clock starts (actor start-up is not overhead)
        actors = {"pool": [pool], "learner": [learner], "rollout_actors": [m.actor for m in fleet._members]}
        await pool.set_demand.remote(len(requests))
        await learner.begin_step.remote(0, _group_sizes(requests))
        cpu_before = await _cpu(actors)
        started = time.monotonic()
        loads: list[float] = []
        sampler = asyncio.ensure_future(_sample_load(loads))
        timings = await _dispatch(fleet, learner, requests, cfg.max_concurrent)
        wall = time.monotonic() - started
        sampler.cancel()
        cpu_after = await _cpu(actors)
        await pool.set_demand.remote(0)
        await pool.drain.remote()  # every release deleted: the idle window sees no pool work
        idle = await _idle_rate(actors, cfg.idle_seconds)
        actor_stats = await fleet.stats()
        await fleet.close()
    finally:
        pool_stats = await pool.shutdown.remote()
        await learner.close.remote()
    floor = cpu_floor(wall, actor_stats)
    figures = _figures(timings, floor, pool_stats)
    figures["taskset"] = cfg.taskset
    figures["per_attempt"] = attempt_costs([t[0] for t in timings], floor.sandbox_cpu_seconds)
    figures["load_1m"] = {"mean": round(float(np.mean(loads or [0.0])), 2), "max": round(max(loads or [0.0]), 2)}
    per = {k: round(1000 * (cpu_after[k] - cpu_before[k]) / len(timings), 2) for k in cpu_after}
    figures["cpu_ms_per_rollout"] = per
    figures["orchestration_cpu_ms_per_rollout"] = round(sum(per[k] for k in ORCHESTRATION), 2)
    if idle is not None:
        figures["idle_cpu_ms_per_second"] = {k: round(1000 * v, 2) for k, v in idle.items()}
        figures["orchestration_marginal_cpu_ms_per_rollout"] = marginal_ms_per_rollout(
            per, idle, wall, len(timings))
    return figures


ORCHESTRATION = ("driver", "pool", "learner", "ray_system")


def marginal_ms_per_rollout(per: dict[str, float], idle: dict[str, float], wall: float, n: int) -> float:
    """Orchestration CPU ms per rollout above what the same processes burn idle over `wall`
    (`per`: gross ms per rollout by process group; `idle`: CPU seconds per second)."""
    return round(sum(per[k] - 1000 * idle[k] * wall / n for k in ORCHESTRATION), 2)


async def _idle_rate(actors: dict[str, list[Any]], seconds: float) -> dict[str, float] | None:
    """CPU seconds per second each process group spends with nothing dispatched."""
    if seconds <= 0:
        return None
    before, started = await _cpu(actors), time.monotonic()
    await asyncio.sleep(seconds)
    after, elapsed = await _cpu(actors), time.monotonic() - started
    return {k: max(0.0, (after[k] - before[k]) / elapsed) for k in after}


def _own_cpu(_actor: Any = None) -> float:
    """User + system CPU seconds of the calling process (its children not included)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _proc_cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


async def _cpu(actors: dict[str, list[Any]]) -> dict[str, float]:
    """CPU seconds so far: the driver, each group of actors (run inside them), Ray's processes."""
    import ray

    out = {"driver": _own_cpu()}
    for group, handles in actors.items():
        out[group] = sum(await asyncio.gather(*(h.__ray_call__.remote(_own_cpu) for h in handles)))
    node = getattr(ray._private.worker, "_global_node", None)
    system = [p.process.pid for procs in (node.all_processes.values() if node else []) for p in procs]
    out["ray_system"] = sum(_proc_cpu(pid) for pid in system)
    return out


async def _sample_load(loads: list[float], every: float = 5.0) -> None:
    """The machine's 1-minute load average every few seconds (2.0 = both cores busy): other
    users' work on a shared machine shows here, not in the sandboxes' CPU seconds."""
    while True:
        loads.append(os.getloadavg()[0])
        await asyncio.sleep(every)


def _group_sizes(requests: list[RolloutRequest]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for r in requests:
        sizes[r.group_id] = sizes.get(r.group_id, 0) + 1
    return sizes


async def _dispatch(fleet: Any, learner: Any, requests: list[RolloutRequest],
                    max_concurrent: int) -> list[tuple[Rollout, float, float]]:
    """Every request through the fleet and into the Learner: (rollout, Ray s, learner s) each."""
    slots = asyncio.Semaphore(max_concurrent)

    async def one(request: RolloutRequest) -> tuple[Rollout, float, float]:
        async with slots:
            sent = time.monotonic()
            ref, rollout = await fleet.run(request)
            back = time.monotonic()
            await learner.add.remote(ref)
            handed = time.monotonic()
        return rollout, back - sent - rollout.timings.total, handed - back

    return list(await asyncio.gather(*(one(r) for r in requests)))


def _figures(timings: list[tuple[Rollout, float, float]], floor: CpuFloor, pool_stats: Any) -> dict[str, Any]:
    wall, ratio = floor.wall_seconds, floor.ratio
    parts = {"ray": [t[1] for t in timings], "pool": [t[0].timings.claim for t in timings],
             "learner": [t[2] for t in timings]}
    overhead = {f"{name}_ms": {"mean": round(1000 * float(np.mean(v)), 2), "p50": round(1000 * float(np.median(v)), 2),
                               "p95": round(1000 * float(np.percentile(v, 95)), 2)} for name, v in parts.items()}
    statuses: dict[str, int] = {}
    for rollout, _, _ in timings:
        statuses[rollout.status.value] = statuses.get(rollout.status.value, 0) + 1
    scored = [r for r, _, _ in timings if r.status is not RolloutStatus.INFRA_ERROR]
    return {
        "rollouts": len(timings), "wall_seconds": round(wall, 2),
        "rollouts_per_second": round(len(timings) / wall, 3) if wall else 0.0,
        "sandbox_cpu_seconds": round(floor.sandbox_cpu_seconds, 2), "cores": floor.cores,
        "wall_over_cpu_floor": round(ratio, 3) if ratio is not None else None,
        "overhead_latency_ms_per_rollout": round(sum(v["mean"] for v in overhead.values()), 2),
        "overhead_latency": overhead, "statuses": statuses,
        "pass_rate": round(sum(r.reward >= 1.0 for r in scored) / len(scored), 3) if scored else 0.0,
        "pool": {"created": pool_stats.created, "claimed": pool_stats.claimed, "deleted": pool_stats.deleted,
                 "failed": pool_stats.failed},
    }
