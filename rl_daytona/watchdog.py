"""Watchdog: says out loud which rollouts are keeping the run waiting.

Invariant: every rollout still running past `warn_fraction` of its deadline is reported exactly
once (one log line, counted in `counts["stragglers"]`); when only the last few rollouts are left
in flight (at most `tail_size`) and nothing new has started for `tail_seconds`, that wait is
reported once per episode (one line naming them, counted in `counts["tail_waits"]`). It only
reports: bounding the waits is the dispatcher's job (`RolloutFleet` bounds every rollout it
awaits). `check(now)` is pure bookkeeping, so tests drive it with a fake clock; `run()` calls it
on a timer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Callable

log = logging.getLogger("rl_daytona.watchdog")


@dataclass(frozen=True)
class WatchdogConfig:
    """When a rollout counts as a straggler, and when the run counts as waiting on its tail."""

    deadline: float  # the rollout deadline (seconds); <= 0: the watchdog is off
    warn_fraction: float = 0.8
    tail_size: int = 3
    tail_seconds: float = 0.0  # 0: a quarter of the deadline

    def __post_init__(self) -> None:
        if not 0.0 < self.warn_fraction <= 1.0:
            raise ValueError(f"warn_fraction must be in (0, 1], got {self.warn_fraction}")
        if self.tail_size < 1 or self.tail_seconds < 0:
            raise ValueError("the watchdog needs tail_size >= 1 and tail_seconds >= 0")

    @property
    def tail_wait(self) -> float:
        return self.tail_seconds or self.deadline / 4

    @property
    def interval(self) -> float:
        """How often `run` checks: fine enough to report within a tenth of the deadline."""
        return max(0.05, min(5.0, self.deadline / 20, self.tail_wait / 4))


class Watchdog:
    def __init__(self, config: WatchdogConfig, report: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config, self._report, self._clock = config, report or log.warning, clock
        self._running: dict[str, float] = {}  # rollout id -> started at
        self._warned: set[str] = set()
        self._last_start = clock()
        self._tail_reported = False
        self.counts = {"stragglers": 0, "tail_waits": 0}

    def started(self, rollout_id: str) -> None:
        now = self._clock()
        self._running[rollout_id] = now
        self._last_start = now
        self._tail_reported = False

    def finished(self, rollout_id: str) -> None:
        self._running.pop(rollout_id, None)
        self._warned.discard(rollout_id)

    def check(self, now: float | None = None) -> list[str]:
        """Report what is new since the last check; returns the lines reported."""
        if self.config.deadline <= 0:
            return []
        now = self._clock() if now is None else now
        lines = [self._straggler_line(rid, now - t) for rid, t in self._running.items()
                 if rid not in self._warned and now - t >= self.config.warn_fraction * self.config.deadline]
        self._warned |= {rid for rid, t in self._running.items()
                         if now - t >= self.config.warn_fraction * self.config.deadline}
        self.counts["stragglers"] += len(lines)
        if self._waiting_on_tail(now):
            self._tail_reported = True
            self.counts["tail_waits"] += 1
            oldest = now - min(self._running.values())
            lines.append(f"watchdog: waiting on the last {len(self._running)} rollout(s) "
                         f"({', '.join(sorted(self._running))}); the oldest has run {oldest:.1f}s")
        for line in lines:
            self._report(line)
        return lines

    async def run(self) -> None:
        """Check on a timer until cancelled."""
        while self.config.deadline > 0:
            await asyncio.sleep(self.config.interval)
            self.check()

    def _waiting_on_tail(self, now: float) -> bool:
        return (not self._tail_reported and 0 < len(self._running) <= self.config.tail_size
                and now - self._last_start >= self.config.tail_wait)

    def _straggler_line(self, rollout_id: str, ran: float) -> str:
        return (f"watchdog: rollout {rollout_id} has run {ran:.1f}s, past "
                f"{self.config.warn_fraction:.0%} of its {self.config.deadline:g}s deadline")
