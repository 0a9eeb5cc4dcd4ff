"""The composition root: the only place Ray options are applied to the plain actor classes.

Invariant: a run has exactly one SandboxPool, named after the run id; RolloutActors reserve no
CPU slots (their work is I/O and sandbox processes), so they never starve Ray's scheduler on
a small machine, and they are pinned to nodes as `rl_daytona.placement` deals them; the pool
and the Learner live on the home node (a `learner` node, else the head).
"""

from __future__ import annotations

import os
from typing import Any, Callable

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


def _on_home_node() -> Any:
    """Pin to the home node, softly: a one-node cluster or a vanished node still schedules."""
    from rl_daytona.placement import alive_nodes, home_node, pinned

    return pinned(home_node(alive_nodes()), soft=True)


def start_pool(spec: BackendSpec, run_id: str, config: PoolConfig) -> Any:
    actor = ray.remote(SandboxPool).options(
        name=pool_name(run_id), num_cpus=0, max_concurrency=100_000, lifetime=None,
        scheduling_strategy=_on_home_node())
    return actor.remote(spec, run_id, config)


def rollout_spawner(pool: Any, spec: BackendSpec, taskset: str, settings: Settings,
                    concurrency: int) -> Callable[[str, str], Any]:
    """(node id, name) -> a RolloutActor pinned to that node (it dies with the node)."""
    from rl_daytona.placement import pinned

    def spawn(node_id: str, name: str) -> Any:
        actor = ray.remote(RolloutActor).options(
            num_cpus=0, max_concurrency=concurrency + 8, scheduling_strategy=pinned(node_id, soft=False))
        return actor.remote(pool, spec, taskset, settings, name, concurrency)

    return spawn


def start_fleet(pool: Any, spec: BackendSpec, taskset: str, settings: Settings, plan: Any) -> Any:
    """The run's RolloutFleet (not yet started: `await fleet.start()` places the actors)."""
    from rl_daytona.fleet import RolloutFleet

    spawn = rollout_spawner(pool, spec, taskset, settings, plan.per_actor())
    return RolloutFleet(spawn, plan, taskset, driver_node=ray.get_runtime_context().get_node_id())


def start_rollout_actors(pool: Any, spec: BackendSpec, taskset: str, settings: Settings,
                         count: int, concurrency: int) -> list[Any]:
    actor = ray.remote(RolloutActor).options(
        num_cpus=0, max_concurrency=concurrency + 8, scheduling_strategy="SPREAD")
    return [actor.remote(pool, spec, taskset, settings, f"rollout-{i}", concurrency) for i in range(count)]


def start_learner(client: Any, config: Any, version: int = 0) -> Any:
    """The run's Learner actor (async: `add` keeps arriving while a step trains)."""
    from rl_daytona.learn.learner import Learner

    actor = ray.remote(Learner).options(num_cpus=0, max_concurrency=10_000, scheduling_strategy=_on_home_node())
    return actor.remote(client, config, version)
