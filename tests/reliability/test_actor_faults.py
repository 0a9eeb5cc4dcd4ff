"""Actors dying mid-run, under the session's real Ray: a RolloutActor killed mid-rollout, and the
SandboxPool killed mid-run (Ray restarts it). Local bwrap sandboxes, the cheap taskset, the
per-conversation scripted policy; every finished attempt goes to a real `Learner` the way
`rl-daytona train` sends it (infra failures come back as retries, dispatched again).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, Callable

import pytest
import ray

from rl_daytona import runtime
from rl_daytona.backends import BackendSpec
from rl_daytona.backends.local import LocalBackend
from rl_daytona.source import requests_for
from rl_daytona.fleet import FleetPlan
from rl_daytona.learn.learner import Learner, LearnerConfig
from rl_daytona.pool import PoolConfig
from rl_daytona.types import Rollout, RolloutStatus, Settings
from tests.reliability.cheap_task import SOLVE
from tests.reliability.harness import TASKSET, groups_of, through_learner
from tests.reliability.turn_llm import TurnLLM

pytestmark = pytest.mark.usefixtures("ray_session")

GROUP = 4


def _ledger(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def _run(tmp_path: Path, run_id: str, pool_config: PoolConfig, fault: Callable[[Any, Any], None],
               llm_delay: float) -> dict[str, Any]:
    """16 attempts (4 tasks x 4) on 2 RolloutActors; `fault(pool, fleet)` fires when the first comes back."""
    spec = BackendSpec(root=str(tmp_path / "sb"))
    requests = requests_for(TASKSET, "heldout", GROUP)[: 4 * GROUP]
    with TurnLLM([SOLVE], delay=llm_delay) as llm:
        pool = runtime.start_pool(spec, run_id, pool_config)
        await pool.start.remote()
        settings = Settings(policy_url=llm.url, max_turns=2, rollout_deadline=60, exec_timeout=20)
        plan = FleetPlan(actors=2, max_concurrent=8, watch_seconds=0, rollout_deadline=60)
        fleet = runtime.start_fleet(pool, spec, TASKSET, settings, plan)
        await fleet.start()
        learner = Learner(lambda: None, LearnerConfig())
        await learner.begin_step(0, groups_of(requests))
        fired: list[float] = []
        seen: list[Rollout] = []

        def on_done(rollout: Rollout) -> None:
            seen.append(rollout)
            if not fired:
                fired.append(time.time())
                fault(pool, fleet)

        try:
            await through_learner(fleet, learner, requests, on_done)
            actors = await fleet.stats()
            await fleet.close()
            pool_stats = await pool.stats.remote()
        finally:
            final = await pool.shutdown.remote()
        counts = await learner.counts(0)
    left = await LocalBackend(tmp_path / "sb").list_sandboxes(run_id)
    return {"requests": requests, "seen": seen, "counts": counts, "fleet": fleet.counts, "pool": pool_stats,
            "final": final, "actors": actors, "fired_at": fired[0], "left": left}


async def _recent_holder(ledger: Path, members: dict[str, Any], within: float, wait: float = 30.0) -> Any:
    """The live member holding a sandbox it claimed less than `within` s ago (waits for one)."""
    deadline = time.time() + wait
    while time.time() < deadline:
        held: dict[str, tuple[str, float]] = {}
        for e in _ledger(ledger):
            if e["event"] == "claimed" and e.get("claimer") in members:
                held[e["sandbox_id"]] = (e["claimer"], e["t"])
            elif e["event"] in ("released", "reclaimed", "deleted"):
                held.pop(e["sandbox_id"], None)
        now = time.time()
        recent = [who for who, t in held.values() if now - t < within]
        if recent:
            return members[recent[0]]
        await asyncio.sleep(0.05)
    raise AssertionError(f"no actor claimed a sandbox in {wait:.0f}s: nothing to kill mid-rollout")


def _every_group_complete(result: dict[str, Any]) -> None:
    counts, requests = result["counts"], result["requests"]
    first_tries = [r for r in result["seen"] if "-retry" not in r.rollout_id]
    assert sorted(r.rollout_id for r in first_tries) == sorted(r.rollout_id for r in requests), \
        "every rollout id reached the Learner exactly once"
    assert counts["groups_complete"] == len(requests) // GROUP and counts["dropped_infra"] == 0, counts
    assert counts["completed"] == len(requests)
    assert result["left"] == [], "nothing of the run is left"


def test_a_rollout_actor_killed_mid_rollout_loses_nothing_and_its_sandboxes_are_reclaimed(tmp_path: Path) -> None:
    ledger = tmp_path / "sandboxes.jsonl"
    killed: list[tuple[str, float]] = []
    pending: list[asyncio.Task[None]] = []

    def kill_an_actor(pool: Any, fleet: Any) -> None:
        # An actor's rollouts run in step and can all be between a release and their next claim
        # when the first comes back (seen on a loaded CI), so wait (off the driver's loop, which
        # dispatches the next claims) for one holding a sandbox it claimed under 1.5 s ago: two
        # 1 s model turns stand between that claim and its release, so it holds it when the kill lands.
        async def kill_a_recent_holder() -> None:
            victim = await _recent_holder(ledger, {m.name: m for m in fleet._members if m.alive}, within=1.5)
            ray.kill(victim.actor, no_restart=True)
            killed.append((victim.name, time.time()))

        pending.append(asyncio.get_running_loop().create_task(kill_a_recent_holder()))

    result = asyncio.run(_run(tmp_path, "kill-actor", PoolConfig(warm_size=4, ledger=str(ledger)),
                              kill_an_actor, llm_delay=1.0))
    task = pending[0]
    assert killed, (task.exception() if task.done() and not task.cancelled() else "the run ended before the kill")
    victim, killed_at = killed[0]
    _every_group_complete(result)
    assert result["fleet"]["actors_lost"] == 1 and result["fleet"]["redispatched"] >= 1, result["fleet"]
    assert {r.status for r in result["seen"]} == {RolloutStatus.OK}
    assert victim not in {r.actor for r in result["seen"] if r.started_at > killed_at + 0.5}
    events = _ledger(ledger)
    reclaimed = {e["sandbox_id"] for e in events if e["event"] == "reclaimed"}
    deleted_at = {e["sandbox_id"]: e["t"] for e in events if e["event"] == "deleted"}
    assert reclaimed and result["fleet"]["sandboxes_reclaimed"] == len(reclaimed), (result["fleet"], reclaimed)
    assert result["pool"].reclaimed == len(reclaimed)
    lag = max(deleted_at[s] for s in reclaimed) - killed_at
    assert lag < 5.0, f"the killed actor's sandboxes were deleted {lag:.1f}s after the kill"
    print(f"FIGURE fault4: RolloutActor killed with rollouts in flight: {result['fleet']['redispatched']} "
          f"re-dispatched, {result['counts']['groups_complete']} of {len(result['requests']) // GROUP} groups "
          f"complete, 0 lost; its {len(reclaimed)} sandbox(es) deleted {lag:.2f}s after the kill")


def test_the_pool_killed_mid_run_restarts_reaps_and_claims_fail_over(tmp_path: Path) -> None:
    def kill_the_pool(pool: Any, fleet: Any) -> None:
        ray.kill(pool, no_restart=False)

    # creates one at a time, so claims are waiting in the pool when it dies; the ledger is its journal
    config = PoolConfig(warm_size=2, max_creating=1, ledger=str(tmp_path / "sandboxes.jsonl"))
    result = asyncio.run(_run(tmp_path, "kill-pool", config, kill_the_pool, llm_delay=0.5))
    _every_group_complete(result)
    retried = sum(a.pool_calls_retried for a in result["actors"])
    assert retried >= 1, "a claim or release the death cut off was tried again on the restarted pool"
    infra = [r for r in result["seen"] if r.status is RolloutStatus.INFRA_ERROR]
    assert infra == [], "the restarted pool adopted the claimed sandboxes: no rollout lost its sandbox"
    events = _ledger(tmp_path / "sandboxes.jsonl")  # (a delete the death cut short may be missing from it)
    claimed_before = {e["sandbox_id"] for e in events if e["event"] == "claimed" and e["t"] < result["fired_at"]}
    released_before = {e["sandbox_id"] for e in events if e["event"] == "released" and e["t"] < result["fired_at"]}
    held_across = claimed_before - released_before
    assert held_across, "some rollouts held sandboxes when the pool died"
    print(f"FIGURE fault5: SandboxPool killed mid-run: restarted, reaped {result['pool'].reaped} orphan(s) by label, "
          f"{len(held_across)} sandbox(es) held across the death adopted and used to the end, {retried} pool call(s) failed over, {len(infra)} attempt(s) cut off, "
          f"{result['counts']['groups_complete']} of {len(result['requests']) // GROUP} groups complete, 0 lost")


def test_the_create_window_outlives_the_death_of_its_actor() -> None:
    """The run's create window is a named actor owned by the process that made it: when that
    process dies (a restarted pool) the actor dies too, and every create would fail. A gate whose
    actor died makes the window again. Found when a 256-wide run after another with the same run
    id failed 15,825 creates in a minute."""
    from rl_daytona.backends.daytona_limits import RayGate

    async def go() -> float:
        gate = RayGate("window-death", 100)
        await gate.acquire()
        ray.kill(gate._actor, no_restart=True)
        return await asyncio.wait_for(gate.acquire(), timeout=60)

    assert asyncio.run(go()) == 0.0
