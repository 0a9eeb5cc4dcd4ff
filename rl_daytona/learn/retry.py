"""Retrying training calls: failures are absorbed until too many come in a row.

    RetryPolicy(max_consecutive_failures=10, backoff=0.5, max_backoff=8.0)
    Retrier(policy).call(client.forward_backward, chunk, loss_fn)

Invariant: a call is repeated with the same arguments (so the client sends the same
idempotency key and the service applies it once) until it succeeds or
`max_consecutive_failures` attempts in a row have failed; a success resets the count. Then,
or at once for a failure that says it is not worth repeating (a refused request), the last
failure is raised as one line saying how many failed in a row. Every attempt and failure
is counted, so a run can report what it absorbed.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from rl_daytona.learn.clients import TrainingCallError


@dataclass(frozen=True)
class RetryPolicy:
    max_consecutive_failures: int = 10
    backoff: float = 0.5  # seconds before the first retry, doubled for each failure in a row
    max_backoff: float = 8.0

    def __post_init__(self) -> None:
        if self.max_consecutive_failures < 1:
            raise ValueError(f"max_consecutive_failures must be at least 1, got {self.max_consecutive_failures}")
        if self.backoff < 0 or self.max_backoff < 0:
            raise ValueError("retry backoff must be >= 0")

    def delay(self, failures_in_a_row: int) -> float:
        return min(self.backoff * 2 ** (failures_in_a_row - 1), self.max_backoff)


@dataclass(frozen=True)
class CallStats:
    attempts: int = 0  # calls sent, retries included
    failures: int = 0  # attempts that failed (absorbed by a retry, or the last one raised)
    retries: int = 0  # attempts that repeated a failed one

    def minus(self, earlier: "CallStats") -> "CallStats":
        return CallStats(self.attempts - earlier.attempts, self.failures - earlier.failures,
                         self.retries - earlier.retries)


class Retrier:
    """Applies one `RetryPolicy` to a sequence of calls and counts them."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.in_a_row = 0
        self._attempts = self._failures = self._retries = 0

    @property
    def stats(self) -> CallStats:
        return CallStats(self._attempts, self._failures, self._retries)

    async def call(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        first = True
        while True:
            self._attempts += 1
            self._retries += 0 if first else 1
            first = False
            try:
                result = await fn(*args)
            except TrainingCallError as exc:
                self._failures += 1
                self.in_a_row += 1
                if not exc.retryable:
                    raise
                if self.in_a_row >= self.policy.max_consecutive_failures:
                    raise TrainingCallError(f"{exc} ({self.in_a_row} failures in a row, giving up)",
                                            retryable=False) from None
                await asyncio.sleep(self.policy.delay(self.in_a_row))
                continue
            self.in_a_row = 0
            return result
