"""The pool's stock: sandboxes made and not yet claimed, and the work making more.

Invariant: every sandbox the stock makes (created cold, or forked from an idle parent) is
probed as it arrives, off every claim's clock, and from then on is idle (it may fork meanwhile),
forking, handed out by `carry_out` (only once its probe passed), or deleted (a failed probe, a
surplus the planner discards, shutdown). Each event (a create, fork or probe ending) calls
`on_change`, so the owner plans again. Creates are retried `create_retries` times, then counted
as failed; while creates keep failing so, each new one first waits (doubling, at most
FAILING_BACKOFF_MAX); a rejected credential stops every create (`fatal`). Plain class owned by the
SandboxPool, which decides with the Planner and hands out to its claimers.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any, Callable

from rl_daytona.backends import Backend, BackendAuthError, SandboxHandle
from rl_daytona.planner import CreateWaves, LatencyModel, Plan, Supply
from rl_daytona.pool_config import PoolConfig

FAILING_BACKOFF_MAX = 30.0  # seconds a create waits at most while creates keep failing


class Stock:
    def __init__(self, backend: Backend, run_id: str, config: PoolConfig, latency: LatencyModel,
                 counts: dict[str, int], log: Callable[[str, SandboxHandle], None],
                 learn: Callable[[SandboxHandle], Any], on_change: Callable[[], None]) -> None:
        self.backend, self.run_id, self.config, self.latency = backend, run_id, config, latency
        self._counts, self._log, self._learn, self._on_change = counts, log, learn, on_change
        self.idle: deque[SandboxHandle] = deque()  # ready, unclaimed, not forking
        self._unprobed: set[str] = set()  # idle (they may fork) but not probed yet: never handed out
        self._dead: set[str] = set()  # failed their probe: deleted, never handed out
        self._probed_at: dict[str, float] = {}
        self._forking: dict[str, float] = {}  # parent id -> fork started at
        self._creating = CreateWaves(config.planner.hedge_wave)  # cold creates in flight
        self.tasks: set[asyncio.Task[None]] = set()
        self.deletes: set[asyncio.Task[None]] = set()
        self.closed = False
        self.fatal: BackendAuthError | None = None  # rejected credentials: no create is tried again
        self.failing = 0  # creates in a row that failed every retry (0 once one succeeds)
        self.last_error = ""  # the latest create failure, one line (for a claim that times out)
        self.fatal_set = asyncio.Event()
        self.orphans: dict[str, SandboxHandle] = {}  # made after close: the owner's shutdown deletes them

    @staticmethod
    def now() -> float:
        return asyncio.get_running_loop().time()

    def supply(self, wanted: int, waiting: int, probing: int, forkable: bool, wanted_next: int,
               keep: int | None) -> Supply:
        now = self.now()
        return Supply(wanted=wanted, waiting=waiting, idle=len(self.idle), probing=probing,
                      forks=tuple(now - t for t in self._forking.values()), creates=self._creating.in_flight(now),
                      forkable=forkable, max_creating=self.config.max_creating, wanted_next=wanted_next, keep=keep)

    def carry_out(self, plan: Plan) -> list[SandboxHandle]:
        """Start the plan's deletes, forks, twins and creates; returns the sandboxes to hand out."""
        for _ in range(plan.discard):
            self._counts["discarded"] += 1
            handle = next((h for h in self.idle if h.sandbox_id not in self._unprobed), self.idle[-1])
            self.idle.remove(handle)
            self._unprobed.discard(handle.sandbox_id)
            self.delete_later(handle)
        for _ in range(plan.forks):  # the newest first: they are the ones still being probed
            self._spawn(self._fork_child(self.idle.pop()), self.tasks)
        for key in plan.hedge:
            self._creating.hedge(key)
            self._counts["hedged"] += 1
        now = self.now()
        for _ in range(plan.creates):
            self._spawn(self._create(self._creating.send(now)), self.tasks)
        probed = [h for h in self.idle if h.sandbox_id not in self._unprobed][:plan.hand_out]
        for handle in probed:
            self.idle.remove(handle)
        return probed

    def fresh(self, handle: SandboxHandle) -> bool:
        """Probed on arrival recently enough to be handed out without another probe."""
        probed = self._probed_at.pop(handle.sandbox_id, None)
        return probed is not None and self.now() - probed <= self.config.reprobe_after

    def put_back(self, handle: SandboxHandle) -> None:
        """A sandbox handed out to a claim that gave up before taking it."""
        self.idle.appendleft(handle)

    def delete_later(self, handle: SandboxHandle) -> None:
        self._spawn(self.delete(handle), self.deletes)

    async def delete(self, handle: SandboxHandle) -> None:
        self._probed_at.pop(handle.sandbox_id, None)
        self._dead.discard(handle.sandbox_id)
        try:
            await self.backend.delete(handle)
            self._counts["deleted"] += 1
            self._log("deleted", handle)
        except Exception:  # noqa: BLE001 - a failed delete is left for the reaper
            pass

    async def close(self) -> list[SandboxHandle]:
        """Stop making sandboxes; returns every one still held (idle, or made while closing)."""
        self.closed = True
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, *self.deletes, return_exceptions=True)
        held = list(self.idle) + list(self.orphans.values())
        self.idle.clear()
        self.orphans.clear()
        return held

    # -- arrivals -------------------------------------------------------------------------

    def _arrived(self, handle: SandboxHandle) -> None:
        """A sandbox just made joins the idle ones at once (it may fork) and is probed meanwhile."""
        if self.config.probe:
            self._unprobed.add(handle.sandbox_id)
            self._spawn(self._admit(handle), self.tasks)
        self._supplied(handle)

    async def _admit(self, handle: SandboxHandle) -> None:
        sid = handle.sandbox_id
        try:
            alive = await self.backend.is_alive(handle)
        except Exception:  # noqa: BLE001 - a probe that cannot run is a failed probe
            alive = False
        if sid not in self._unprobed:
            return  # discarded while it was probed
        self._unprobed.discard(sid)
        if alive:
            self._probed_at[sid] = self.now()
        else:
            self._counts["probe_failed"] += 1
            self._log("probe_failed", handle)
            self._dead.add(sid)
            if handle in self.idle:  # a forking parent is deleted when its fork ends
                self.idle.remove(handle)
                self.delete_later(handle)
        self._on_change()

    def _supplied(self, handle: SandboxHandle) -> None:
        """A new sandbox (or a parent back from forking) joins the idle ones."""
        if handle.sandbox_id in self._dead:
            self.delete_later(handle)
        elif self.closed:
            self.orphans[handle.sandbox_id] = handle
        else:
            self.idle.append(handle)
        self._on_change()

    # -- making ---------------------------------------------------------------------------

    async def _create(self, key: int) -> None:
        try:
            made = await self._create_with_retries()
        finally:
            concurrency, _ = self._creating.end(key, self.now())
            self._on_change()
        if made is not None:
            handle, seconds = made  # the attempt that succeeded (retries are not latency)
            self.latency.observe_create(concurrency, seconds)
            self._arrived(handle)

    async def _fork_child(self, parent: SandboxHandle) -> None:
        """One child of an idle parent (out of the idle ones while it forks)."""
        started = self._forking[parent.sandbox_id] = self.now()
        try:
            child = await self.backend.fork(parent)
        except Exception:  # noqa: BLE001 - a failed fork is counted; the planner makes up for it
            self._counts["failed"] += 1
            child = None
        finally:
            del self._forking[parent.sandbox_id]
            self._supplied(parent)
        if child is not None:
            self._counts["forked"] += 1
            self._log("forked", child)
            self.latency.observe_fork(self.now() - started)
            self._arrived(child)

    async def _create_with_retries(self) -> tuple[SandboxHandle, float] | None:
        if self.failing:  # creates keep failing (not credentials): back off before this one too,
            # so a backend that is down is not hit at max_creating creates per retry cycle
            await asyncio.sleep(min(FAILING_BACKOFF_MAX, self.config.retry_backoff * 2 ** min(self.failing, 16)))
        labels = {"rl-daytona-run": self.run_id, "rl-daytona-created": str(int(time.time()))}
        for attempt in range(self.config.create_retries + 1):
            started = self.now()
            try:
                handle = await self.backend.create(self.run_id, labels)
            except BackendAuthError as exc:
                self._counts["failed"] += 1
                self.fatal = exc
                self.fatal_set.set()
                return None
            except Exception as exc:  # noqa: BLE001 - any create failure is retried, then counted
                self._counts["failed"] += 1
                self.last_error = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
                await asyncio.sleep(self.config.retry_backoff * (2 ** attempt))
                continue
            self.failing = 0
            seconds = self.now() - started
            self._counts["created"] += 1
            self._log("created", handle)
            await self._learn(handle)
            return handle, seconds
        self.failing += 1
        return None

    @staticmethod
    def _spawn(coro: object, tasks: set[asyncio.Task[None]]) -> None:
        task = asyncio.ensure_future(coro)  # type: ignore[arg-type]
        tasks.add(task)
        task.add_done_callback(tasks.discard)
