"""The composition root: the only place Ray options are applied to the plain actor classes.

Invariant: a run has exactly one SandboxPool, named after the run id; RolloutActors reserve no
CPU slots (their work is I/O and sandbox processes), so they never starve Ray's scheduler on
a small machine, and they are spread across nodes.
"""

from __future__ import annotations

import os
from typing import Any

import ray

from rl_daytona.backends import BackendSpec
from rl_daytona.pool import PoolConfig, SandboxPool
from rl_daytona.rollout import RolloutActor
from rl_daytona.types import Settings


def ensure_ray() -> None:
    """Join the cluster named by RAY_ADDRESS (as under `ray job submit`), else start a local one."""
    if ray.is_initialized():
        return
    address = os.environ.get("RAY_ADDRESS") or None
    kwargs: dict[str, Any] = {"address": address, "log_to_driver": True}
    if address is None:
        kwargs.update(include_dashboard=False, num_cpus=os.cpu_count() or 2)
    ray.init(**kwargs)


def pool_name(run_id: str) -> str:
    return f"rl-daytona-pool-{run_id}"


def start_pool(spec: BackendSpec, run_id: str, config: PoolConfig) -> Any:
    actor = ray.remote(SandboxPool).options(
        name=pool_name(run_id), num_cpus=0, max_concurrency=100_000, lifetime=None)
    return actor.remote(spec, run_id, config)


def start_rollout_actors(pool: Any, spec: BackendSpec, taskset: str, settings: Settings,
                         count: int, concurrency: int) -> list[Any]:
    actor = ray.remote(RolloutActor).options(
        num_cpus=0, max_concurrency=concurrency + 8, scheduling_strategy="SPREAD")
    return [actor.remote(pool, spec, taskset, settings, f"rollout-{i}", concurrency) for i in range(count)]


def start_learner(client: Any, config: Any, version: int = 0) -> Any:
    """The run's Learner actor (async: `add` keeps arriving while a step trains)."""
    from rl_daytona.learn.learner import Learner

    actor = ray.remote(Learner).options(num_cpus=0, max_concurrency=10_000)
    return actor.remote(client, config, version)
