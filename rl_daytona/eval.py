"""`rl-daytona eval`: run every task of a split `group` times and report pass rates.

source (taskset split x group) -> dispatcher (bounded in-flight, round-robin over actors)
-> sink (rollouts.jsonl appended and flushed per rollout, then summary.json).

Invariant: every dispatched rollout is written to `rollouts.jsonl` exactly once, and the pool
is shut down (every sandbox of the run deleted) whether the run ends well or not.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rl_daytona.backends import BackendSpec, DaytonaOptions
from rl_daytona.pool import PoolConfig
from rl_daytona.rollout import ActorStats
from rl_daytona.summary import render_table, summarize
from rl_daytona.tasks import get_taskset
from rl_daytona.types import Rollout, RolloutRequest, RolloutStatus, SandboxLimits, Settings


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


def requests_for(taskset: str, split: str | None, group: int, tag: str = "eval") -> list[RolloutRequest]:
    """One group of `group` attempts per task instance of the split."""
    instances = get_taskset(taskset).split(split)
    return [RolloutRequest(rollout_id=f"{tag}-{inst.instance_id}-{a}", task_id=inst.instance_id,
                           group_id=f"{tag}/{inst.instance_id}", attempt=a)
            for inst in instances for a in range(group)]


class RolloutSink:
    """Appends each rollout to rollouts.jsonl as it completes, flushed, exactly once."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("a", encoding="utf-8")
        self._seen: set[str] = set()
        self.rollouts: list[Rollout] = []

    def add(self, rollout: Rollout) -> None:
        if rollout.rollout_id in self._seen:
            return
        self._seen.add(rollout.rollout_id)
        self.rollouts.append(rollout)
        self._file.write(json.dumps(rollout.to_json()) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


async def dispatch(fleet: Any, requests: list[RolloutRequest], on_done: Any) -> None:
    """Run every request on the fleet (it bounds what is in flight and re-dispatches lost ones)."""

    async def one(request: RolloutRequest) -> None:
        _, rollout = await fleet.run(request)
        on_done(rollout)

    await asyncio.gather(*(one(r) for r in requests))


def fleet_plan(cfg: Any) -> Any:
    """The FleetPlan of an eval or train config."""
    from rl_daytona.fleet import FleetPlan

    return FleetPlan(actors=cfg.rollout_actors, per_node=cfg.rollout_actors_per_node,
                     concurrency=cfg.rollout_concurrency, max_concurrent=cfg.max_concurrent,
                     rollout_deadline=cfg.settings.rollout_deadline)


def _progress(console: Console) -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("pass {task.fields[rate]}"), TimeElapsedColumn(), console=console)


async def _run(cfg: EvalConfig, spec: BackendSpec, pool_cfg: PoolConfig, policy_url: str, sink: RolloutSink,
               console: Console) -> dict[str, Any]:
    from rl_daytona import runtime
    from rl_daytona.supply import describe

    requests = requests_for(cfg.taskset, cfg.split, cfg.group)
    settings = Settings(**{**asdict(cfg.settings), "policy_url": policy_url})
    pool = runtime.start_pool(spec, cfg.run_id, pool_cfg)
    started = time.monotonic()
    try:
        reaped = await pool.start.remote()
        await pool.set_demand.remote(len(requests))
        fleet = runtime.start_fleet(pool, spec, cfg.taskset, settings, fleet_plan(cfg))
        await fleet.start()
        with _progress(console) as progress:
            bar = progress.add_task(f"eval {cfg.taskset}/{cfg.split}", total=len(requests), rate="-")

            def done(rollout: Rollout) -> None:
                sink.add(rollout)
                scored = [r for r in sink.rollouts if r.status is not RolloutStatus.INFRA_ERROR]
                rate = f"{sum(r.reward >= 1.0 for r in scored) / max(len(scored), 1):.0%}"
                progress.update(bar, advance=1, rate=rate)

            await dispatch(fleet, requests, done)
        wall = time.monotonic() - started
        actor_stats: list[ActorStats] = await fleet.stats()
        await fleet.close()
    finally:
        pool_stats = await pool.shutdown.remote()
    provider = await pool.provider.remote()
    cpu = sum(s.sandbox_cpu_seconds for s in actor_stats)
    return {"wall_seconds": wall, "rollouts_per_second": len(requests) / wall if wall else 0.0,
            "sandbox_cpu_seconds": cpu, "cores": os.cpu_count() or 1,
            "wall_over_cpu_floor": wall / (cpu / (os.cpu_count() or 1)) if cpu else None,
            "pool": asdict(pool_stats), "orphans_reaped_at_start": reaped,
            "sandbox_backend": {**describe(spec), **provider},
            "actors": [asdict(s) for s in actor_stats], "fleet": dict(fleet.counts),
            "rollouts_by_node": _by_node(sink.rollouts)}


def _by_node(rollouts: list[Rollout]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rollouts:
        out[r.node_id] = out.get(r.node_id, 0) + 1
    return out


def sigterm_interrupts() -> None:
    """SIGTERM ends the run like Ctrl-C (the pool's shutdown deletes the run's sandboxes).

    Called after `ray.init`, which installs a handler of its own that exits at once."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.default_int_handler)


def _policy_name(cfg: EvalConfig) -> str:
    if cfg.tinker is None:
        return cfg.policy
    return cfg.model_path or f"tinker:{cfg.tinker.base_model}@{cfg.tinker.url or 'local'}"


def run_eval(cfg: EvalConfig, console: Console | None = None) -> dict[str, Any]:
    """Run an eval end to end; writes summary.json and rollouts.jsonl under cfg.out."""
    from rl_daytona import runtime
    from rl_daytona.serving.launch import start_builtin_server

    console = console or Console()
    get_taskset(cfg.taskset).split(cfg.split)  # fail fast on a bad taskset or split
    if cfg.tinker is not None:
        from rl_daytona.tinker_run import check_target

        check_target(cfg.tinker)  # a missing key, unreachable service, unknown model: before any sandbox
    cfg.out.mkdir(parents=True, exist_ok=True)
    run_id = cfg.run_id or f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    cfg = EvalConfig(**{**cfg.__dict__, "run_id": run_id})
    from rl_daytona.supply import supply_for

    spec, pool_cfg = supply_for(cfg, console.print)
    runtime.ensure_ray()
    sigterm_interrupts()
    with ExitStack() as stack:
        url = cfg.policy
        if cfg.tinker is not None:  # sample through the tinker SDK: a base model or a tinker:// checkpoint
            from rl_daytona.tinker_run import open_trainer

            url = stack.enter_context(open_trainer(cfg.tinker, cfg.model_path)).url
        elif cfg.policy == "builtin":
            url = stack.enter_context(start_builtin_server()).url
        sink = RolloutSink(cfg.out / "rollouts.jsonl")
        stack.callback(sink.close)
        extra = asyncio.run(_run(cfg, spec, pool_cfg, url, sink, console))
    summary = summarize(sink.rollouts, run_id=run_id, taskset=cfg.taskset, split=cfg.split,
                        group=cfg.group, policy=_policy_name(cfg), backend=cfg.backend, **extra)
    (cfg.out / "summary.json").write_text(json.dumps(summary, indent=2))
    console.print(render_table(summary, f"{cfg.taskset} / {cfg.split} (group {cfg.group})"))
    from rl_daytona.report import report_after_run

    report_after_run(cfg.out, console)
    return summary
