"""RolloutFleet: a run's RolloutActors on every node of the cluster, and the one dispatcher over them.

Invariant: every request given to `run` yields exactly one `Rollout`. At most `max_concurrent`
requests are in flight across the fleet and at most the per-actor concurrency on any one actor;
each goes to the least-loaded live actor. A request whose actor is lost (its node left the
cluster, or its process died) runs again on another live actor (on another node when there is
one) and so on a fresh sandbox, at most `FleetPlan.redispatches` times (2: a request caught by
two losses in a row still finishes; a request that kills every actor it touches takes down
three at most); past that, or with no actor left, it becomes an `infra_error` rollout. A node that joins mid-run gets RolloutActors at the
next watch tick and takes new work from then on; actors on a node that left get no more work.
Every await on an actor is bounded: a rollout not back within its deadline plus a grace counts
its actor as lost (wedged: it is stopped). The sandboxes a lost actor held are reclaimed (the
pool deletes them at once, not at shutdown), and an actor lost while its node is still up is
replaced there (at most `FleetPlan.replacements` times a run). A `Watchdog` reports rollouts past 80% of their
deadline and waits on the last few (`counts["stragglers"]`, `counts["tail_waits"]`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from rl_daytona.placement import NodeInfo, alive_nodes, share_for_new_node, spread
from rl_daytona.ray_errors import lost_actor_errors
from rl_daytona.rollout import ActorStats
from rl_daytona.types import PhaseTimings, Rollout, RolloutRequest, RolloutStatus, Trajectory
from rl_daytona.watchdog import Watchdog, WatchdogConfig


@dataclass(frozen=True)
class FleetPlan:
    """How many RolloutActors, where, and how much work each holds at once."""

    actors: int = 2  # RolloutActors at start, dealt round-robin over the alive nodes
    per_node: int = 0  # when > 0: this many on every node instead (and on every node that joins)
    concurrency: int = 0  # rollouts in flight per actor; 0: max_concurrent / actors placed, rounded up
    max_concurrent: int = 64  # rollouts in flight across the whole fleet
    watch_seconds: float = 2.0  # how often the cluster's nodes are re-read; 0: never
    rollout_deadline: float = 0.0  # each rollout's deadline (Settings.rollout_deadline); 0: unbounded, no watchdog
    result_grace: float = 10.0  # seconds past the deadline (+10% of it) before an actor counts as wedged
    replacements: int = 8  # a lost actor whose node is still up is replaced, this many times per run at most
    redispatches: int = 2  # a request whose actor was lost runs again at most this many times

    def __post_init__(self) -> None:
        if self.actors < 1 or self.max_concurrent < 1:
            raise ValueError("a fleet needs --rollout-actors >= 1 and --max-concurrent >= 1")
        if self.per_node < 0 or self.concurrency < 0 or self.watch_seconds < 0:
            raise ValueError("--rollout-actors-per-node, --rollout-concurrency and the watch interval must be >= 0")

    def per_actor(self, placed: int) -> int:
        """Rollouts in flight per actor when `placed` actors start the run."""
        return self.concurrency or -(-self.max_concurrent // max(placed, 1))

    @property
    def result_bound(self) -> float | None:
        """How long the fleet waits for one rollout before its actor counts as wedged: the actor
        ends every rollout at its deadline, so past deadline + grace something below it is stuck."""
        return self.rollout_deadline * 1.1 + self.result_grace if self.rollout_deadline > 0 else None


CONTROL_BOUND = 60.0  # seconds the fleet waits on an actor's stats or close

# (node id, actor name, rollouts in flight it must hold) -> a RolloutActor handle pinned to that node
Spawn = Callable[[str, str, int], Any]
# which alive nodes may hold RolloutActors (e.g. only the pool's machine for local sandboxes)
NodeFilter = Callable[[list[NodeInfo]], list[NodeInfo]]
# actor name -> awaitable: the pool deletes the sandboxes that actor claimed (it is gone)
Reclaim = Callable[[str], Awaitable[Any]]
# actor handle -> None: stop a wedged actor for good
Stop = Callable[[Any], None]


class _Member:
    def __init__(self, actor: Any, node_id: str, name: str, index: int) -> None:
        self.actor, self.node_id, self.name, self.index = actor, node_id, name, index
        self.in_flight = 0
        self.alive = True


class RolloutFleet:
    def __init__(self, spawn: Spawn, plan: FleetPlan, taskset: str, driver_node: str = "",
                 eligible: NodeFilter | None = None, reclaim: Reclaim | None = None,
                 stop: Stop | None = None, nodes: Callable[[], list[NodeInfo]] = alive_nodes,
                 tasks: Any = None) -> None:
        self._spawn, self.plan, self.taskset, self.driver_node = spawn, plan, taskset, driver_node
        self._tasks = tasks  # the loaded taskset when the run has it (None: loaded by name when needed)
        self._eligible = eligible or (lambda nodes: nodes)
        self._reclaim, self._stop = reclaim, stop
        self._closing = False
        self._nodes = nodes  # the cluster's alive nodes, read in a thread (a GCS call)
        self._background: set[asyncio.Task[Any]] = set()  # reclaims and replacements
        self._replacing = 0  # replacements on their way: a request with no live actor waits for them
        self.watchdog = Watchdog(WatchdogConfig(deadline=plan.rollout_deadline))
        self._watchdog_task: asyncio.Task[None] | None = None
        self._members: list[_Member] = []
        self._known: set[str] = set()
        self._changed = asyncio.Condition()
        self._in_flight = 0
        self._capacity = 0
        self._turn = 0
        self._watcher: asyncio.Task[None] | None = None
        self._counts = {"redispatched": 0, "lost": 0, "actors_lost": 0, "nodes_joined": 0, "nodes_lost": 0,
                        "wedged": 0, "sandboxes_reclaimed": 0, "actors_replaced": 0}

    @property
    def counts(self) -> dict[str, int]:
        """What the fleet survived, with the watchdog's reports."""
        return {**self._counts, **self.watchdog.counts}

    async def start(self, nodes: list[NodeInfo] | None = None) -> None:
        """Place the first actors on the alive nodes and start watching for joins and losses."""
        nodes = self._eligible(nodes if nodes is not None else await asyncio.to_thread(self._nodes))
        self._known = {n.node_id for n in nodes}
        placement = spread(nodes, self.plan.actors, self.plan.per_node)
        self._capacity = self.plan.per_actor(len(placement))
        for node_id in placement:
            self._add(node_id)
        if self.plan.watch_seconds > 0:
            self._watcher = asyncio.ensure_future(self._watch())
        if self.plan.rollout_deadline > 0:
            self._watchdog_task = asyncio.ensure_future(self.watchdog.run())

    @property
    def actors(self) -> list[Any]:
        return [m.actor for m in self._members if m.alive]

    @property
    def per_actor(self) -> int:
        return self._capacity

    def placement(self) -> dict[str, int]:
        """Live RolloutActors per node id."""
        out: dict[str, int] = {}
        for m in self._members:
            if m.alive:
                out[m.node_id] = out.get(m.node_id, 0) + 1
        return out

    async def run(self, request: RolloutRequest) -> tuple[Any, Rollout]:
        """Run one attempt; returns (an ObjectRef holding the rollout, the rollout). Never waits
        on an actor longer than `plan.result_bound`."""
        import ray

        failed_on = ""
        for attempt in range(1 + self.plan.redispatches):
            member = await self._acquire(avoid_node=failed_on)
            if member is None:
                break
            self._counts["redispatched"] += attempt
            self.watchdog.started(request.rollout_id)
            try:
                ref = member.actor.run.remote(request)
                rollout = await asyncio.wait_for(_awaited(ref), self.plan.result_bound)
            except (asyncio.TimeoutError, *lost_actor_errors()) as exc:
                self._lose(member, wedged=isinstance(exc, asyncio.TimeoutError))
                failed_on = member.node_id
                continue
            finally:
                self.watchdog.finished(request.rollout_id)
                await self._release(member)
            # a rollout held on another node's object store would vanish with that node
            return (ref if member.node_id == self.driver_node else ray.put(rollout)), rollout
        self._counts["lost"] += 1
        rollout = self._lost_rollout(request)
        return ray.put(rollout), rollout

    async def sync(self, nodes: list[NodeInfo]) -> None:
        """Follow the cluster: actors on a node that left stop getting work; a new node gets actors."""
        nodes = self._eligible(nodes)
        alive = {n.node_id for n in nodes}
        gone, self._known = self._known - alive, self._known & alive  # forgotten first: no replacement there
        for node_id in gone:
            self._counts["nodes_lost"] += 1
            for m in self._members:
                if m.node_id == node_id:
                    self._lose(m)
        for node in nodes:
            if node.node_id not in self._known:
                self._known.add(node.node_id)
                self._counts["nodes_joined"] += 1
                for _ in range(share_for_new_node(len(self._known), self.plan.actors, self.plan.per_node)):
                    self._add(node.node_id)
        async with self._changed:
            self._changed.notify_all()

    async def stats(self) -> list[ActorStats]:
        out = []
        for m in [m for m in self._members if m.alive]:
            try:
                out.append(await asyncio.wait_for(_awaited(m.actor.stats.remote()), CONTROL_BOUND))
            except lost_actor_errors():
                self._lose(m)
            except asyncio.TimeoutError:  # a wedged actor: its stats are left out, the run goes on
                pass
        return out

    async def close(self) -> None:
        """Stop watching and close every live actor (their sandboxes' releases are awaited)."""
        self._closing = True
        for task in (self._watcher, self._watchdog_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

        async def close_one(m: _Member) -> None:
            try:
                await asyncio.wait_for(_awaited(m.actor.close.remote()), CONTROL_BOUND)
            except lost_actor_errors():
                self._lose(m)
            except asyncio.TimeoutError:  # releases not done in time: the pool's shutdown sweeps by label
                pass

        await asyncio.gather(*(close_one(m) for m in self._members if m.alive))
        await asyncio.gather(*self._background, return_exceptions=True)

    # -- internals ----------------------------------------------------------------------

    def _add(self, node_id: str) -> None:
        name = f"rollout-{len(self._members)}"
        actor = self._spawn(node_id, name, self._capacity)
        self._members.append(_Member(actor, node_id, name, len(self._members)))

    async def _acquire(self, avoid_node: str = "") -> _Member | None:
        """Wait for a free slot on a live actor and take it; None when no actor is left."""
        async with self._changed:
            while True:
                live = [m for m in self._members if m.alive]
                if not live and not self._replacing:
                    return None
                free = [m for m in live if m.in_flight < self._capacity]
                if free and self._in_flight < self.plan.max_concurrent:
                    member = self._pick(free, avoid_node)
                    member.in_flight += 1
                    self._in_flight += 1
                    return member
                await self._changed.wait()

    async def _release(self, member: _Member) -> None:
        async with self._changed:
            member.in_flight -= 1
            self._in_flight -= 1
            self._changed.notify_all()

    def _pick(self, free: list[_Member], avoid_node: str) -> _Member:
        """The least-loaded of `free`, off `avoid_node` when it can be (ties taken in turn)."""
        elsewhere = [m for m in free if m.node_id != avoid_node]
        self._turn += 1
        size = len(self._members)
        return min(elsewhere or free, key=lambda m: (m.in_flight, (m.index - self._turn) % size))

    def _lose(self, member: _Member, wedged: bool = False) -> None:
        """Give `member` no more work and have the pool delete the sandboxes it held (a
        wedged actor is stopped first, so it cannot touch them again)."""
        if not member.alive:
            return
        member.alive = False
        self._counts["actors_lost"] += 1
        if wedged:
            self._counts["wedged"] += 1
            if self._stop is not None:
                self._stop(member.actor)
        if self._reclaim is not None:
            self._in_background(self._reclaim_from(member.name))
        if not self._closing and self._counts["actors_replaced"] < self.plan.replacements:
            self._replacing += 1
            self._in_background(self._replace(member.node_id))

    def _in_background(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _replace(self, node_id: str) -> None:
        """A fresh actor where one was lost, if that node is still up (else the watch tick's
        `sync` forgets the node): one per loss, `plan.replacements` per run at most."""
        try:
            up = {n.node_id for n in self._eligible(await asyncio.to_thread(self._nodes))}
        except Exception:  # noqa: BLE001 - the cluster cannot be read: do not place blind
            up = set()
        if (node_id in up and node_id in self._known and not self._closing
                and self._counts["actors_replaced"] < self.plan.replacements):
            self._counts["actors_replaced"] += 1
            self._add(node_id)
        self._replacing -= 1
        async with self._changed:  # a request waiting for an actor now has one, or none is coming
            self._changed.notify_all()

    async def _reclaim_from(self, name: str) -> None:
        try:
            self._counts["sandboxes_reclaimed"] += int(await asyncio.wait_for(_awaited(self._reclaim(name)), 60.0))
        except Exception:  # noqa: BLE001 - the pool's shutdown still deletes everything of the run
            pass

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.plan.watch_seconds)
            try:
                nodes = await asyncio.to_thread(self._nodes)
            except Exception:  # noqa: BLE001 - a GCS hiccup: try again at the next tick
                continue
            await self.sync(nodes)

    def _lost_rollout(self, request: RolloutRequest) -> Rollout:
        if self._tasks is None:
            from rl_daytona.tasks import get_taskset

            self._tasks = get_taskset(self.taskset)
        return Rollout(rollout_id=request.rollout_id, task_id=request.task_id,
                       variant=self._tasks.get(request.task_id).variant,
                       group_id=request.group_id, attempt=request.attempt, reward=0.0,
                       status=RolloutStatus.INFRA_ERROR, timings=PhaseTimings(), trajectory=Trajectory(),
                       error="the RolloutActors running this rollout were lost, and no other actor could "
                             "run it to the end (lost too, or none left)")


async def _awaited(awaitable: Any) -> Any:
    """A coroutine awaiting `awaitable` (an ObjectRef is awaitable but not a coroutine)."""
    return await awaitable
