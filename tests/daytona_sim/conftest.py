"""Helpers for daytona-sim tests: a started sim and the real SDK client pointed at it."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, TypeVar

from daytona import AsyncDaytona, DaytonaConfig

from rl_daytona.daytona_sim import DaytonaSim, SimConfig

T = TypeVar("T")
SCALE = 0.02  # every simulated delay x 0.02: a 2.8 s create takes ~0.06 s


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout=240))  # type: ignore[arg-type]


@asynccontextmanager
async def sim_and_client(root: Path, **config: Any) -> AsyncIterator[tuple[DaytonaSim, AsyncDaytona]]:
    """A started DaytonaSim (stopped, sandboxes deleted, on exit) and an AsyncDaytona for it."""
    config.setdefault("time_scale", SCALE)
    sim = DaytonaSim(SimConfig(root=str(root), **config))
    await sim.start()
    try:
        async with AsyncDaytona(DaytonaConfig(api_key=sim.config.api_key, api_url=sim.api_url)) as client:
            yield sim, client
    finally:
        await sim.stop()
