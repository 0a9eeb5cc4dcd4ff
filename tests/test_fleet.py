"""RolloutFleet over plain stand-in actors: one rollout per request, bounded dispatch, lost actors, nodes joining.

The stand-ins answer `.run.remote(request)` with an awaitable the way a Ray actor handle answers
with an ObjectRef, and fail with Ray's own `ActorDiedError` when "their node is gone". The fleet
is the real one; Ray is up only for `ray.put` of the finished rollouts.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

import pytest
from ray.exceptions import ActorDiedError

from rl_daytona.fleet import FleetPlan, RolloutFleet
from rl_daytona.placement import NodeInfo
from rl_daytona.rollout import ActorStats
from rl_daytona.types import PhaseTimings, Rollout, RolloutRequest, RolloutStatus, Trajectory

pytestmark = pytest.mark.usefixtures("ray_session")

TASKSET = "tests.tasks.example_task:EXAMPLE_TASKSET"
TASK = "wordcount[variant=0]"


class _Method:
    def __init__(self, fn: Callable[..., Awaitable[Any]]) -> None:
        self.remote = fn


class StandInActor:
    """A RolloutActor handle's shape: run / stats / close, each called with `.remote(...)`."""

    def __init__(self, node_id: str, name: str, concurrency: int, gate: asyncio.Event) -> None:
        self.node_id, self.name, self.concurrency, self.gate = node_id, name, concurrency, gate
        self.dead = False
        self.in_flight = self.peak = 0
        self.served: list[str] = []
        self.closed = False
        self.run, self.stats, self.close = _Method(self._run), _Method(self._stats), _Method(self._close)

    async def _run(self, request: RolloutRequest) -> Rollout:
        if self.dead:
            raise ActorDiedError()
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await self.gate.wait()
            if self.dead:
                raise ActorDiedError()
        finally:
            self.in_flight -= 1
        self.served.append(request.rollout_id)
        return Rollout(rollout_id=request.rollout_id, task_id=request.task_id, variant="0",
                       group_id=request.group_id, attempt=request.attempt, reward=1.0, status=RolloutStatus.OK,
                       timings=PhaseTimings(), trajectory=Trajectory(), node_id=self.node_id, actor=self.name)

    async def _stats(self) -> ActorStats:
        if self.dead:
            raise ActorDiedError()
        return ActorStats(self.name, len(self.served), self.in_flight, 0.0, self.node_id)

    async def _close(self) -> None:
        if self.dead:
            raise ActorDiedError()
        self.closed = True


class Cluster:
    """Nodes by id, and every stand-in actor the fleet spawned on them."""

    def __init__(self, *node_ids: str) -> None:
        self.nodes = [NodeInfo(node_id=n, address="10.0.0.1", is_head=(i == 0)) for i, n in enumerate(node_ids)]
        self.spawned: list[StandInActor] = []
        self.gate = asyncio.Event()

    def spawn(self, node_id: str, name: str, concurrency: int) -> StandInActor:
        actor = StandInActor(node_id, name, concurrency, self.gate)
        self.spawned.append(actor)
        return actor

    def on(self, node_id: str) -> list[StandInActor]:
        return [a for a in self.spawned if a.node_id == node_id]

    def lose(self, node_id: str) -> None:
        self.nodes = [n for n in self.nodes if n.node_id != node_id]
        for actor in self.on(node_id):
            actor.dead = True


def _requests(n: int, tag: str = "r") -> list[RolloutRequest]:
    return [RolloutRequest(rollout_id=f"{tag}{i}", task_id=TASK, group_id=f"g{i // 2}", attempt=i % 2)
            for i in range(n)]


async def _fleet(cluster: Cluster, **plan: Any) -> RolloutFleet:
    fleet = RolloutFleet(cluster.spawn, FleetPlan(watch_seconds=0, **plan), TASKSET, driver_node="")
    await fleet.start(cluster.nodes)
    return fleet


async def _settle() -> None:
    """Let every dispatched run reach its actor (a few turns of the event loop)."""
    for _ in range(20):
        await asyncio.sleep(0)


def test_every_request_yields_one_rollout_within_both_concurrency_bounds() -> None:
    async def go() -> None:
        cluster = Cluster("head", "w1", "w2")
        fleet = await _fleet(cluster, actors=3, max_concurrent=5)
        assert fleet.per_actor == 2 and all(a.concurrency == 2 for a in cluster.spawned)
        runs = asyncio.gather(*(fleet.run(r) for r in _requests(20)))
        await _settle()
        assert sum(a.in_flight for a in cluster.spawned) == 5 and max(a.in_flight for a in cluster.spawned) == 2
        cluster.gate.set()
        results = await runs
        ids = [rollout.rollout_id for _, rollout in results]
        assert sorted(ids) == sorted(r.rollout_id for r in _requests(20))
        assert all(rollout.status is RolloutStatus.OK for _, rollout in results)
        assert all(a.peak <= 2 for a in cluster.spawned) and all(a.served for a in cluster.spawned)
        assert fleet.counts["redispatched"] == fleet.counts["lost"] == 0

    asyncio.run(go())


def test_round_robin_placement_and_per_node_placement() -> None:
    async def go() -> None:
        cluster = Cluster("head", "w1")
        fleet = await _fleet(cluster, actors=3, max_concurrent=9)
        assert fleet.placement() == {"head": 2, "w1": 1} and fleet.per_actor == 3
        per_node = Cluster("head", "w1", "w2")
        fleet = await _fleet(per_node, actors=1, per_node=2, concurrency=4, max_concurrent=64)
        assert fleet.placement() == {"head": 2, "w1": 2, "w2": 2} and fleet.per_actor == 4

    asyncio.run(go())


def test_a_lost_actor_s_rollouts_run_again_on_another_node() -> None:
    async def go() -> None:
        cluster = Cluster("head", "w1")
        fleet = await _fleet(cluster, actors=4, per_node=2, max_concurrent=8)
        runs = asyncio.gather(*(fleet.run(r) for r in _requests(8)))
        await _settle()
        assert [a.in_flight for a in cluster.on("w1")] == [2, 2]
        cluster.lose("w1")
        cluster.gate.set()
        results = [rollout for _, rollout in await runs]
        assert len(results) == 8 and all(r.status is RolloutStatus.OK for r in results)
        assert {r.node_id for r in results} == {"head"}, "re-dispatched away from the lost node"
        assert fleet.counts["redispatched"] == 4 and fleet.counts["actors_lost"] == 2
        more = [rollout for _, rollout in await asyncio.gather(*(fleet.run(r) for r in _requests(3, "m")))]
        assert {r.node_id for r in more} == {"head"} and fleet.counts["lost"] == 0

    asyncio.run(go())


def test_lost_twice_or_with_no_actor_left_is_an_infra_error_rollout() -> None:
    async def go() -> None:
        cluster = Cluster("head", "w1")
        fleet = await _fleet(cluster, actors=2, max_concurrent=4)
        for actor in cluster.spawned:
            actor.dead = True
        _, twice = await fleet.run(_requests(1)[0])
        _, none_left = await fleet.run(_requests(2)[1])
        for rollout in (twice, none_left):
            assert rollout.status is RolloutStatus.INFRA_ERROR and rollout.reward == 0.0
            assert "lost" in rollout.error and rollout.variant == "0" and rollout.group_id == "g0"
        assert fleet.counts["redispatched"] == 1 and fleet.counts["lost"] == 2

    asyncio.run(go())


def test_sync_follows_nodes_leaving_and_joining() -> None:
    async def go() -> None:
        cluster = Cluster("head", "w1")
        fleet = await _fleet(cluster, actors=2, max_concurrent=4)
        cluster.lose("w1")
        cluster.nodes.append(NodeInfo(node_id="w2", address="10.0.0.1", is_head=False))
        await fleet.sync(cluster.nodes)
        assert fleet.placement() == {"head": 1, "w2": 1}
        assert fleet.counts["nodes_lost"] == 1 and fleet.counts["nodes_joined"] == 1
        assert cluster.on("w2")[0].concurrency == fleet.per_actor == 2
        cluster.gate.set()
        results = [rollout for _, rollout in await asyncio.gather(*(fleet.run(r) for r in _requests(6)))]
        assert {r.node_id for r in results} == {"head", "w2"} and fleet.counts["redispatched"] == 0

    asyncio.run(go())


def test_a_joining_node_takes_waiting_work_at_once() -> None:
    async def go() -> None:
        cluster = Cluster("head")
        fleet = await _fleet(cluster, actors=1, concurrency=1, max_concurrent=8)
        runs = asyncio.gather(*(fleet.run(r) for r in _requests(3)))
        await _settle()
        assert cluster.spawned[0].in_flight == 1, "the one actor holds its one slot; the rest wait"
        cluster.nodes.append(NodeInfo(node_id="w1", address="10.0.0.1", is_head=False))
        await fleet.sync(cluster.nodes)
        await _settle()
        assert [a.in_flight for a in cluster.on("w1")] == [1]
        cluster.gate.set()
        assert len(await runs) == 3

    asyncio.run(go())


def test_nodes_the_filter_rejects_get_no_actors_even_when_they_join() -> None:
    async def go() -> None:
        cluster = Cluster("head", "w1")
        far = NodeInfo(node_id="far", address="10.0.0.9", is_head=False)
        fleet = RolloutFleet(cluster.spawn, FleetPlan(actors=3, watch_seconds=0), TASKSET,
                             eligible=lambda nodes: [n for n in nodes if n.address == "10.0.0.1"])
        await fleet.start([*cluster.nodes, far])
        await fleet.sync([*cluster.nodes, far])
        assert set(fleet.placement()) == {"head", "w1"} and fleet.counts["nodes_joined"] == 0

    asyncio.run(go())


def test_stats_and_close_reach_every_live_actor_and_skip_lost_ones() -> None:
    async def go() -> None:
        cluster = Cluster("head", "w1")
        fleet = await _fleet(cluster, actors=2, max_concurrent=4)
        cluster.on("w1")[0].dead = True
        stats = await fleet.stats()
        assert [s.node_id for s in stats] == ["head"] and fleet.counts["actors_lost"] == 1
        await fleet.close()
        assert cluster.on("head")[0].closed and not cluster.on("w1")[0].closed

    asyncio.run(go())


def test_the_watcher_reads_the_cluster_until_closed() -> None:
    async def go() -> None:
        fleet = RolloutFleet(Cluster("x").spawn, FleetPlan(actors=1, watch_seconds=0.05), TASKSET)
        await fleet.start()  # the real Ray of the session: one node
        assert len(fleet.placement()) == 1
        await asyncio.sleep(0.2)
        assert fleet.counts["nodes_joined"] == fleet.counts["nodes_lost"] == 0
        await asyncio.wait_for(fleet.close(), timeout=10)

    asyncio.run(go())


@pytest.mark.parametrize("plan", [dict(actors=0), dict(max_concurrent=0), dict(per_node=-1), dict(concurrency=-2)])
def test_bad_plans_are_refused(plan: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="--"):
        FleetPlan(**plan)
