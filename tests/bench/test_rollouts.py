"""`rl-daytona bench rollouts`: requests in whole groups, and a tiny real run through Ray, the
pool, the fleet and a Learner's add (figures present and consistent, every sandbox deleted)."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from rl_daytona.bench.rollouts import RolloutBench, _cpu, bench_requests, marginal_ms_per_rollout, run_rollout_bench


def test_requests_come_in_whole_groups_over_calc() -> None:
    full = bench_requests(1024)
    assert len(full) == 1024 and set(Counter(r.group_id for r in full).values()) == {32}
    assert len({r.task_id for r in full}) == 32  # of calc's 40 tasks, the 32 that split 1,024 evenly
    spread = bench_requests(1000)
    assert len(spread) == 1000 and set(Counter(r.group_id for r in spread).values()) == {25}
    odd = bench_requests(41)  # a prime: one task per group over all 40, rounded down
    assert len(odd) == 40 and set(Counter(r.group_id for r in odd).values()) == {1}
    small = bench_requests(5)
    assert len(small) == 5 and len({r.task_id for r in small}) == 5


def test_the_marginal_figure_takes_off_what_the_processes_burn_idle_over_the_run() -> None:
    per = {"driver": 10.0, "pool": 30.0, "learner": 20.0, "ray_system": 90.0, "rollout_actors": 500.0}
    idle = {"driver": 0.001, "pool": 0.002, "learner": 0.003, "ray_system": 0.05, "rollout_actors": 0.5}
    # 100 rollouts over 200 s: idle burns (1 + 2 + 3 + 50) ms/s x 200 s / 100 = 112 ms per rollout
    assert marginal_ms_per_rollout(per, idle, wall=200.0, n=100) == pytest.approx(150.0 - 112.0)
    # RolloutActors are not orchestration: their idle rate changes nothing
    assert marginal_ms_per_rollout(per, {**idle, "rollout_actors": 9.0}, 200.0, 100) == pytest.approx(38.0)


@pytest.mark.usefixtures("ray_session")
def test_a_small_run_reports_throughput_floor_and_overhead(tmp_path: Path) -> None:
    from rl_daytona.backends.local import LocalBackend

    figures = run_rollout_bench(RolloutBench(n=2, max_concurrent=2, rollout_actors=1, out=tmp_path,
                                             idle_seconds=1.0))
    assert figures["rollouts"] == 2 and sum(figures["statuses"].values()) == 2
    per = figures["per_attempt"]
    assert per["attempts"] == 2 and per["sandbox_commands"] >= 1 and per["tokens"] > 0 and per["bytes_per_datum"] > 0
    assert figures["sandbox_cpu_seconds"] > 0 and figures["wall_over_cpu_floor"] > 0
    parts = figures["overhead_latency"]
    assert set(parts) == {"ray_ms", "pool_ms", "learner_ms"}
    assert figures["overhead_latency_ms_per_rollout"] == pytest.approx(sum(p["mean"] for p in parts.values()), abs=0.05)
    cpu = figures["cpu_ms_per_rollout"]
    assert set(cpu) == {"driver", "pool", "learner", "rollout_actors", "ray_system"} and min(cpu.values()) >= 0
    assert cpu["pool"] > 0 and cpu["rollout_actors"] > 0
    # Ray's own processes may spend less than one clock tick (10 ms) in a two-rollout run, so
    # only their total since they started is sure to be positive: that the figure finds them
    assert asyncio.run(_cpu({}))["ray_system"] > 0
    assert figures["orchestration_cpu_ms_per_rollout"] == pytest.approx(
        cpu["driver"] + cpu["pool"] + cpu["learner"] + cpu["ray_system"], abs=0.05)
    idle = figures["idle_cpu_ms_per_second"]
    assert set(idle) == set(cpu) and min(idle.values()) >= 0
    assert figures["orchestration_marginal_cpu_ms_per_rollout"] == pytest.approx(marginal_ms_per_rollout(
        cpu, {k: v / 1000 for k, v in idle.items()}, figures["wall_seconds"], 2), abs=1.0)
    assert figures["pool"]["deleted"] >= figures["pool"]["claimed"] == 2
    assert asyncio.run(LocalBackend(tmp_path / "sandboxes").list_sandboxes()) == []
