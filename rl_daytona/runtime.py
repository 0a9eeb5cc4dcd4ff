"""The composition root: the only place Ray options are applied to the plain actor classes.

Invariant: a run has exactly one SandboxPool, named after the run id; RolloutActors reserve no
CPU slots (their work is I/O and sandbox processes), so they never starve Ray's scheduler on
a small machine, and they are pinned to nodes as `rl_daytona.placement` deals them (local
sandboxes: only nodes on the pool's machine); the pool and the Learner live on the home node
(a `learner` node, else the head). A pool that dies is restarted by Ray (up to
`POOL_RESTARTS` times, on the home node, under the same name): before its first claim the
restarted pool lists the run's sandboxes by label, adopts those its ledger shows claimed (their
rollouts go on) and deletes the rest, and each RolloutActor retries once a claim or release that
the death cut off. A RolloutActor the fleet loses has its sandboxes reclaimed by the pool; a wedged one is killed.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import ray

from rl_daytona.backends import BackendSpec
from rl_daytona.pool import PoolConfig, SandboxPool
from rl_daytona.ray_join import plan_from_environment
from rl_daytona.rollout import RolloutActor
from rl_daytona.types import Settings


def ensure_ray() -> None:
    """Join a running Ray cluster, else start a one-machine Ray here.

    The cluster is the one RAY_ADDRESS names (as under `ray job submit`, which sets it for the
    driver; joined within 30 s or refused), else the last one `ray start` ran on this machine
    (as on a `ray up` head) while it is alive; see `rl_daytona.ray_join`. Token
    auth (Ray's RAY_AUTH_MODE=token) needs the cluster's token in this process's environment
    (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token); without it the join fails with
    one line saying so (a ValueError: the CLI's exit code 2)."""
    from ray.exceptions import AuthenticationError

    if ray.is_initialized():
        return
    plan = plan_from_environment()
    if plan.note:
        print(f"rl-daytona: {plan.note}", file=sys.stderr)
    address = plan.address
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=True)
    except (AuthenticationError, ConnectionError) as exc:
        first = str(exc).split(". ")[0].replace("\n", " ")
        raise ValueError(f"cannot join the Ray cluster at {address or 'this machine'}: {first}; for a cluster "
                         f"with token auth set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN to its token") from None


def policy_host() -> str:
    """The interface a server the driver starts for the run's actors (the built-in policy) binds:
    loopback when this process started its own one-machine Ray, else this node's address, so
    that RolloutActors and the Learner on other machines reach it."""
    node = getattr(getattr(ray._private.worker, "global_worker", None), "node", None)
    if not ray.is_initialized() or (node is not None and node.is_head()):
        return "127.0.0.1"
    return ray.util.get_node_ip_address()


POOL_RESTARTS = 3


def pool_name(run_id: str) -> str:
    return f"rl-daytona-pool-{run_id}"


def _on_home_node() -> Any:
    """Pin to the home node, hard: with a soft pin Ray was seen to start the pool on a worker
    node while the head was alive and idle (so losing that worker lost the run)."""
    from rl_daytona.placement import alive_nodes, home_node, pinned

    return pinned(home_node(alive_nodes()), soft=False)


def start_pool(spec: BackendSpec, run_id: str, config: PoolConfig) -> Any:
    actor = ray.remote(SandboxPool).options(
        name=pool_name(run_id), num_cpus=0, max_concurrency=100_000, lifetime=None,
        max_restarts=POOL_RESTARTS, max_task_retries=0, scheduling_strategy=_on_home_node())
    return actor.remote(spec, run_id, config)


def rollout_spawner(pool: Any, spec: BackendSpec, taskset: str, settings: Settings) -> Callable[[str, str, int], Any]:
    """(node id, name, rollouts in flight) -> a RolloutActor pinned to that node (it dies with the node)."""
    from rl_daytona.placement import pinned

    def spawn(node_id: str, name: str, concurrency: int) -> Any:
        actor = ray.remote(RolloutActor).options(
            num_cpus=0, max_concurrency=concurrency + 8, scheduling_strategy=pinned(node_id, soft=False))
        return actor.remote(pool, spec, taskset, settings, name, concurrency)

    return spawn


def start_fleet(pool: Any, spec: BackendSpec, taskset: str, settings: Settings, plan: Any, tasks: Any = None) -> Any:
    """The run's RolloutFleet (not yet started: `await fleet.start()` places the actors); `tasks`:
    the driver's loaded taskset, if it has it (the actors load theirs by name).

    Local sandboxes are directories on the pool's machine, so with the local backend only the
    nodes on that machine get RolloutActors; with Daytona every node does."""
    from rl_daytona.fleet import RolloutFleet
    from rl_daytona.placement import NodeInfo, address_of, alive_nodes, home_node, on_machine

    eligible = None
    if spec.kind == "local":
        nodes = alive_nodes()
        machine = address_of(nodes, home_node(nodes))

        def eligible(candidates: list[NodeInfo]) -> list[NodeInfo]:
            return on_machine(candidates, machine)

    spawn = rollout_spawner(pool, spec, taskset, settings)
    return RolloutFleet(spawn, plan, taskset, driver_node=ray.get_runtime_context().get_node_id(),
                        eligible=eligible, reclaim=lambda claimer: pool.reclaim.remote(claimer),
                        stop=lambda actor: ray.kill(actor, no_restart=True), tasks=tasks)


def start_learner(client: Any, config: Any, version: int = 0) -> Any:
    """The run's Learner actor (async: `add` keeps arriving while a step trains)."""
    from rl_daytona.learn.learner import Learner

    actor = ray.remote(Learner).options(num_cpus=0, max_concurrency=10_000, scheduling_strategy=_on_home_node())
    return actor.remote(client, config, version)
