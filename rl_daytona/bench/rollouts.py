"""Rollout throughput: N rollouts of the built-in policy on calc, local backend, through the
same SandboxPool, RolloutFleet and Learner hand-off a training step uses (no training call).

Figures, precisely:
- rollouts/s = N / wall, wall from the first dispatch to the last rollout handed to the Learner;
- wall / CPU floor, the CPU floor = CPU seconds of the sandbox processes (every RolloutActor's
  RUSAGE_CHILDREN) / cores: 1.0 means the cores did nothing but sandbox work;
- orchestration overhead per rollout, three parts, each a mean over the rollouts (p50 too):
  Ray = the fleet's round trip for the rollout minus the rollout's own time inside its actor
  (dispatch, result through the object store, fleet bookkeeping); pool = the rollout's claim
  phase (a Ray call to the pool actor and, when none is ready, the wait for a sandbox);
  learner = the `Learner.add` round trip. Releases are off the rollout's clock (background).
Dispatch is bounded by `max_concurrent` outside the fleet as well, so waiting for a free slot
is never counted as overhead.

Invariant: the pool is shut down (every sandbox deleted) and the policy server stopped whether
the benchmark ends well or not.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rl_daytona.types import Rollout, RolloutRequest, RolloutStatus, Settings

CALC_TASKS = 32


@dataclass(frozen=True)
class RolloutBench:
    n: int = 1024
    max_concurrent: int = 64
    rollout_actors: int = 2
    out: Path = Path("runs/bench-rollouts")


def bench_requests(n: int) -> list[RolloutRequest]:
    """n attempts over calc's tasks: whole groups of n // 32 while n >= 32, else n tasks once."""
    from rl_daytona.eval import requests_for

    group = max(1, n // CALC_TASKS)
    return requests_for("calc", "all", group, tag="bench")[:n]


def run_rollout_bench(cfg: RolloutBench) -> dict[str, Any]:
    """Run the benchmark; returns its figures (see the module docstring)."""
    from rl_daytona import runtime
    from rl_daytona.eval import sigterm_interrupts
    from rl_daytona.policy.launch import start_builtin_server

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

    requests = bench_requests(cfg.n)
    spec = BackendSpec(kind="local", root=str(cfg.out / "sandboxes"))
    pool = runtime.start_pool(spec, f"bench-{uuid.uuid4().hex[:8]}",
                              PoolConfig(ledger=str(cfg.out / "sandboxes.jsonl")))
    learner = runtime.start_learner(None, LearnerConfig())
    try:
        await pool.start.remote()
        await pool.set_demand.remote(len(requests))
        await learner.begin_step.remote(0, _group_sizes(requests))
        plan = FleetPlan(actors=cfg.rollout_actors, max_concurrent=cfg.max_concurrent)
        fleet = runtime.start_fleet(pool, spec, "calc", Settings(policy_url=policy_url), plan)
        await fleet.start()
        await fleet.stats()  # every actor is up before the clock starts (actor start-up is not overhead)
        started = time.monotonic()
        timings = await _dispatch(fleet, learner, requests, cfg.max_concurrent)
        wall = time.monotonic() - started
        actor_stats = await fleet.stats()
        await fleet.close()
    finally:
        pool_stats = await pool.shutdown.remote()
        await learner.close.remote()
    cpu = sum(s.sandbox_cpu_seconds for s in actor_stats)
    return _figures(timings, wall, cpu, pool_stats)


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


def _figures(timings: list[tuple[Rollout, float, float]], wall: float, cpu: float, pool_stats: Any) -> dict[str, Any]:
    cores = os.cpu_count() or 1
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
        "sandbox_cpu_seconds": round(cpu, 2), "cores": cores,
        "wall_over_cpu_floor": round(wall / (cpu / cores), 3) if cpu else None,
        "overhead_per_rollout_ms": round(sum(v["mean"] for v in overhead.values()), 2),
        "overhead": overhead, "statuses": statuses,
        "pass_rate": round(sum(r.reward >= 1.0 for r in scored) / len(scored), 3) if scored else 0.0,
        "pool": {"created": pool_stats.created, "claimed": pool_stats.claimed, "deleted": pool_stats.deleted,
                 "failed": pool_stats.failed},
    }
