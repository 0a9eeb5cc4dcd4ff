"""The latency model of daytona-sim: how long Daytona takes, replayed from published figures.

Invariant: every function here is pure (no clock, no sleep, no global random state): given
the concurrency and a `random.Random`, it returns seconds at time scale 1. The server
multiplies by `SimConfig.time_scale` and sleeps; issue 6's benchmark can call the same
functions to replay the model without a server.

Figures (the HUD + Daytona walkthrough, see /work/shared/DESIGN.md):
- cold create, time to usable, p50: 2.8 s at 8 concurrent creates, 3.3 s at 32, 5.1 s at
  128, 9.9 s at 256. Between points p50 is linear in log2(concurrency); below 8 it stays at
  2.8 s; above 256 the last segment's slope (+4.8 s per doubling) is extended.
- spread: log-normal around the p50 with sigma = ln(1.4) / 1.645, so p95 = 1.4 x p50, clipped
  to [0.7, 1.5] x p50 (max ~1.5 x p50).
- warm-pool claim: ~0.5 s when few are claiming; the walkthrough's warm-pool runs were 4.4 s at
  128 wide and 7.3 s at 256, so the claim p50 follows (8, 0.5), (128, 4.4), (256, 7.3) the same way.
- fork: 0.66 s (same spread).
- failures: about 1% of creates fail once more than 256 are in flight.
"""

from __future__ import annotations

import bisect
import math
import random

__all__ = ["COLD_P50", "WARM_P50", "FORK_SECONDS", "OVERLOAD_WIDTH", "OVERLOAD_FAIL_RATE",
           "p50_at", "cold_p50", "warm_p50", "spread", "sample_cold", "sample_warm",
           "sample_fork", "overload_fail_rate"]

COLD_P50: tuple[tuple[int, float], ...] = ((8, 2.8), (32, 3.3), (128, 5.1), (256, 9.9))
WARM_P50: tuple[tuple[int, float], ...] = ((8, 0.5), (128, 4.4), (256, 7.3))
FORK_SECONDS = 0.66
OVERLOAD_WIDTH = 256
OVERLOAD_FAIL_RATE = 0.01
SIGMA = math.log(1.4) / 1.645
LOW, HIGH = 0.7, 1.5


def p50_at(points: tuple[tuple[int, float], ...], concurrency: int) -> float:
    """p50 seconds at `concurrency`, linear in log2(concurrency) between `points`."""
    c = max(1, concurrency)
    widths = [w for w, _ in points]
    if c <= widths[0]:
        return points[0][1]
    i = min(bisect.bisect_left(widths, c), len(points) - 1)
    (w0, s0), (w1, s1) = points[i - 1], points[i]
    slope = (s1 - s0) / (math.log2(w1) - math.log2(w0))
    return s0 + slope * (math.log2(c) - math.log2(w0))


def cold_p50(concurrency: int) -> float:
    """Median seconds to a usable sandbox for a cold create with `concurrency` in flight."""
    return p50_at(COLD_P50, concurrency)


def warm_p50(concurrency: int) -> float:
    """Median seconds for a create served from a warm pool with `concurrency` in flight."""
    return p50_at(WARM_P50, concurrency)


def spread(rng: random.Random) -> float:
    """A multiplier around 1.0: log-normal (p95 = 1.4), clipped to [0.7, 1.5]."""
    return min(HIGH, max(LOW, math.exp(rng.gauss(0.0, SIGMA))))


def sample_cold(concurrency: int, rng: random.Random) -> float:
    """One cold create's seconds to usable."""
    return cold_p50(concurrency) * spread(rng)


def sample_warm(concurrency: int, rng: random.Random) -> float:
    """One warm claim's seconds to usable."""
    return warm_p50(concurrency) * spread(rng)


def sample_fork(rng: random.Random) -> float:
    """One fork's seconds until the child is started."""
    return FORK_SECONDS * spread(rng)


def overload_fail_rate(concurrency: int) -> float:
    """Extra failure probability of one create with `concurrency` in flight."""
    return OVERLOAD_FAIL_RATE if concurrency > OVERLOAD_WIDTH else 0.0
