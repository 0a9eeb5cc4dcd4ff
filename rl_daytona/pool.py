"""SandboxPool: the one owner of every sandbox of a run (a named async Ray actor).

Invariant: every sandbox the pool creates is handed out to exactly one claimer after passing a
liveness probe, or deleted; `release()` deletes in the background (never on the rollout's
clock); at `shutdown()` nothing carrying the run's label is left. Every sandbox id is appended
to the ledger (`PoolConfig.ledger`, e.g. RUNDIR/sandboxes.jsonl) when it is created, forked or
deleted, so cleanup can be audited.

What to make and whom to serve is the `Planner`'s decision (`rl_daytona.planner`), taken again
after every event (a claim, a create or fork ending): idle sandboxes go to waiting claimers
first; when the backend's first sandbox says children can be forked (a Daytona VM snapshot),
idle sandboxes the wave still needs as parents fork one child at a time (children fork in
turn, so supply grows as a tree) while cold creates seed it; a cold create past its p95 gets a
twin, and a sandbox nobody will claim (the loser of a twin race) is deleted. With
`set_demand(n, next_wave=m)` the next wave is provisioned once the current one is covered.
The making itself (creates, forks, the probe each new sandbox gets as it arrives, deletes) is
the pool's `Stock` (`rl_daytona.stock`); a sandbox probed on arrival less than
`reprobe_after` seconds ago is handed out without a second probe. Plain class: the Ray
options are applied in the composition root (`rl_daytona.runtime`), so tests build it without Ray.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

from rl_daytona.backends import Backend, BackendAuthError, BackendSpec, SandboxHandle, make_backend
from rl_daytona.backends.provision import make_provisioner
from rl_daytona.planner import Planner
from rl_daytona.pool_config import PoolConfig
from rl_daytona.stock import Stock
from rl_daytona.types import PoolStats


class ClaimTimeoutError(RuntimeError):
    """No ready sandbox could be had before the claim's deadline."""


class SandboxPool:
    def __init__(self, spec: BackendSpec, run_id: str, config: PoolConfig = PoolConfig(),
                 backend: Backend | None = None) -> None:
        self.spec, self.run_id, self.config = spec, run_id, config
        self.backend = backend or make_backend(spec)
        self.planner = Planner(config.planner)
        self.provisioner = make_provisioner(self.backend)
        self._counts = dict(created=0, forked=0, claimed=0, released=0, failed=0, deleted=0, probe_failed=0,
                            hedged=0, discarded=0)
        self.stock = Stock(self.backend, run_id, config, self.planner.latency, self._counts, self._log,
                           self._learn, self._pump_soon)
        self._waiters: deque[asyncio.Future[SandboxHandle]] = deque()
        self._in_use: dict[str, SandboxHandle] = {}
        self._probing = 0  # handed to a claim, being probed: still supply until claimed
        self._demand_left: int | None = None
        self._next_wave = 0
        self._waits: list[float] = []
        self._pump_due = False
        self._provider: dict[str, Any] = {}
        self._claimer_of: dict[str, str] = {}  # sandbox id -> the RolloutActor that claimed it
        self._lost_claimers: set[str] = set()  # reclaimed: a claim of theirs still waiting is refused
        self._started: asyncio.Future[int] | None = None  # start()'s reap (a restarted pool runs it lazily)
        self._counts.update(reclaimed=0, reaped=0)

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
        await asyncio.gather(*(self.stock.delete(h) for h in orphans))
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

    async def set_demand(self, claims_expected: int | None, next_wave: int = 0) -> None:
        """Tell the pool how many claims are coming (None: unknown), so it provisions ahead and no
        further; `next_wave` claims follow them, provisioned once these are covered."""
        await self._start_once()
        self._demand_left, self._next_wave = claims_expected, max(0, next_wave)
        await self.provisioner.size_for((claims_expected or 0) + self._next_wave)
        self._pump()

    async def claim(self, timeout: float | None = None, claimer: str = "") -> SandboxHandle:
        """A live sandbox for one rollout; raises ClaimTimeoutError past the deadline. `claimer`
        (a RolloutActor's name) is remembered, so `reclaim(claimer)` can delete what it held."""
        await self._start_once()
        started = self._now()
        deadline = started + (timeout or self.config.claim_timeout)
        while True:
            handle = await self._next_ready(deadline)  # counted in _probing from the moment it is handed
            try:
                alive = not self.config.probe or self.stock.fresh(handle) or await self.backend.is_alive(handle)
            except BaseException:
                self._probing -= 1
                self.stock.delete_later(handle)
                raise
            self._probing -= 1
            if alive:
                break
            self._counts["probe_failed"] += 1
            self._log("probe_failed", handle)
            self.stock.delete_later(handle)
        if claimer and claimer in self._lost_claimers:  # reclaimed while this claim waited
            self.stock.delete_later(handle)
            raise ClaimTimeoutError(f"claimer {claimer} was reclaimed (lost) while its claim waited")
        if claimer:
            self._claimer_of[handle.sandbox_id] = claimer
        self._log("claimed", handle, claimer=claimer)
        self._in_use[handle.sandbox_id] = handle
        self._counts["claimed"] += 1
        self._waits.append(self._now() - started)
        if self._demand_left is not None:
            self._demand_left = max(0, self._demand_left - 1)
        self._pump_soon()
        return handle

    async def release(self, handle: SandboxHandle) -> None:
        """Hand a sandbox back; it is deleted in the background."""
        self._claimer_of.pop(handle.sandbox_id, None)
        self._log("released", handle)
        if self._in_use.pop(handle.sandbox_id, None) is not None:
            self._counts["released"] += 1
        self.stock.delete_later(handle)

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
                self.stock.delete_later(handle)
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
                         in_use=len(self._in_use), ready=len(self.stock.idle))

    async def drain(self) -> None:
        """Wait until no create, fork, probe or delete is running (what is idle stays)."""
        while self.stock.tasks or self.stock.deletes:
            await asyncio.gather(*self.stock.tasks, *self.stock.deletes, return_exceptions=True)

    async def shutdown(self) -> PoolStats:
        """Stop provisioning, delete everything of the run, wait for the deletes."""
        for handle in await self.stock.close():
            self._in_use[handle.sandbox_id] = handle
        leftovers = list(self._in_use.values()) + await self._listed_leftovers()
        self._in_use.clear()
        await asyncio.gather(*(self.stock.delete(h) for h in {h.sandbox_id: h for h in leftovers}.values()))
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

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

    async def _next_ready(self, deadline: float) -> SandboxHandle:
        """The next sandbox the planner hands out; a credentials error ends every wait at once."""
        if self.stock.fatal is not None:
            raise self.stock.fatal
        waiter: asyncio.Future[SandboxHandle] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._pump_soon()  # claims arriving together are planned together
        fatal = asyncio.ensure_future(self.stock.fatal_set.wait())
        try:
            await asyncio.wait({waiter, fatal}, timeout=max(deadline - self._now(), 0.001),
                               return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            self._withdraw(waiter)
            raise
        finally:
            fatal.cancel()
        if waiter.done():
            return waiter.result()
        self._withdraw(waiter)
        if self.stock.fatal is not None:
            raise self.stock.fatal
        last = f"; last: {self.stock.last_error}" if self.stock.last_error else ""
        raise ClaimTimeoutError(f"no sandbox ready within the claim timeout ({self._counts['failed']} creates failed{last})")

    def _withdraw(self, waiter: asyncio.Future[SandboxHandle]) -> None:
        """A claim gave up: a sandbox already handed to it goes back to the idle ones."""
        if waiter.done() and not waiter.cancelled():
            self._probing -= 1
            self.stock.put_back(waiter.result())
        waiter.cancel()
        self._pump_soon()

    def _target(self) -> int:
        """Sandboxes wanted now, the ones being probed for a claim included."""
        claims = sum(1 for w in self._waiters if not w.done()) + self._probing
        wanted = self.config.warm_size + claims
        if self._demand_left is not None:
            wanted = min(wanted, max(self._demand_left, claims))
        return wanted

    def _forkable(self) -> bool:
        return self.config.forking == "always" or (self.config.forking == "auto" and self.provisioner.forkable)

    def _pump_soon(self) -> None:
        if not self._pump_due:
            self._pump_due = True
            asyncio.get_running_loop().call_soon(self._pump)

    def _pump(self) -> None:
        """Ask the planner what to do now; the stock does it, the sandboxes it hands out go to claims."""
        self._pump_due = False
        if self.stock.closed or self.stock.fatal is not None:
            return
        self._waiters = deque(w for w in self._waiters if not w.done())
        next_wave = self._next_wave if self._demand_left is not None else 0
        keep = self._demand_left + next_wave if self._demand_left is not None else None  # claims still coming
        supply = self.stock.supply(self._target(), len(self._waiters), self._probing, self._forkable(), next_wave, keep)
        for handle in self.stock.carry_out(self.planner.plan(supply, self._now())):
            self._probing += 1
            self._waiters.popleft().set_result(handle)

    async def _learn(self, handle: SandboxHandle) -> None:
        try:
            await self.provisioner.learn(handle)
        except Exception:  # noqa: BLE001 - a warm pool is an optimisation; cold creates go on
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
