"""How the Daytona backend treats a failed API call: retry it, wait it out, or stop the run.

Invariant: an authentication error is never retried (it raises `BackendAuthError`, which ends
the run with one line that never contains the key); HTTP 429 waits what the server's
rate-limit headers say; 5xx, 408, connection errors and a sandbox that never started
(`StartFailedError`) back off exponentially with full jitter; anything else (4xx: the request
itself is wrong) raises at once. Every retry loop is bounded by `RetryPolicy.attempts`.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import Awaitable, Callable, Mapping, TypeVar

from daytona import (
    DaytonaAuthenticationError, DaytonaAuthorizationError, DaytonaConnectionError, DaytonaError,
    DaytonaRateLimitError,
)

from rl_daytona.backends.base import BackendAuthError

T = TypeVar("T")

RETRY, WAIT, FATAL, RAISE = "retry", "wait", "fatal", "raise"


class StartFailedError(Exception):
    """A create the API accepted whose sandbox never started (it was deleted): worth another try."""


def one_line(exc: BaseException, limit: int = 300) -> str:
    """An error as one line of at most `limit` characters."""
    return (" ".join(str(exc).split()) or type(exc).__name__)[:limit]


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded, jittered exponential backoff; 429 waits are capped at `max_wait` seconds."""

    attempts: int = 6
    base: float = 0.5
    cap: float = 20.0
    max_wait: float = 65.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.base <= 0 or self.cap < self.base:
            raise ValueError("RetryPolicy needs attempts >= 1 and 0 < base <= cap")

    def backoff(self, attempt: int, rng: random.Random | None = None) -> float:
        """Full jitter: uniform in [0, min(cap, base * 2**attempt)]."""
        return (rng or random).uniform(0.0, min(self.cap, self.base * (2 ** attempt)))


def classify(exc: BaseException) -> str:
    """RETRY, WAIT (429), FATAL (credentials) or RAISE for one failed call."""
    if isinstance(exc, (DaytonaAuthenticationError, DaytonaAuthorizationError)):
        return FATAL
    if isinstance(exc, DaytonaRateLimitError):
        return WAIT
    if isinstance(exc, (StartFailedError, DaytonaConnectionError, ConnectionError, asyncio.TimeoutError)):
        return RETRY
    if isinstance(exc, DaytonaError):
        status = exc.status_code
        if status == 429:
            return WAIT
        if status in (401, 403):
            return FATAL
        if status is not None and (status >= 500 or status == 408):
            return RETRY
    return RAISE


def retry_after(headers: Mapping[str, object] | None, default: float = 1.0) -> float:
    """Seconds to wait from Retry-After, else X-RateLimit-Reset, else `default`.

    Daytona's throttlers also send per-throttler names (`Retry-After-sandbox-create`); when
    several throttlers answer, the longest wait is the one that lifts them all.
    """
    lowered = {str(k).lower(): v for k, v in (headers or {}).items()}
    for key in ("retry-after", "x-ratelimit-reset"):
        waits = [_seconds(v) for k, v in lowered.items() if k == key or k.startswith(key + "-")]
        found = [w for w in waits if w is not None]
        if found:
            return max(found)
    return default


def _seconds(value: object) -> float | None:
    try:
        return max(0.0, float(str(value)))
    except ValueError:  # an HTTP date, or garbage: fall back to another header or the default
        return None


def auth_error(exc: BaseException, what: str) -> BackendAuthError:
    """The one line a rejected credential becomes (the SDK's message never holds the key)."""
    status = getattr(exc, "status_code", None) or "401"
    return BackendAuthError(f"Daytona rejected the credentials while trying to {what} (HTTP {status}): "
                            "check DAYTONA_API_KEY (and DAYTONA_API_URL / DAYTONA_TARGET)")


async def call_with_retries(call: Callable[[], Awaitable[T]], what: str, policy: RetryPolicy,
                            on_wait: Callable[[float], None] | None = None) -> T:
    """Run `call` under the policy; the last error is re-raised when attempts run out."""
    for attempt in range(policy.attempts):
        try:
            return await call()
        except Exception as exc:  # noqa: BLE001 - classified below, never swallowed
            kind = classify(exc)
            if kind == FATAL:
                raise auth_error(exc, what) from None
            if kind == RAISE or attempt == policy.attempts - 1:
                raise
            delay = (min(policy.max_wait, retry_after(getattr(exc, "headers", None)))
                     if kind == WAIT else policy.backoff(attempt))
            if on_wait is not None:
                on_wait(delay)
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover
