"""`rl-daytona bench rollouts`: requests in whole groups, and a tiny real run through Ray, the
pool, the fleet and a Learner's add (figures present and consistent, every sandbox deleted)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from rl_daytona.bench.rollouts import RolloutBench, bench_requests, run_rollout_bench


def test_requests_come_in_whole_groups_over_calc() -> None:
    full = bench_requests(1024)
    assert len(full) == 1024 and set(Counter(r.group_id for r in full).values()) == {32}
    small = bench_requests(5)
    assert len(small) == 5 and len({r.task_id for r in small}) == 5


@pytest.mark.usefixtures("ray_session")
def test_a_small_run_reports_throughput_floor_and_overhead(tmp_path: Path) -> None:
    from rl_daytona.backends.local import LocalBackend

    figures = run_rollout_bench(RolloutBench(n=2, max_concurrent=2, rollout_actors=1, out=tmp_path))
    assert figures["rollouts"] == 2 and sum(figures["statuses"].values()) == 2
    assert figures["sandbox_cpu_seconds"] > 0 and figures["wall_over_cpu_floor"] > 0
    parts = figures["overhead_latency"]
    assert set(parts) == {"ray_ms", "pool_ms", "learner_ms"}
    assert figures["overhead_latency_ms_per_rollout"] == pytest.approx(sum(p["mean"] for p in parts.values()), abs=0.05)
    cpu = figures["cpu_ms_per_rollout"]
    assert set(cpu) == {"driver", "pool", "learner", "rollout_actors", "ray_system"} and min(cpu.values()) >= 0
    assert cpu["pool"] > 0 and cpu["rollout_actors"] > 0 and cpu["ray_system"] > 0
    assert figures["orchestration_cpu_ms_per_rollout"] == pytest.approx(
        cpu["driver"] + cpu["pool"] + cpu["learner"] + cpu["ray_system"], abs=0.05)
    assert figures["pool"]["deleted"] >= figures["pool"]["claimed"] == 2
    import asyncio

    assert asyncio.run(LocalBackend(tmp_path / "sandboxes").list_sandboxes()) == []
