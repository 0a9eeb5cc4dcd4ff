"""The provisioning planner without Ray or a sim: its plans on snapshots, its learned latency,
its create waves, and the real SandboxPool driving the published latency model in virtual time."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
from hypothesis import given, settings, strategies as st

from rl_daytona.backends import BackendSpec
from rl_daytona.bench.model import ModelBackend, run_virtual
from rl_daytona.planner import CreateWaves, InFlight, LatencyModel, Planner, PlannerConfig, Supply
from rl_daytona.pool import PoolConfig, SandboxPool


def test_latency_model_starts_from_its_priors_and_learns_by_concurrency() -> None:
    model = LatencyModel(PlannerConfig(prior_create=3.0, prior_slope=1.0, prior_fork=1.0))
    assert model.create_p50(1) == 3.0 and model.create_p50(4) == 5.0 and model.fork_p50() == 1.0
    for concurrency, seconds in ((1, 2.0), (8, 2.0), (32, 4.0), (128, 8.0)):
        model.observe_create(concurrency, seconds)
    model.observe_fork(0.5)
    assert model.create_p50(2) == 2.0  # flat between the observed bins at 1 and 8
    assert model.create_p50(16) == 3.0  # halfway (in log2) between 8 and 32
    assert model.create_p50(512) == 12.0  # past the last bin: its slope (2 s per doubling) goes on
    assert model.fork_p50() == 0.5


def test_without_forks_it_creates_up_to_the_deficit_and_the_cap_and_serves_idle_first() -> None:
    planner = Planner()
    plan = planner.plan(Supply(wanted=10, waiting=4, idle=3, max_creating=5), 0.0)
    assert (plan.hand_out, plan.creates, plan.forks) == (3, 5, 0)  # deficit 7, only 5 may be in flight
    busy = tuple(InFlight(k, 0.1, k) for k in range(4))
    assert planner.plan(Supply(wanted=10, waiting=4, idle=3, creates=busy, max_creating=5), 0.0).creates == 1
    covered = planner.plan(Supply(wanted=3, waiting=1, idle=1, creates=busy[:2]), 0.0)
    assert (covered.creates, covered.hand_out) == (0, 1)


def test_idle_sandboxes_nobody_will_claim_are_discarded() -> None:
    plan = Planner().plan(Supply(wanted=2, waiting=0, idle=5), 0.0)
    assert plan.discard == 3 and plan.creates == 0


def test_a_fork_tree_keeps_its_parents_until_the_wave_is_covered() -> None:
    planner = Planner()
    planner.latency.observe_fork(0.5)
    planner.latency.observe_create(1, 3.0)
    start = planner.plan(Supply(wanted=256, waiting=256, idle=16, forkable=True), 0.0)
    assert start.forks == 16 and start.hand_out == 0  # every parent forks: the tree needs them all
    assert start.creates == 0  # a 3 s create arrives after a 16-parent tree is done
    covered = planner.plan(Supply(wanted=256, waiting=200, idle=40, probing=56, forks=(0.1,) * 80,
                                  forkable=True), 1.0)
    assert covered.forks == 0 and covered.hand_out == 40  # what is on the way covers the rest


def test_a_tree_with_nothing_on_hand_is_seeded_by_cold_creates() -> None:
    planner = Planner()
    plan = planner.plan(Supply(wanted=256, waiting=256, idle=0, forkable=True, max_creating=256), 0.0)
    assert 0 < plan.creates < 256 and plan.forks == 0


def test_the_next_wave_is_provisioned_once_the_current_one_is_covered() -> None:
    planner = Planner()
    assert planner.plan(Supply(wanted=4, waiting=4, idle=4, wanted_next=8), 0.0).creates == 8
    behind = planner.plan(Supply(wanted=8, waiting=8, idle=2, wanted_next=8, max_creating=6), 0.0)
    assert behind.creates == 6 and behind.hand_out == 2  # the current wave's deficit first


def test_a_create_past_its_waves_p95_gets_one_twin() -> None:
    waves = CreateWaves(min_size=20)
    keys = [waves.send(0.0) for _ in range(20)]
    for key in keys[:18]:
        waves.end(key, 1.0)
    assert all(c.wave_p95 is None for c in waves.in_flight(2.0))  # 90% ended: p95 not known yet
    waves.end(keys[18], 1.5)
    out = waves.in_flight(3.0)
    assert [c.key for c in out] == [keys[19]] and out[0].wave_p95 == 1.5
    planner = Planner()
    supply = Supply(wanted=20, waiting=1, idle=19, creates=out, max_creating=256)
    plan = planner.plan(supply, 3.0)
    assert plan.hedge == (keys[19],) and plan.creates == 1  # the twin
    waves.hedge(keys[19])
    again = planner.plan(Supply(wanted=20, waiting=1, idle=19, creates=waves.in_flight(3.5)), 3.5)
    assert again.hedge == () and again.creates == 1  # counted as missing, never twinned twice


def test_a_new_wave_starts_when_no_create_is_in_flight() -> None:
    waves = CreateWaves(min_size=1)
    first = waves.send(0.0)
    assert waves.end(first, 2.0) == (1, 2.0)
    second, third = waves.send(5.0), waves.send(5.0)
    assert [c.concurrency for c in waves.in_flight(6.0)] == [1, 2]
    waves.end(second, 6.0)
    assert [c.wave_p95 for c in waves.in_flight(7.0)] == [None]  # 1 of 2 ended: not 95%
    waves.end(third, 7.0)
    assert len(waves) == 0


@settings(max_examples=300, deadline=None)
@given(wanted=st.integers(0, 600), waiting=st.integers(0, 600), idle=st.integers(0, 300),
       probing=st.integers(0, 50), forks=st.lists(st.floats(0, 3), max_size=100),
       ages=st.lists(st.floats(0, 20), max_size=300), forkable=st.booleans(), cap=st.integers(1, 256),
       wanted_next=st.integers(0, 100))
def test_every_plan_stays_within_what_the_pool_has(wanted: int, waiting: int, idle: int, probing: int,
                                                   forks: list[float], ages: list[float], forkable: bool,
                                                   cap: int, wanted_next: int) -> None:
    creates = tuple(InFlight(i, age, i + 1) for i, age in enumerate(ages))
    supply = Supply(wanted=wanted, waiting=waiting, idle=idle, probing=probing, forks=tuple(forks),
                    creates=creates, forkable=forkable, max_creating=cap, wanted_next=wanted_next)
    plan = Planner().plan(supply, 0.0)
    assert min(plan.creates, plan.forks, plan.hand_out, plan.discard) >= 0
    assert plan.discard + plan.forks + plan.hand_out <= idle and plan.hand_out <= waiting
    assert len(creates) + plan.creates <= max(cap, len(creates))
    have = idle + probing + 2 * len(forks) + len(creates)
    if have >= wanted + wanted_next:
        assert plan.creates == 0 and plan.forks == 0
    if not forkable:
        assert plan.forks == 0


def _wave(width: int, forkable: bool, on_hand: int, fail_rate: float = 0.0) -> tuple[np.ndarray, int, ModelBackend]:
    """One wave through the real pool on the latency model (virtual time): usable times, lost."""
    backend = ModelBackend(forkable=forkable, fail_rate=fail_rate, seed=3)

    async def go() -> tuple[np.ndarray, int]:
        pool = SandboxPool(BackendSpec(), "run-m", PoolConfig(warm_size=on_hand or width, max_creating=256),
                           backend=backend)
        await pool.start()
        if on_hand:
            await pool.set_demand(None)
            while (await pool.stats()).ready < on_hand:
                await asyncio.sleep(0.1)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await pool.set_demand(width)

        async def one() -> float:
            await pool.claim()
            return loop.time() - started

        done = await asyncio.gather(*(one() for _ in range(width)), return_exceptions=True)
        await pool.shutdown()
        usable = np.asarray([t for t in done if isinstance(t, float)])
        return usable, width - len(usable)

    usable, lost = run_virtual(go())
    return usable, lost, backend


def test_on_the_published_model_a_fork_tree_beats_cold_creates_and_leaves_nothing() -> None:
    """Virtual time on the latency model: the planner's decisions, not this machine's speed."""
    tree, tree_lost, tree_backend = _wave(256, forkable=True, on_hand=16)
    cold, cold_lost, cold_backend = _wave(256, forkable=False, on_hand=0)
    assert tree_lost == cold_lost == 0
    assert tree.max() < np.median(cold)  # the whole tree is usable before half the cold creates
    assert tree_backend.alive == {} and cold_backend.alive == {}  # shutdown left nothing


def test_at_512_wide_with_failing_creates_every_sandbox_is_delivered() -> None:
    usable, lost, backend = _wave(512, forkable=False, on_hand=0, fail_rate=0.03)
    assert lost == 0 and len(usable) == 512 and backend.alive == {}


def test_a_pool_provisions_the_next_wave_while_the_current_one_runs(tmp_path: Path) -> None:
    from rl_daytona.backends.local import LocalBackend

    async def go() -> None:
        pool = SandboxPool(BackendSpec(root=str(tmp_path)), "run-n", PoolConfig(warm_size=0),
                           backend=LocalBackend(tmp_path))
        await pool.start()
        await pool.set_demand(3, next_wave=4)
        held = [await pool.claim() for _ in range(3)]
        await pool.drain()
        assert (await pool.stats()).ready == 4  # the next wave's sandboxes, made while these are held
        await pool.set_demand(4)
        assert len({(await pool.claim()).sandbox_id for _ in range(4)}) == 4
        assert (await pool.stats()).created == 7 and len(held) == 3
        await pool.shutdown()
        assert await LocalBackend(tmp_path).list_sandboxes("run-n") == []

    asyncio.run(go())
