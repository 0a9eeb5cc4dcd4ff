"""The CPU floor eval, train and `bench rollouts` share: wall / (sandbox CPU-s / cores), from
the RolloutActors' stats; no floor (None) when no sandbox CPU was measured here."""

from __future__ import annotations

import pytest

from rl_daytona.cpu_floor import CpuFloor, cpu_floor
from rl_daytona.rollout import ActorStats


def test_the_floor_sums_every_actors_sandbox_cpu() -> None:
    stats = [ActorStats("rollout-0", 10, 0, 200.0, "n1"), ActorStats("rollout-1", 12, 0, 142.0, "n1")]
    floor = cpu_floor(212.0, stats, cores=2)
    assert floor == CpuFloor(212.0, 342.0, 2)
    assert floor.ratio == pytest.approx(212.0 / 171.0)
    assert floor.line() == "wall 212 s = 1.24 x the CPU floor (342 sandbox CPU-s / 2 cores)"


def test_no_sandbox_cpu_is_no_floor() -> None:
    floor = cpu_floor(30.0, [], cores=4)  # sandboxes on another machine (daytona): nothing measured here
    assert floor.ratio is None and floor.sandbox_cpu_seconds == 0
    assert floor.line() == "wall 30 s (no sandbox CPU measured on this machine: no CPU floor)"
    assert cpu_floor(1.0, [], cores=None).cores >= 1  # this machine's cores
