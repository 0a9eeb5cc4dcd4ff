"""SandboxPool: the one owner of every sandbox of a run (a named async Ray actor).

Invariant: every sandbox the pool creates is handed out to exactly one claimer after passing a
liveness probe, or deleted; `release()` deletes in the background (never on the rollout's
clock); at `shutdown()` nothing carrying the run's label is left. Every sandbox id is appended
to the ledger (`PoolConfig.ledger`, e.g. RUNDIR/sandboxes.jsonl) when it is created, forked or
deleted, so cleanup can be audited. When the backend's first sandbox says children can be forked
(a Daytona VM snapshot), a sandbox waiting unclaimed in the ready queue is a parent: it forks one
child at a time (taken out of the queue meanwhile) and every child is a parent in turn, so the
supply grows as a tree; otherwise, and when no parent is idle, sandboxes are created cold.
Plain class: the Ray options are applied in the composition root (`rl_daytona.runtime`), so
tests build it without Ray.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rl_daytona.backends import Backend, BackendAuthError, BackendSpec, SandboxHandle, make_backend
from rl_daytona.backends.provision import make_provisioner
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
    ledger: str = ""  # append-only JSON lines of sandbox ids (created / forked / deleted); "" = none

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
        self.provisioner = make_provisioner(self.backend)
        self._first: asyncio.Future[None] | None = None
        self._provider: dict[str, Any] = {}
        self._fatal: BackendAuthError | None = None  # rejected credentials: no create is tried again
        self._fatal_set = asyncio.Event()
        self._claimer_of: dict[str, str] = {}  # sandbox id -> the RolloutActor that claimed it
        self._lost_claimers: set[str] = set()  # reclaimed: a claim of theirs still waiting is refused
        self._started: asyncio.Future[int] | None = None  # start()'s reap (a restarted pool runs it lazily)
        self._counts.update(reclaimed=0, reaped=0)
        self._parents_out = 0  # ready sandboxes taken out of the queue while they fork a child
        self._probing = 0  # sandboxes taken by a claim, being probed

    async def start(self) -> int:
        """Reap sandboxes a previous run with this id left behind; returns how many.

        Provisioning starts with `set_demand` or the first claim, not here. A pool whose start
        was never awaited (a restarted actor: Ray re-runs only the constructor) runs it before
        its first claim, so the sandboxes its dead predecessor held are deleted by label."""
        if self._started is None:
            self._started = asyncio.ensure_future(self._reap_orphans())
        return await asyncio.shield(self._started)

    async def _reap_orphans(self) -> int:
        """Delete the run's sandboxes no rollout holds; a restarted pool adopts those its ledger
        says are claimed and not yet released (their rollouts release them here as usual)."""
        await self.provisioner.start()
        held = self._held_per_ledger()
        listed = await self.backend.list_sandboxes(self.run_id)
        orphans = [h for h in listed if h.sandbox_id not in held]
        for h in listed:
            if h.sandbox_id in held:
                self._in_use[h.sandbox_id] = h
                self._claimer_of[h.sandbox_id] = held[h.sandbox_id]
        await asyncio.gather(*(self._delete(h) for h in orphans))
        self._counts["reaped"] += len(orphans)
        return len(orphans)

    def _held_per_ledger(self) -> dict[str, str]:
        """Sandbox id -> claimer, for this run's sandboxes whose last ledger event is a claim."""
        path = Path(self.config.ledger) if self.config.ledger else None
        if path is None or not path.exists():
            return {}
        last: dict[str, dict[str, Any]] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                event = json.loads(line)
            except ValueError:  # a line cut short by the death
                continue
            if event.get("run_id") == self.run_id:
                last[event["sandbox_id"]] = event
        return {sid: e.get("claimer", "") for sid, e in last.items() if e["event"] == "claimed"}

    async def _start_once(self) -> None:
        try:
            await self.start()
        except BackendAuthError:
            raise
        except Exception:  # noqa: BLE001 - a failed reap leaves orphans to shutdown's sweep by label
            pass

    async def set_demand(self, claims_expected: int | None) -> None:
        """Tell the pool how many claims are coming, so it provisions ahead and no further."""
        await self._start_once()
        self._demand_left = claims_expected
        await self.provisioner.size_for(claims_expected or 0)
        self._top_up()

    async def claim(self, timeout: float | None = None, claimer: str = "") -> SandboxHandle:
        """A live sandbox for one rollout; raises ClaimTimeoutError past the deadline. `claimer`
        (a RolloutActor's name) is remembered, so `reclaim(claimer)` can delete what it held."""
        await self._start_once()
        started = time.monotonic()
        deadline = started + (timeout or self.config.claim_timeout)
        while True:
            handle = await self._next_ready(deadline)  # counted in _probing from the moment it is taken
            try:
                alive = not self.config.probe or await self.backend.is_alive(handle)
            finally:
                self._probing -= 1
            if alive:
                break
            self._counts["probe_failed"] += 1
            self._log("probe_failed", handle)
            self._spawn(self._delete(handle), self._deletes)
            self._top_up()
        if claimer and claimer in self._lost_claimers:  # reclaimed while this claim waited
            self._spawn(self._delete(handle), self._deletes)
            raise ClaimTimeoutError(f"claimer {claimer} was reclaimed (lost) while its claim waited")
        if claimer:
            self._claimer_of[handle.sandbox_id] = claimer
        self._log("claimed", handle, claimer=claimer)
        self._in_use[handle.sandbox_id] = handle
        self._counts["claimed"] += 1
        self._waits.append(time.monotonic() - started)
        if self._demand_left is not None:
            self._demand_left = max(0, self._demand_left - 1)
        return handle

    async def release(self, handle: SandboxHandle) -> None:
        """Hand a sandbox back; it is deleted in the background."""
        self._claimer_of.pop(handle.sandbox_id, None)
        self._log("released", handle)
        if self._in_use.pop(handle.sandbox_id, None) is not None:
            self._counts["released"] += 1
        self._spawn(self._delete(handle), self._deletes)

    async def reclaim(self, claimer: str) -> int:
        """`claimer` is gone (its releases will never come): delete every sandbox it holds now,
        not at shutdown, and refuse its claims still waiting. Returns how many were reclaimed."""
        self._lost_claimers.add(claimer)
        ids = [sid for sid, who in self._claimer_of.items() if who == claimer]
        for sid in ids:
            del self._claimer_of[sid]
            handle = self._in_use.pop(sid, None)
            if handle is not None:
                self._counts["reclaimed"] += 1
                self._log("reclaimed", handle)
                self._spawn(self._delete(handle), self._deletes)
        return len(ids)

    async def fork(self, parent: SandboxHandle) -> SandboxHandle:
        """A copy-on-write child of a claimed sandbox, itself claimed by the caller."""
        child = await self.backend.fork(parent)
        self._counts["forked"] += 1
        self._log("forked", child)
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
        leftovers = list(self._in_use.values()) + await self._listed_leftovers()
        self._in_use.clear()
        await asyncio.gather(*(self._delete(h) for h in {h.sandbox_id: h for h in leftovers}.values()))
        self._provider.update(await self.provisioner.close())
        stats = await self.stats()
        await self.backend.close()
        return stats

    async def _listed_leftovers(self) -> list[SandboxHandle]:
        """The run's sandboxes the backend still lists (none when it cannot list: the key was
        rejected, so nothing was created with it; `rl-daytona reap` finds anything else)."""
        try:
            return await self.backend.list_sandboxes(self.run_id)
        except Exception as exc:  # noqa: BLE001 - shutdown must still delete what it knows of
            self._provider["shutdown_listing_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            return []

    async def provider(self) -> dict[str, Any]:
        """What the provisioner learned and did (region, class, forking, warm pool events)."""
        return dict(self._provider)

    # -- provisioning -------------------------------------------------------------------

    async def _next_ready(self, deadline: float) -> SandboxHandle:
        self._waiting += 1
        try:
            self._top_up()
            return await self._ready_or_fatal(max(deadline - time.monotonic(), 0.001))
        finally:
            self._waiting -= 1

    async def _ready_or_fatal(self, timeout: float) -> SandboxHandle:
        """The next ready sandbox; a credentials error ends every wait at once, not at its deadline."""
        if self._fatal is not None:
            raise self._fatal
        getter = asyncio.ensure_future(self._take())
        fatal = asyncio.ensure_future(self._fatal_set.wait())
        try:
            await asyncio.wait({getter, fatal}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            fatal.cancel()
            if not getter.done():
                getter.cancel()
        if getter.done() and not getter.cancelled():
            return getter.result()
        if self._fatal is not None:
            raise self._fatal
        raise ClaimTimeoutError(f"no sandbox ready within the claim timeout ({self._counts['failed']} creates failed)")

    async def _take(self) -> SandboxHandle:
        handle = await self._ready.get()
        self._probing += 1  # still counted as supply until claimed, so nothing is made twice
        return handle

    def _target(self) -> int:
        wanted = self.config.warm_size + self._waiting
        if self._demand_left is not None:
            wanted = min(wanted, max(self._demand_left, self._waiting))
        return wanted

    def _top_up(self) -> None:
        while (not self._closed and self._fatal is None and self._creating < self.config.max_creating
               and self._ready.qsize() + self._parents_out + self._probing + self._creating < self._target()):
            self._creating += 1
            self._spawn(self._create(), self._creates)

    async def _create(self) -> None:
        try:
            handle = await self._fork_idle_parent() if self.provisioner.forkable else None
            handle = handle or await self._create_with_retries()
            if handle is not None:
                self._ready.put_nowait(handle)
        finally:
            self._creating -= 1
            self._top_up()

    async def _fork_idle_parent(self) -> SandboxHandle | None:
        """A child of a sandbox waiting unclaimed (out of the queue while it forks), or None."""
        if self._ready.empty():
            return None
        parent = self._ready.get_nowait()
        self._parents_out += 1
        try:
            child = await self.backend.fork(parent)
        except Exception:  # noqa: BLE001 - a failed fork falls back to a cold create
            self._counts["failed"] += 1
            return None
        finally:
            self._parents_out -= 1
            self._ready.put_nowait(parent)
        self._counts["forked"] += 1
        self._log("forked", child)
        return child

    async def _create_with_retries(self) -> SandboxHandle | None:
        labels = {"rl-daytona-run": self.run_id, "rl-daytona-created": str(int(time.time()))}
        for attempt in range(self.config.create_retries + 1):
            try:
                handle = await self.backend.create(self.run_id, labels)
            except BackendAuthError as exc:
                self._counts["failed"] += 1
                self._fatal = exc
                self._fatal_set.set()
                return None
            except Exception:  # noqa: BLE001 - any create failure is retried, then counted
                self._counts["failed"] += 1
                await asyncio.sleep(self.config.retry_backoff * (2 ** attempt))
                continue
            self._counts["created"] += 1
            self._log("created", handle)
            await self._learn(handle)
            return handle
        return None

    async def _learn(self, handle: SandboxHandle) -> None:
        try:
            await self.provisioner.learn(handle)
        except Exception:  # noqa: BLE001 - a warm pool is an optimisation; cold creates go on
            pass

    async def _delete(self, handle: SandboxHandle) -> None:
        try:
            await self.backend.delete(handle)
            self._counts["deleted"] += 1
            self._log("deleted", handle)
        except Exception:  # noqa: BLE001 - a failed delete is left for the reaper
            pass

    def _log(self, event: str, handle: SandboxHandle, **extra: str) -> None:
        """Append one line to the ledger (sandbox ids and claimer names only: no secret ever
        passes here). A restarted pool reads it back to tell claimed sandboxes from orphans."""
        if not self.config.ledger:
            return
        line = {"t": round(time.time(), 3), "event": event, "sandbox_id": handle.sandbox_id,
                "parent_id": handle.parent_id, "run_id": self.run_id, **extra}
        with Path(self.config.ledger).open("a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")

    @staticmethod
    def _spawn(coro: object, tasks: set[asyncio.Task[None]]) -> None:
        task = asyncio.ensure_future(coro)  # type: ignore[arg-type]
        tasks.add(task)
        task.add_done_callback(tasks.discard)
