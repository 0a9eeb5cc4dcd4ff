"""SandboxPool: the one owner of every sandbox of a run (a named async Ray actor).

Invariant: every sandbox the pool creates is handed out to exactly one claimer after passing a
liveness probe, or deleted; `release()` deletes in the background (never on the rollout's
clock); at `shutdown()` nothing carrying the run's label is left. Plain class: the Ray options
are applied in the composition root (`rl_daytona.runtime`), so tests build it without Ray.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import numpy as np

from rl_daytona.backends import Backend, BackendSpec, SandboxHandle, make_backend
from rl_daytona.types import PoolStats


class ClaimTimeoutError(RuntimeError):
    """No ready sandbox could be had before the claim's deadline."""


@dataclass(frozen=True)
class PoolConfig:
    """How far ahead of demand the pool provisions, and how it treats failed creates."""

    warm_size: int = 16
    max_creating: int = 32
    create_retries: int = 3
    retry_backoff: float = 0.25
    claim_timeout: float = 120.0
    probe: bool = True

    def __post_init__(self) -> None:
        if self.warm_size < 0 or self.max_creating < 1 or self.create_retries < 0:
            raise ValueError("pool needs warm_size >= 0, max_creating >= 1 and create_retries >= 0")


class SandboxPool:
    def __init__(self, spec: BackendSpec, run_id: str, config: PoolConfig = PoolConfig(),
                 backend: Backend | None = None) -> None:
        self.spec, self.run_id, self.config = spec, run_id, config
        self.backend = backend or make_backend(spec)
        self._ready: asyncio.Queue[SandboxHandle] = asyncio.Queue()
        self._in_use: dict[str, SandboxHandle] = {}
        self._creating = 0
        self._waiting = 0
        self._demand_left: int | None = None
        self._creates: set[asyncio.Task[None]] = set()
        self._deletes: set[asyncio.Task[None]] = set()
        self._waits: list[float] = []
        self._counts = dict(created=0, forked=0, claimed=0, released=0, failed=0, deleted=0, probe_failed=0)
        self._closed = False

    async def start(self) -> int:
        """Reap sandboxes a previous run with this id left behind; returns how many.

        Provisioning starts with `set_demand` or the first claim, not here."""
        orphans = await self.backend.list_sandboxes(self.run_id)
        await asyncio.gather(*(self._delete(h) for h in orphans))
        return len(orphans)

    async def set_demand(self, claims_expected: int | None) -> None:
        """Tell the pool how many claims are coming, so it provisions ahead and no further."""
        self._demand_left = claims_expected
        self._top_up()

    async def claim(self, timeout: float | None = None) -> SandboxHandle:
        """A live sandbox for one rollout; raises ClaimTimeoutError past the deadline."""
        started = time.monotonic()
        deadline = started + (timeout or self.config.claim_timeout)
        while True:
            handle = await self._next_ready(deadline)
            if not self.config.probe or await self.backend.is_alive(handle):
                break
            self._counts["probe_failed"] += 1
            self._spawn(self._delete(handle), self._deletes)
        self._in_use[handle.sandbox_id] = handle
        self._counts["claimed"] += 1
        self._waits.append(time.monotonic() - started)
        if self._demand_left is not None:
            self._demand_left = max(0, self._demand_left - 1)
        return handle

    async def release(self, handle: SandboxHandle) -> None:
        """Hand a sandbox back; it is deleted in the background."""
        if self._in_use.pop(handle.sandbox_id, None) is not None:
            self._counts["released"] += 1
        self._spawn(self._delete(handle), self._deletes)

    async def fork(self, parent: SandboxHandle) -> SandboxHandle:
        """A copy-on-write child of a claimed sandbox, itself claimed by the caller."""
        child = await self.backend.fork(parent)
        self._counts["forked"] += 1
        self._in_use[child.sandbox_id] = child
        return child

    async def stats(self) -> PoolStats:
        waits = np.asarray(self._waits or [0.0])
        return PoolStats(**self._counts, claim_wait_p50=float(np.percentile(waits, 50)),
                         claim_wait_p95=float(np.percentile(waits, 95)),
                         in_use=len(self._in_use), ready=self._ready.qsize())

    async def shutdown(self) -> PoolStats:
        """Stop provisioning, delete everything of the run, wait for the deletes."""
        self._closed = True
        for task in list(self._creates):
            task.cancel()
        await asyncio.gather(*self._creates, *self._deletes, return_exceptions=True)
        while not self._ready.empty():
            handle = self._ready.get_nowait()
            self._in_use[handle.sandbox_id] = handle
        leftovers = list(self._in_use.values()) + await self.backend.list_sandboxes(self.run_id)
        self._in_use.clear()
        await asyncio.gather(*(self._delete(h) for h in {h.sandbox_id: h for h in leftovers}.values()))
        stats = await self.stats()
        await self.backend.close()
        return stats

    # -- provisioning -------------------------------------------------------------------

    async def _next_ready(self, deadline: float) -> SandboxHandle:
        self._waiting += 1
        try:
            self._top_up()
            remaining = deadline - time.monotonic()
            return await asyncio.wait_for(self._ready.get(), timeout=max(remaining, 0.001))
        except asyncio.TimeoutError:
            raise ClaimTimeoutError(
                f"no sandbox ready within the claim timeout ({self._counts['failed']} creates failed)"
            ) from None
        finally:
            self._waiting -= 1

    def _target(self) -> int:
        wanted = self.config.warm_size + self._waiting
        if self._demand_left is not None:
            wanted = min(wanted, max(self._demand_left, self._waiting))
        return wanted

    def _top_up(self) -> None:
        while (not self._closed and self._creating < self.config.max_creating
               and self._ready.qsize() + self._creating < self._target()):
            self._creating += 1
            self._spawn(self._create(), self._creates)

    async def _create(self) -> None:
        try:
            handle = await self._create_with_retries()
            if handle is not None:
                self._ready.put_nowait(handle)
        finally:
            self._creating -= 1
            self._top_up()

    async def _create_with_retries(self) -> SandboxHandle | None:
        for attempt in range(self.config.create_retries + 1):
            try:
                handle = await self.backend.create(self.run_id, {"rl-daytona-run": self.run_id})
                self._counts["created"] += 1
                return handle
            except Exception:  # noqa: BLE001 - any create failure is retried, then counted
                self._counts["failed"] += 1
                await asyncio.sleep(self.config.retry_backoff * (2 ** attempt))
        return None

    async def _delete(self, handle: SandboxHandle) -> None:
        try:
            await self.backend.delete(handle)
            self._counts["deleted"] += 1
        except Exception:  # noqa: BLE001 - a failed delete is left for the reaper
            pass

    @staticmethod
    def _spawn(coro: object, tasks: set[asyncio.Task[None]]) -> None:
        task = asyncio.ensure_future(coro)  # type: ignore[arg-type]
        tasks.add(task)
        task.add_done_callback(tasks.discard)
