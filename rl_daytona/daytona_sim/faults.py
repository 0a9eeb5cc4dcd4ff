"""Fault hooks of daytona-sim: which creates fail or hang, which sandboxes are broken, and the
creation rate limit. Issue 7's fault-injection tests drive the server through these.

Invariant: every decision draws from the server's one seeded `random.Random`, so a run with the
same seed and the same order of requests makes the same decisions; the rate limiter counts
creates admitted in the last 60 seconds (sliding window) and never admits more than its limit.
"""

from __future__ import annotations

import collections
import math
import random
from dataclasses import dataclass

from rl_daytona.daytona_sim import latency

OK, FAIL, HANG = "ok", "fail", "hang"
FAIL_REASON = "daytona-sim: injected create failure (runner could not start the sandbox)"
OVERLOAD_REASON = "daytona-sim: create failed under load (more than 256 creates in flight)"


def create_outcome(rng: random.Random, fail_rate: float, hang_rate: float,
                   in_flight: int) -> tuple[str, str | None]:
    """(outcome, error reason) for one create with `in_flight` creates in flight (itself included)."""
    draw = rng.random()
    if draw < fail_rate:
        return FAIL, FAIL_REASON
    if draw < fail_rate + hang_rate:
        return HANG, None
    if rng.random() < latency.overload_fail_rate(in_flight):
        return FAIL, OVERLOAD_REASON
    return OK, None


def is_broken(rng: random.Random, probe_fail_rate: float) -> bool:
    """Whether a newly started sandbox fails every command (a failed liveness probe)."""
    return rng.random() < probe_fail_rate


@dataclass(frozen=True)
class Throttled:
    """A refused create: what the 429 reply says."""

    limit: int
    retry_after: float

    def headers(self) -> dict[str, str]:
        """Standard headers plus Daytona's (NestJS throttler) per-throttler names."""
        reset = str(max(1, math.ceil(self.retry_after)))
        base = {"Retry-After": reset, "X-RateLimit-Limit": str(self.limit),
                "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": reset}
        named = {f"{k}-sandbox-create": v for k, v in base.items()}
        return {**base, **named}


class RateLimiter:
    """At most `per_minute` admissions in any 60 s window (None: unlimited)."""

    WINDOW = 60.0

    def __init__(self, per_minute: int | None) -> None:
        if per_minute is not None and per_minute < 1:
            raise ValueError(f"rate limit must be at least 1 create per minute, got {per_minute}")
        self.per_minute = per_minute
        self._admitted: collections.deque[float] = collections.deque()

    def admit(self, now: float) -> Throttled | None:
        """Record one create at `now` (monotonic seconds); a `Throttled` if over the limit."""
        if self.per_minute is None:
            return None
        while self._admitted and self._admitted[0] <= now - self.WINDOW:
            self._admitted.popleft()
        if len(self._admitted) >= self.per_minute:
            return Throttled(self.per_minute, self._admitted[0] + self.WINDOW - now)
        self._admitted.append(now)
        return None

    def remaining(self, now: float) -> int | None:
        """Creates still allowed in the current window (None: unlimited)."""
        if self.per_minute is None:
            return None
        return self.per_minute - sum(1 for t in self._admitted if t > now - self.WINDOW)
