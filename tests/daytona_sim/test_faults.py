"""Fault decisions and the creation rate limiter."""

from __future__ import annotations

import random

import pytest

from rl_daytona.daytona_sim import faults


def test_rate_limiter_admits_the_limit_per_sliding_minute() -> None:
    limiter = faults.RateLimiter(3)
    assert [limiter.admit(t) for t in (0.0, 1.0, 2.0)] == [None, None, None]
    refused = limiter.admit(10.0)
    assert refused is not None and refused.retry_after == pytest.approx(50.0)
    headers = refused.headers()
    assert headers["Retry-After"] == "50" and headers["X-RateLimit-Limit"] == "3"
    assert headers["X-RateLimit-Remaining"] == "0" and headers["X-RateLimit-Reset-sandbox-create"] == "50"
    assert limiter.admit(60.5) is None  # the create at t=0 left the window
    assert limiter.remaining(60.5) == 0
    assert faults.RateLimiter(None).admit(0.0) is None


def test_rate_limiter_rejects_a_nonsense_limit() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        faults.RateLimiter(0)


def test_create_outcome_rates() -> None:
    rng = random.Random(0)
    outcomes = [faults.create_outcome(rng, 0.2, 0.1, 8)[0] for _ in range(5000)]
    assert abs(outcomes.count(faults.FAIL) / 5000 - 0.2) < 0.03
    assert abs(outcomes.count(faults.HANG) / 5000 - 0.1) < 0.03
    assert faults.create_outcome(rng, 1.0, 0.0, 1) == (faults.FAIL, faults.FAIL_REASON)
    assert faults.create_outcome(rng, 0.0, 1.0, 1) == (faults.HANG, None)


def test_overload_failures_past_256() -> None:
    rng = random.Random(1)
    under = [faults.create_outcome(rng, 0.0, 0.0, 256)[0] for _ in range(3000)]
    over = [faults.create_outcome(rng, 0.0, 0.0, 300)[0] for _ in range(20000)]
    assert under.count(faults.FAIL) == 0
    assert 0.005 < over.count(faults.FAIL) / len(over) < 0.015
