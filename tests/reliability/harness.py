"""Fault-test plumbing: the real pool, RolloutActors and RolloutFleet in this process (no Ray), on
the Daytona backend against daytona-sim, the cheap taskset and a per-conversation scripted policy.

In-process because the Daytona backend reads DAYTONA_API_KEY from its own process's environment:
a test can set it here, but not in Ray workers started before it. `InProcessActor` gives a plain
RolloutActor the `.method.remote(...)` shape of an actor handle, so the fleet is the real one.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rl_daytona.backends import BackendSpec, DaytonaOptions
from rl_daytona.daytona_sim import DEFAULT_SNAPSHOT
from rl_daytona.sink import RolloutSink
from rl_daytona.source import requests_for
from rl_daytona.fleet import FleetPlan, RolloutFleet
from rl_daytona.learn.learner import Learner, LearnerConfig
from rl_daytona.placement import NodeInfo
from rl_daytona.pool import PoolConfig, SandboxPool
from rl_daytona.rollout import RolloutActor
from rl_daytona.types import PoolStats, Rollout, RolloutRequest, Settings

TASKSET = "tests.reliability.cheap_task:CHEAP_TASKSET"
HERE = [NodeInfo(node_id="here", address="127.0.0.1", is_head=True)]


class _Remote:
    def __init__(self, fn: Any) -> None:
        self.remote = fn


class InProcessActor:
    """A plain object behind an actor handle's shape: `handle.run.remote(request)` is awaitable."""

    def __init__(self, target: Any) -> None:
        self.target = target

    def __getattr__(self, name: str) -> _Remote:
        return _Remote(getattr(self.target, name))


def daytona_spec(api_url: str, create_timeout: float = 120.0) -> BackendSpec:
    options = DaytonaOptions(api_url=api_url, snapshot=DEFAULT_SNAPSHOT, transport="toolbox", warm_pool=False,
                             creates_per_minute=100_000, max_creating=512, create_timeout=create_timeout)
    return BackendSpec(kind="daytona", daytona=options)


@dataclass
class RunResult:
    rollouts: list[Rollout]
    written: list[dict[str, Any]]  # rollouts.jsonl, as the sink wrote it
    counts: dict[str, int]  # the Learner's GroupCounts for the step
    learner: Learner
    pool: PoolStats
    fleet: dict[str, int]
    seconds: float


async def through_learner(fleet: Any, learner: Learner, requests: list[RolloutRequest],
                          on_done: Callable[[Rollout], None]) -> None:
    """train's dispatch loop: each finished attempt to the Learner, the retries it asks for dispatched again."""

    async def one(request: RolloutRequest) -> None:
        _, rollout = await fleet.run(request)
        on_done(rollout)
        retries = await learner.add(rollout)
        await asyncio.gather(*(one(r) for r in retries))

    await asyncio.gather(*(one(r) for r in requests))


def groups_of(requests: list[RolloutRequest]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in requests:
        out[r.group_id] = out.get(r.group_id, 0) + 1
    return out


async def run_wide(spec: BackendSpec, out: Path, policy_url: str, group: int = 8, actors: int = 2,
                   deadline: float = 600.0, pool: PoolConfig | None = None, split: str = "all",
                   before_shutdown: Callable[[], None] = lambda: None, run_id: str = "run-wide") -> RunResult:
    """Every task of the split `group` times at once; each attempt to the sink and to a real
    Learner (its retries dispatched again); `before_shutdown` runs when every rollout is back,
    before the pool's sweep."""
    import time

    out.mkdir(parents=True, exist_ok=True)
    requests = requests_for(TASKSET, split, group)
    the_pool = SandboxPool(spec, run_id, pool or PoolConfig(warm_size=0, max_creating=512, retry_backoff=0.05,
                                                                 claim_timeout=deadline,
                                                                 ledger=str(out / "sandboxes.jsonl")))
    await the_pool.start()
    await the_pool.set_demand(len(requests))
    settings = Settings(policy_url=policy_url, max_turns=2, rollout_deadline=deadline, exec_timeout=30)

    def spawn(node_id: str, name: str, concurrency: int) -> InProcessActor:
        return InProcessActor(RolloutActor(the_pool, spec, TASKSET, settings, name, concurrency))

    # wedge detection has its own test (a fake actor that never answers); here a generous grace keeps a
    # starved event loop on a loaded machine from being taken for a wedged actor
    plan = FleetPlan(actors=actors, max_concurrent=len(requests), watch_seconds=0, rollout_deadline=deadline,
                     result_grace=60.0)
    fleet = RolloutFleet(spawn, plan, TASKSET, driver_node="here", reclaim=getattr(the_pool, "reclaim", None))
    await fleet.start(HERE)
    sink, learner = RolloutSink(out / "rollouts.jsonl"), Learner(lambda: None, LearnerConfig())
    await learner.begin_step(0, groups_of(requests))
    started = time.monotonic()
    try:
        await through_learner(fleet, learner, requests, sink.add)
        seconds = time.monotonic() - started
        await fleet.close()
        before_shutdown()
    finally:
        sink.close()
        stats = await the_pool.shutdown()
    written = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    return RunResult(sink.rollouts, written, await learner.counts(0), learner, stats, fleet.counts, seconds)


def ids_of(requests: list[RolloutRequest]) -> list[str]:
    return sorted(r.rollout_id for r in requests)


def ledger(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "sandboxes.jsonl").read_text().splitlines()]
