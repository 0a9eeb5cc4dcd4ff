"""The latency model replays the published figures (pure functions, no sleeping)."""

from __future__ import annotations

import random
import statistics

import pytest

from rl_daytona.daytona_sim import latency

PUBLISHED = [(8, 2.8), (32, 3.3), (128, 5.1), (256, 9.9)]


@pytest.mark.parametrize(("width", "p50"), PUBLISHED)
def test_sampled_median_matches_the_published_p50(width: int, p50: float) -> None:
    rng = random.Random(width)
    samples = [latency.sample_cold(width, rng) for _ in range(4000)]
    assert abs(statistics.median(samples) - p50) <= 0.1 * p50


def test_spread_p95_about_1_4x_and_max_1_5x() -> None:
    rng = random.Random(1)
    samples = sorted(latency.sample_cold(128, rng) for _ in range(4000))
    p95 = samples[int(0.95 * len(samples))]
    assert 1.3 * 5.1 <= p95 <= 1.5 * 5.1
    assert max(samples) <= 1.5 * 5.1 + 1e-9
    assert min(samples) >= 0.7 * 5.1 - 1e-9


def test_p50_interpolates_in_log_width_and_extrapolates() -> None:
    assert latency.cold_p50(1) == 2.8
    assert latency.cold_p50(16) == pytest.approx(3.05)  # halfway between 8 and 32 in log2
    assert latency.cold_p50(64) == pytest.approx(4.2)
    assert latency.cold_p50(512) == pytest.approx(14.7)  # +4.8 s per doubling past 256
    assert latency.cold_p50(100) < latency.cold_p50(101)


def test_same_seed_same_samples_and_no_state() -> None:
    a = [latency.sample_cold(32, random.Random(7)) for _ in range(3)]
    assert a[0] == a[1] == a[2]
    seq1 = [latency.sample_fork(r) for r in [random.Random(3)] for _ in range(5)]
    seq2 = [latency.sample_fork(r) for r in [random.Random(3)] for _ in range(5)]
    assert seq1 == seq2


def test_fork_warm_and_overload_figures() -> None:
    rng = random.Random(2)
    forks = [latency.sample_fork(rng) for _ in range(2000)]
    assert abs(statistics.median(forks) - 0.66) <= 0.066
    assert latency.warm_p50(8) == 0.5
    assert latency.warm_p50(128) == pytest.approx(4.4)
    assert latency.warm_p50(256) == pytest.approx(7.3)
    assert latency.overload_fail_rate(256) == 0.0
    assert latency.overload_fail_rate(257) == 0.01
