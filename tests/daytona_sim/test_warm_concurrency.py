"""Warm-pool claims count as creates in flight (issue 6's fix): the latency model's warm figures
(0.5 s at 8, 4.4 s at 128, 7.3 s at 256 wide) are by claims at once, so 256 claims together
must not each be drawn at the 1-wide figure."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rl_daytona.daytona_sim.catalog import DEFAULT_SNAPSHOT
from tests.daytona_sim.conftest import run, sim_and_client


def test_warm_claims_in_flight_raise_the_concurrency_and_come_down_when_started(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_and_client(tmp_path) as (sim, client):
            pool = await client.warm_pool.create(DEFAULT_SNAPSHOT, 6)
            while [p.current_size for p in await client.warm_pool.list() if p.id == pool.id] != [6]:
                await asyncio.sleep(0.05)
            engine = sim.engine
            claimed = [engine.create({"snapshot": DEFAULT_SNAPSHOT, "labels": {"i": str(i)}}) for i in range(6)]
            assert sim.stats().served_from_warm == 6 and engine._in_flight == 6
            while any(r.state != "started" for r in claimed):
                await asyncio.sleep(0.02)
            assert engine._in_flight == 0
            await client.warm_pool.delete(pool.id)

    run(go())
