"""Sandbox-creation limits shared by every process of a run: creates per minute, creates in flight.

Invariant: the limiter grants at most `per_minute` creates in any 60 s window (a sliding window,
the way Daytona counts), handing out reservations in order and MARGIN seconds wide of the
window's edge, so no grant it makes can be answered with 429 by a server counting the same way. Under Ray, one named actor per run holds
the window (`rl-daytona-limits-<run>`), so the pool, a restarted pool and any other creator
share it; without Ray the window lives in the process.
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any, Protocol

WINDOW = 60.0
MARGIN = 0.25  # seconds past the window: the server's clock and the request's latency are not ours
SPAN = WINDOW + MARGIN


class SlidingWindow:
    """Reservations of create slots: at most `per_minute` in any WINDOW seconds."""

    def __init__(self, per_minute: int) -> None:
        if per_minute < 1:
            raise ValueError(f"creates per minute must be at least 1, got {per_minute}")
        self.per_minute = per_minute
        self._grants: collections.deque[float] = collections.deque()

    def reserve(self, now: float) -> float:
        """The time (>= now) at which the next create may be sent; records it."""
        while self._grants and self._grants[0] <= now - SPAN:
            self._grants.popleft()
        at = now
        if len(self._grants) >= self.per_minute:
            at = max(now, self._grants[-self.per_minute] + SPAN)
        self._grants.append(at)
        return at


class CreateGate(Protocol):
    async def acquire(self) -> float:
        """Wait for a create slot; returns the seconds waited."""
        ...


class LocalGate:
    """The window in this process (tests, or a driver without Ray)."""

    def __init__(self, per_minute: int) -> None:
        self._window = SlidingWindow(per_minute)

    async def acquire(self) -> float:
        now = time.monotonic()
        delay = self._window.reserve(now) - now
        if delay > 0:
            await asyncio.sleep(delay)
        return max(delay, 0.0)


class WindowActor:
    """The body of the per-run named actor: hands out reservation delays."""

    def __init__(self, per_minute: int) -> None:
        self._window = SlidingWindow(per_minute)

    def delay(self) -> float:
        now = time.monotonic()
        return self._window.reserve(now) - now


class RayGate:
    """The window in the run's named actor, shared by every process of the run. The actor dies
    with the process that made it (a pool Ray restarts, a test's run): a gate whose actor died
    makes (or finds) the run's window actor again, once per call, instead of failing every create."""

    def __init__(self, run_id: str, per_minute: int) -> None:
        self._name, self._per_minute = f"rl-daytona-limits-{run_id}", per_minute
        self._actor: Any = self._window_actor()

    def _window_actor(self) -> Any:
        import ray

        return ray.remote(WindowActor).options(name=self._name, get_if_exists=True, num_cpus=0,
                                               lifetime=None).remote(self._per_minute)

    async def acquire(self) -> float:
        from ray.exceptions import RayActorError

        try:
            delay = await self._actor.delay.remote()
        except RayActorError:
            self._actor = self._window_actor()
            delay = await self._actor.delay.remote()
        if delay > 0:
            await asyncio.sleep(delay)
        return max(delay, 0.0)


def create_gate(run_id: str, per_minute: int) -> CreateGate:
    """The run's shared gate under Ray, else one in this process."""
    try:
        import ray

        if ray.is_initialized():
            return RayGate(run_id, per_minute)
    except ImportError:  # pragma: no cover - ray is a dependency
        pass
    return LocalGate(per_minute)
