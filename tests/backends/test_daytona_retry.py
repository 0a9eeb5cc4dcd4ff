"""RetryPolicy, classify, retry_after and call_with_retries on the SDK's real exception types."""

from __future__ import annotations

import asyncio
import random
from typing import Awaitable, Callable

import pytest
from daytona import (
    DaytonaAuthenticationError, DaytonaBadRequestError, DaytonaConnectionError, DaytonaError,
    DaytonaForbiddenError, DaytonaInternalServerError, DaytonaRateLimitError, DaytonaTimeoutError,
)

from rl_daytona.backends.base import BackendAuthError
from rl_daytona.backends.daytona_retry import (
    FATAL, RAISE, RETRY, WAIT, RetryPolicy, StartFailedError, call_with_retries, classify, retry_after,
)

QUICK = RetryPolicy(attempts=4, base=0.001, cap=0.002, max_wait=5.0)


@pytest.mark.parametrize("exc,kind", [
    (DaytonaAuthenticationError("bad key", status_code=401), FATAL),
    (DaytonaForbiddenError("no", status_code=403), FATAL),
    (DaytonaError("forbidden", status_code=403), FATAL),
    (DaytonaRateLimitError("slow down", status_code=429), WAIT),
    (DaytonaError("throttled", status_code=429), WAIT),
    (DaytonaInternalServerError("boom", status_code=500), RETRY),
    (DaytonaError("gateway", status_code=503), RETRY),
    (DaytonaError("request timeout", status_code=408), RETRY),
    (DaytonaConnectionError("reset"), RETRY),
    (ConnectionResetError("reset"), RETRY),
    (StartFailedError("sandbox reached error"), RETRY),
    (DaytonaBadRequestError("bad snapshot", status_code=400), RAISE),
    (DaytonaError("conflict", status_code=409), RAISE),
    (DaytonaTimeoutError("create timed out"), RAISE),
    (ValueError("a bug"), RAISE),
])
def test_classify(exc: BaseException, kind: str) -> None:
    assert classify(exc) == kind


@pytest.mark.parametrize("headers,seconds", [
    ({"Retry-After": "7"}, 7.0),
    ({"retry-after": "2.5", "X-RateLimit-Reset": "30"}, 2.5),
    ({"X-RateLimit-Reset": "12"}, 12.0),
    ({"Retry-After-sandbox-create": "30", "Retry-After-default": "1"}, 30.0),
    ({"x-ratelimit-reset-sandbox-create": "9"}, 9.0),
    ({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT", "X-RateLimit-Reset": "4"}, 4.0),
    ({"Retry-After": "-3"}, 0.0),
    ({"Content-Type": "application/json"}, 1.0),
    (None, 1.0),
])
def test_retry_after_honours_the_headers(headers: dict[str, str] | None, seconds: float) -> None:
    assert retry_after(headers) == seconds


def test_backoff_is_full_jitter_under_the_cap() -> None:
    policy, rng = RetryPolicy(base=0.5, cap=4.0), random.Random(0)
    for attempt in range(8):
        draws = [policy.backoff(attempt, rng) for _ in range(50)]
        assert 0.0 <= min(draws) and max(draws) <= min(4.0, 0.5 * 2 ** attempt)


def test_policy_rejects_nonsense() -> None:
    for bad in (dict(attempts=0), dict(base=0.0), dict(base=2.0, cap=1.0)):
        with pytest.raises(ValueError):
            RetryPolicy(**bad)  # type: ignore[arg-type]


def _failing(errors: list[BaseException]) -> tuple[list[int], Callable[[], Awaitable[str]]]:
    calls: list[int] = []

    async def call() -> str:
        calls.append(1)
        if errors:
            raise errors.pop(0)
        return "ok"
    return calls, call


def test_transient_errors_are_retried_until_success() -> None:
    calls, call = _failing([DaytonaError("boom", status_code=502), DaytonaConnectionError("reset")])
    waits: list[float] = []
    assert asyncio.run(call_with_retries(call, "create a sandbox", QUICK, waits.append)) == "ok"
    assert len(calls) == 3 and len(waits) == 2 and all(0 <= w <= QUICK.cap for w in waits)


def test_429_waits_the_servers_retry_after_capped_at_max_wait() -> None:
    throttled = [DaytonaRateLimitError("slow", status_code=429, headers={"Retry-After": "0.05"}),
                 DaytonaRateLimitError("slow", status_code=429, headers={"Retry-After": "60"})]
    calls, call = _failing(throttled)
    waits: list[float] = []
    policy = RetryPolicy(attempts=4, base=0.001, cap=0.002, max_wait=0.1)
    asyncio.run(call_with_retries(call, "create a sandbox", policy, waits.append))
    assert waits == [0.05, 0.1] and len(calls) == 3


def test_a_rejected_credential_is_tried_once_and_becomes_one_line() -> None:
    calls, call = _failing([DaytonaAuthenticationError("Unauthorized: invalid API key", status_code=401)])
    with pytest.raises(BackendAuthError) as caught:
        asyncio.run(call_with_retries(call, "create a sandbox", QUICK))
    assert len(calls) == 1 and "\n" not in str(caught.value) and "HTTP 401" in str(caught.value)


def test_a_wrong_request_is_raised_at_once_and_retries_are_bounded() -> None:
    calls, call = _failing([DaytonaBadRequestError("no such snapshot", status_code=400)])
    with pytest.raises(DaytonaBadRequestError):
        asyncio.run(call_with_retries(call, "create a sandbox", QUICK))
    assert len(calls) == 1
    calls, call = _failing([DaytonaError("down", status_code=503) for _ in range(10)])
    with pytest.raises(DaytonaError, match="down"):
        asyncio.run(call_with_retries(call, "create a sandbox", QUICK))
    assert len(calls) == QUICK.attempts
