"""Spin-up benchmark: time to usable for N sandboxes, by mode, through the real SandboxPool.

Time to usable, precisely: the clock starts when the benchmark asks for N sandboxes (the
pool's `set_demand(N)` followed at once by N concurrent `claim()`s) and stops, for each
sandbox, when it is usable: made (created, forked or taken from a warm pool), handed out by
the pool, and a command has run in it and answered. On Daytona the claim's liveness probe is
that command (`echo alive`, checked); the local backend's probe is a file check, so the
benchmark runs `echo usable` right after the claim and stops the clock when it returns (those
commands run on this machine's cores, so at most 2 x cores of them run at once: more would
only queue for the same cores and finish together). A
wave's wall time runs from the same start until every one of its sandboxes is released and
deleted; its CPU seconds are what this machine's processes (the benchmark, the daytona-sim
child and every sandbox command) spent meanwhile, so a wave bounded by the cores shows it
(CPU / cores close to the wall time). Anything prepared before the clock starts is named by the mode:

- cold: nothing on hand; cold creates only (no forks, no warm pool);
- warm: a warm pool of N sandboxes filled beforehand (Daytona's warm pool; the pool's own warm
  queue on the local backend), then N claims;
- fork: nothing on hand; at most `FORK_PARENTS` cold creates in flight, every sandbox forks;
- auto: the planner chooses, starting from what a run's pool holds between steps:
  `warm_on_hand` idle sandboxes (default 16, 0: nothing), forks when the backend can, colds.

Invariant: every wave uses a fresh pool that is shut down after it (nothing of the wave is
left), and every claim ends up either in `usable` or counted in `lost`.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from dataclasses import dataclass, replace
from typing import Any

from rl_daytona.bench.targets import Target
from rl_daytona.pool import PoolConfig, SandboxPool

MODES = ("cold", "warm", "fork", "auto")
FORK_PARENTS = 4
CLAIM_TIMEOUT = 600.0


@dataclass(frozen=True)
class WaveResult:
    """One wave of one mode at one width."""

    backend: str
    mode: str
    width: int
    rep: int
    usable: tuple[float, ...]  # seconds to usable, one per delivered sandbox
    lost: int  # claims that ended without a sandbox
    on_hand: int  # idle sandboxes when the clock started
    created: int
    forked: int
    failed: int
    hedged: int
    discarded: int
    wall: float
    cpu: float  # CPU seconds this machine spent on the wave (benchmark, sim and sandboxes; 0 on the model)
    load: float  # the machine's 1-minute load average when the wave ended (other users' work included)
    handed: tuple[float, ...] = ()  # seconds until the pool handed each delivered sandbox out (before its command)


def pool_config(mode: str, width: int, warm_on_hand: int, max_creating: int) -> PoolConfig:
    """The pool each mode runs with (all provision the whole wave once it is requested)."""
    base = PoolConfig(warm_size=width, max_creating=max_creating, claim_timeout=CLAIM_TIMEOUT)
    if mode == "cold":
        return replace(base, forking="never")
    if mode == "fork":
        return replace(base, forking="always", max_creating=min(max_creating, FORK_PARENTS))
    if mode == "auto":
        return replace(base, warm_size=warm_on_hand)
    return replace(base, forking="never")  # warm


async def run_wave(target: Target, mode: str, width: int, rep: int, warm_on_hand: int = 16,
                   max_creating: int = 256) -> WaveResult:
    """Prepare the mode's starting state, then time one wave of `width` sandboxes."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r} (choose from: {', '.join(MODES)})")
    config = pool_config(mode, width, warm_on_hand, max_creating)
    pool = SandboxPool(target.spec(), f"bench-{uuid.uuid4().hex[:8]}", config, backend=target.backend(rep))
    await pool.start()
    try:
        on_hand = await _prepare(pool, target, mode, width, warm_on_hand)
        cpu = target.cpu_seconds() if target.kind != "model" else 0.0
        usable, handed, lost, wall = await _timed_wave(pool, target, width)
        cpu = target.cpu_seconds() - cpu if target.kind != "model" else 0.0
    finally:
        stats = await pool.shutdown()
        if mode == "warm" and target.kind == "daytona-sim":
            await _remove_warm_pools(target)
    return WaveResult(target.kind, mode, width, rep, tuple(sorted(usable)), lost, on_hand, stats.created,
                      stats.forked, stats.failed, stats.hedged, stats.discarded, wall, cpu, os.getloadavg()[0],
                      tuple(sorted(handed)))


async def _prepare(pool: SandboxPool, target: Target, mode: str, width: int, warm_on_hand: int) -> int:
    """The mode's state before the clock starts; returns the idle sandboxes on hand."""
    if mode == "warm" and target.kind == "daytona-sim":
        await _fill_warm_pool(target, width)
        return 0
    if mode == "warm" or (mode == "auto" and warm_on_hand > 0):
        await pool.set_demand(None)  # the warm queue fills to warm_size
        while (await pool.stats()).ready < pool.config.warm_size:
            await asyncio.sleep(0.05)
        await pool.drain()
    return (await pool.stats()).ready


async def _timed_wave(pool: SandboxPool, target: Target, width: int) -> tuple[list[float], list[float], int, float]:
    """(seconds to usable, seconds to handed out, lost, wall) of one wave."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    await pool.set_demand(width)

    commands = asyncio.Semaphore(2 * (os.cpu_count() or 1))

    async def one() -> tuple[Any, float, float]:
        handle = await pool.claim()
        handed = loop.time() - started
        if not target.probe_runs_a_command:
            async with commands:
                result = await pool.backend.exec(handle, "echo usable", timeout=60)
            if result.exit_code != 0 or result.stdout.strip() != "usable":
                return handle, handed, -1.0
        return handle, handed, loop.time() - started

    outcomes = await asyncio.gather(*(one() for _ in range(width)), return_exceptions=True)
    delivered = [o for o in outcomes if not isinstance(o, BaseException)]
    await asyncio.gather(*(pool.release(handle) for handle, _, _ in delivered))
    await pool.set_demand(0)
    await pool.drain()
    wall = loop.time() - started
    usable = [t for _, _, t in delivered if t >= 0]
    handed = [h for _, h, t in delivered if t >= 0]
    return usable, handed, width - len(usable), wall


async def _fill_warm_pool(target: Target, size: int) -> None:
    """A Daytona warm pool of `size` members of the run's snapshot, full before the clock starts.
    (The sim refills one member at a time per refill task; each resize starts one more task,
    so a few resizes fill it in parallel. This is setup, not timed.)"""
    backend: Any = target.backend()
    client = backend.client
    try:
        pool = await client.warm_pool.create(backend.options.snapshot, pool=size)
        await asyncio.gather(*(client.warm_pool.update(pool.id, size) for _ in range(min(size, 64))))
        while True:
            current = [p.current_size for p in await client.warm_pool.list() if p.id == pool.id]
            if current and current[0] >= size:
                return
            await asyncio.sleep(0.5)
    finally:
        await backend.close()


async def _remove_warm_pools(target: Target) -> None:
    backend: Any = target.backend()
    try:
        for pool in await backend.client.warm_pool.list():
            await backend.client.warm_pool.delete(pool.id)
    finally:
        await backend.close()
