"""Nothing waits forever: a rollout hanging past its deadline, an actor that never answers, and
the watchdog that says which rollouts a run is waiting on."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from rl_daytona.backends import BackendSpec
from rl_daytona.backends.local import LocalBackend
from rl_daytona.fleet import FleetPlan, RolloutFleet
from rl_daytona.pool import PoolConfig
from rl_daytona.types import PhaseTimings, Rollout, RolloutRequest, RolloutStatus, Trajectory
from rl_daytona.watchdog import Watchdog, WatchdogConfig
from tests.reliability.cheap_task import SOLVE
from tests.reliability.harness import HERE, InProcessActor, ledger, run_wide
from tests.reliability.turn_llm import TurnLLM

DEADLINE = 2.0
GROUP = 4


def _hanging_run(tmp_path: Path) -> Any:
    """8 tasks x 4 on local sandboxes; every 4th first turn runs `sleep 30` (past the 2 s deadline)."""
    spec = BackendSpec(root=str(tmp_path / "sb"))
    config = PoolConfig(warm_size=8, ledger=str(tmp_path / "run" / "sandboxes.jsonl"))
    with TurnLLM([SOLVE, SOLVE, SOLVE, "sleep 30"]) as llm:
        run = run_wide(spec, tmp_path / "run", llm.url, group=GROUP, deadline=DEADLINE, pool=config, split="heldout")
        result = asyncio.run(asyncio.wait_for(run, timeout=120))  # nothing waits forever
    assert asyncio.run(LocalBackend(tmp_path / "sb").list_sandboxes("run-wide")) == []
    return result


def test_a_rollout_past_its_deadline_times_out_its_sandbox_is_deleted_and_the_watchdog_says_so(
        tmp_path: Path) -> None:
    result = _hanging_run(tmp_path)
    timed_out = [r for r in result.rollouts if r.status is RolloutStatus.TIMEOUT]
    assert timed_out and all("deadline" in r.error and r.reward == 0.0 for r in timed_out)
    deleted = {e["sandbox_id"] for e in ledger(tmp_path / "run") if e["event"] == "deleted"}
    assert {r.sandbox_id for r in timed_out} <= deleted, "each timed-out rollout's sandbox was deleted"
    assert result.fleet["stragglers"] >= len(timed_out), result.fleet
    assert result.fleet["wedged"] == 0 and result.fleet["lost"] == 0
    # no partial group reached the Learner's batch: each scored group has all its members
    for state in result.learner._steps.values():
        by_group: dict[str, int] = {}
        for r in state.scored:
            by_group[r.group_id] = by_group.get(r.group_id, 0) + 1
        assert set(by_group.values()) <= {GROUP}, by_group
    print(f"FIGURE fault6: {len(timed_out)} of {len(result.rollouts)} rollouts hung past the {DEADLINE:g}s deadline: "
          f"status timeout, sandbox deleted, watchdog reported {result.fleet['stragglers']} straggler(s); "
          f"groups complete {result.counts['groups_complete']}, retried {result.counts['retried']}, "
          f"dropped {result.counts['groups_dropped_infra']}")


def test_a_timed_out_attempt_goes_through_the_group_policy(tmp_path: Path) -> None:
    result = _hanging_run(tmp_path)
    first_timeouts = [r for r in result.rollouts if r.status is RolloutStatus.TIMEOUT and "-retry" not in r.rollout_id]
    assert result.counts["retried"] >= len(first_timeouts) > 0, result.counts


def _rollout(request: RolloutRequest, actor: str) -> Rollout:
    return Rollout(rollout_id=request.rollout_id, task_id=request.task_id, variant="0", group_id=request.group_id,
                   attempt=request.attempt, reward=1.0, status=RolloutStatus.OK, timings=PhaseTimings(),
                   trajectory=Trajectory(), actor=actor)


class _Actor:
    """Answers at once, or (wedged) never: an event loop stuck below the rollout's own deadline."""

    def __init__(self, name: str, wedged: bool) -> None:
        self.name, self.wedged = name, wedged

    async def close(self) -> None:
        return None

    async def run(self, request: RolloutRequest) -> Rollout:
        if self.wedged:
            await asyncio.Event().wait()
        return _rollout(request, self.name)


def test_an_actor_that_never_answers_is_stopped_reclaimed_and_its_work_runs_elsewhere() -> None:
    stopped: list[Any] = []
    reclaimed: list[str] = []

    async def reclaim(name: str) -> int:
        reclaimed.append(name)
        return 2

    def spawn(node_id: str, name: str, concurrency: int) -> InProcessActor:
        return InProcessActor(_Actor(name, wedged=name == "rollout-0"))

    async def go() -> list[Rollout]:
        plan = FleetPlan(actors=2, max_concurrent=4, watch_seconds=0, rollout_deadline=0.5, result_grace=0.3)
        fleet = RolloutFleet(spawn, plan, "tests.reliability.cheap_task:CHEAP_TASKSET", driver_node="here",
                             reclaim=reclaim, stop=stopped.append, nodes=lambda: HERE)
        await fleet.start(HERE)
        requests = [RolloutRequest(f"r{i}", "note[variant=0]", f"g{i // 2}", i % 2) for i in range(6)]
        results = await asyncio.wait_for(asyncio.gather(*(fleet.run(r) for r in requests)), timeout=30)
        await fleet.close()
        assert fleet.counts["wedged"] == 1 and fleet.counts["redispatched"] >= 1 and fleet.counts["lost"] == 0
        assert fleet.counts["actors_replaced"] == 1 and len(fleet.actors) == 2
        assert fleet.counts["sandboxes_reclaimed"] == 2 and fleet.counts["stragglers"] >= 1, fleet.counts
        return [r for _, r in results]

    rollouts = asyncio.run(go())
    assert sorted(r.rollout_id for r in rollouts) == [f"r{i}" for i in range(6)]
    assert "rollout-0" not in {r.actor for r in rollouts} and {r.status for r in rollouts} == {RolloutStatus.OK}
    assert len(stopped) == 1 and stopped[0].target.name == "rollout-0" and reclaimed == ["rollout-0"]


def test_watchdog_reports_each_straggler_once_and_each_tail_wait_once() -> None:
    now = [0.0]
    lines: list[str] = []
    dog = Watchdog(WatchdogConfig(deadline=10.0, tail_size=2, tail_seconds=3.0), lines.append, clock=lambda: now[0])
    for i in range(4):
        dog.started(f"r{i}")
    now[0] = 7.0
    assert dog.check() == []  # 70% of the deadline: not yet
    dog.finished("r0")
    dog.finished("r1")
    now[0] = 8.5
    assert len(dog.check()) == 3  # r2, r3 past 80%; and only two left, nothing started for 8.5 s
    assert dog.check(9.0) == [], "each report is made once"
    dog.started("r4")  # a new start ends the tail episode
    assert dog.check(12.0) == []
    dog.finished("r2")
    now[0] = 16.0  # r3 and r4 left, nothing started for 7.5 s: a second tail wait; r4 at 75%: no report
    tail = dog.check()
    assert len(tail) == 1 and "waiting on the last 2 rollout(s) (r3, r4)" in tail[0]
    assert dog.counts == {"stragglers": 2, "tail_waits": 2} and len(lines) == 4
