"""A run's wall time against its CPU floor: the least wall time its sandbox work needs here.

The floor is the CPU seconds of the sandbox processes (every RolloutActor's RUSAGE_CHILDREN since
the actor started: `ActorStats.sandbox_cpu_seconds`) spread over this machine's cores;
`wall_over_cpu_floor` = wall / floor, so 1.0 means every core was busy with sandbox work the
whole time. eval, train and `bench rollouts` all measure it here.

Invariant: the CPU figure is the sum over the actors' stats taken once, at the end of the run
(the actors live through the whole run, so it covers every rollout they ran, evals and train
steps alike); the ratio is None when no sandbox CPU was measured (sandboxes on another machine).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from rl_daytona.rollout import ActorStats


@dataclass(frozen=True)
class CpuFloor:
    wall_seconds: float
    sandbox_cpu_seconds: float
    cores: int

    @property
    def ratio(self) -> float | None:
        """wall / (sandbox CPU-s / cores); None without sandbox CPU."""
        if self.sandbox_cpu_seconds <= 0:
            return None
        return self.wall_seconds / (self.sandbox_cpu_seconds / self.cores)

    def line(self) -> str:
        """`wall 212 s = 1.24 x the CPU floor (342 sandbox CPU-s / 2 cores)`"""
        if self.ratio is None:
            return f"wall {self.wall_seconds:.0f} s (no sandbox CPU measured on this machine: no CPU floor)"
        return (f"wall {self.wall_seconds:.0f} s = {self.ratio:.2f} x the CPU floor "
                f"({self.sandbox_cpu_seconds:.0f} sandbox CPU-s / {self.cores} cores)")


def cpu_floor(wall_seconds: float, actor_stats: Iterable["ActorStats"], cores: int | None = None) -> CpuFloor:
    """The floor of a run that took `wall_seconds`, from its RolloutActors' stats."""
    cpu = sum(s.sandbox_cpu_seconds for s in actor_stats)
    return CpuFloor(wall_seconds, cpu, cores or os.cpu_count() or 1)
