"""`rl-daytona eval`: run every task of a split `group` times and report pass rates.

source (taskset split x group) -> dispatcher (bounded in-flight, round-robin over actors)
-> sink (rollouts.jsonl appended and flushed per rollout, then summary.json); the run's parts
are composed once by `rl_daytona.run`.

Invariant: every dispatched rollout is written to `rollouts.jsonl` exactly once, and the pool
is shut down (every sandbox of the run deleted) whether the run ends well or not.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from rl_daytona.backends import DaytonaOptions
from rl_daytona.cpu_floor import cpu_floor
from rl_daytona.pool import PoolConfig
from rl_daytona.progress import RunProgress
from rl_daytona.rollout import ActorStats
from rl_daytona.run import PolicySource, Run, backend_summary, open_run, start_actors
from rl_daytona.source import group_requests
from rl_daytona.summary import render_table, summarize
from rl_daytona.types import Rollout, RolloutRequest, SandboxLimits, Settings


@dataclass(frozen=True)
class EvalConfig:
    out: Path
    taskset: str = "calc"
    split: str | None = "heldout"
    group: int = 8
    max_concurrent: int = 64
    backend: str = "local"
    isolation: str = "bwrap"
    policy: str = "builtin"
    rollout_actors: int = 2
    rollout_actors_per_node: int = 0  # > 0: this many RolloutActors on every node instead
    rollout_concurrency: int = 0  # rollouts in flight per RolloutActor; 0: max_concurrent / actors
    settings: Settings = field(default_factory=Settings)
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    pool: PoolConfig = field(default_factory=PoolConfig)
    daytona: DaytonaOptions = field(default_factory=DaytonaOptions)
    run_id: str = ""
    tinker: Any = None  # a tinker_run.TinkerTarget: sample through the tinker SDK instead of `policy`
    model_path: str | None = None  # with `tinker`: a tinker:// checkpoint to sample (else its base model)

    def __post_init__(self) -> None:
        for name in ("group", "max_concurrent", "rollout_actors"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")


async def dispatch(fleet: Any, requests: list[RolloutRequest], on_done: Any) -> None:
    """Run every request on the fleet (it bounds what is in flight and re-dispatches lost ones)."""

    async def one(request: RolloutRequest) -> None:
        _, rollout = await fleet.run(request)
        on_done(rollout)

    await asyncio.gather(*(one(r) for r in requests))


async def _run(cfg: EvalConfig, run: Run) -> dict[str, Any]:
    requests = group_requests(run.splits[cfg.split], cfg.group)
    started = time.monotonic()
    async with start_actors(run, demand=len(requests)) as actors:
        with RunProgress(run.console) as progress:
            progress.phase(f"eval {cfg.taskset}/{cfg.split}", len(requests))

            def done(rollout: Rollout) -> None:
                run.sink.add(rollout)
                progress.done(rollout)

            await dispatch(actors.fleet, requests, done)
        wall = time.monotonic() - started
        actor_stats: list[ActorStats] = await actors.fleet.stats()
    floor = cpu_floor(wall, actor_stats)
    return {"wall_seconds": wall, "rollouts_per_second": len(requests) / wall if wall else 0.0,
            "sandbox_cpu_seconds": floor.sandbox_cpu_seconds, "cores": floor.cores,
            "wall_over_cpu_floor": floor.ratio,
            "pool": actors.pool_stats, "orphans_reaped_at_start": actors.reaped,
            "sandbox_backend": backend_summary(run, actors),
            "actors": [asdict(s) for s in actor_stats], "fleet": dict(actors.fleet.counts),
            "rollouts_by_node": _by_node(run.sink.rollouts)}


def _by_node(rollouts: list[Rollout]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rollouts:
        out[r.node_id] = out.get(r.node_id, 0) + 1
    return out


def _policy_name(cfg: EvalConfig) -> str:
    if cfg.tinker is None:
        return cfg.policy
    return cfg.model_path or f"tinker:{cfg.tinker.base_model}@{cfg.tinker.url or 'local'}"


def run_eval(cfg: EvalConfig, console: Console | None = None) -> dict[str, Any]:
    """Run an eval end to end; writes summary.json and rollouts.jsonl under cfg.out."""
    console = console or Console()
    policy = PolicySource(url=cfg.policy, tinker=cfg.tinker, model_path=cfg.model_path)
    with open_run(cfg, console, policy, splits=(cfg.split,)) as run:
        extra = asyncio.run(_run(cfg, run))
    summary = summarize(run.sink.rollouts, run_id=run.run_id, taskset=cfg.taskset, split=cfg.split,
                        group=cfg.group, policy=_policy_name(cfg), backend=cfg.backend, **extra)
    (cfg.out / "summary.json").write_text(json.dumps(summary, indent=2))
    console.print(render_table(summary, f"{cfg.taskset} / {cfg.split} (group {cfg.group})"))
    from rl_daytona.report import report_after_run

    report_after_run(cfg.out, console)
    return summary
