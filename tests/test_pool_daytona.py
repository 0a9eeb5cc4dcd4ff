"""SandboxPool on the Daytona backend (real SDK, real asyncssh) against daytona-sim: fork trees from
a VM snapshot, a warm pool sized to the batch and removed at the end, the ledger, rejected keys."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from rl_daytona.backends import BackendAuthError, BackendSpec, DaytonaOptions
from rl_daytona.backends.daytona import DaytonaBackend
from rl_daytona.daytona_sim.catalog import DEFAULT_SNAPSHOT, VM_SNAPSHOT
from rl_daytona.pool import PoolConfig, SandboxPool
from tests.daytona_sim.conftest import run, sim_and_client

KEY = "pool-test-key"


def _pool(sim: Any, tmp_path: Path, snapshot: str, **config: Any) -> SandboxPool:
    options = DaytonaOptions(api_url=sim.api_url, snapshot=snapshot, transport="toolbox")
    spec = BackendSpec(kind="daytona", daytona=options)
    ledger = str(tmp_path / "sandboxes.jsonl")
    return SandboxPool(spec, "run-p", PoolConfig(ledger=ledger, **config), backend=DaytonaBackend(options))


def _ledger(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "sandboxes.jsonl").read_text().splitlines()]


def test_vm_snapshot_grows_a_fork_tree_and_the_ledger_records_every_id(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAYTONA_API_KEY", KEY)

    async def go() -> None:
        async with sim_and_client(tmp_path / "sim", api_key=KEY) as (sim, client):
            pool = _pool(sim, tmp_path, VM_SNAPSHOT, warm_size=10, max_creating=4)
            await pool.start()
            await pool.set_demand(10)
            handles = [await pool.claim() for _ in range(10)]
            assert len({h.sandbox_id for h in handles}) == 10
            forked = [h for h in handles if h.parent_id]
            assert forked and all(h.labels.get("rl-daytona-run") == "run-p" for h in handles)
            stats = await pool.shutdown()
            assert stats.forked == len(forked) and stats.created + stats.forked == 10, stats
            assert (await pool.provider())["forkable"] is True
            assert sim.stats().ids_with_label("rl-daytona-run", "run-p") == []
        events = _ledger(tmp_path)
        made = {e["sandbox_id"] for e in events if e["event"] in ("created", "forked")}
        assert {h.sandbox_id for h in handles} <= made
        assert made == {e["sandbox_id"] for e in events if e["event"] == "deleted"}
        assert {e["parent_id"] for e in events if e["event"] == "forked"} <= made

    run(go())


def test_container_snapshot_sizes_a_warm_pool_in_the_sandboxes_region_and_removes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAYTONA_API_KEY", KEY)

    async def go() -> None:
        async with sim_and_client(tmp_path / "sim", api_key=KEY) as (sim, client):
            pool = _pool(sim, tmp_path, DEFAULT_SNAPSHOT, warm_size=1, max_creating=2)
            await pool.start()
            await pool.set_demand(6)
            first = await pool.claim()
            warm = await client.warm_pool.list()
            box = await client.get(first.sandbox_id)
            assert [(p.snapshot, p.target, p.pool) for p in warm] == [(DEFAULT_SNAPSHOT, box.target, 6)]
            for _ in range(5):
                await pool.claim()
            await pool.shutdown()
            provider = await pool.provider()
            assert provider["forkable"] is False and provider["region"] == box.target
            assert await client.warm_pool.list() == [], "the run's warm pool is removed at the end"
            assert sim.stats().ids_with_label("rl-daytona-run", "run-p") == []

    run(go())


def test_a_rejected_key_ends_waiting_claims_at_once_and_stops_creating(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAYTONA_API_KEY", "not-the-key")

    async def go() -> None:
        async with sim_and_client(tmp_path / "sim", api_key=KEY) as (sim, _):
            pool = _pool(sim, tmp_path, "", warm_size=2, claim_timeout=600)
            claims = [asyncio.ensure_future(pool.claim()) for _ in range(3)]
            # bounded far below the claim timeout: the claims end with the credentials error
            done = await asyncio.wait_for(asyncio.gather(*claims, return_exceptions=True), timeout=120)
            assert all(isinstance(c, BackendAuthError) for c in done)
            assert "DAYTONA_API_KEY" in str(done[0]) and "not-the-key" not in str(done[0])
            assert sim.stats().creates_requested == 0
            await pool.shutdown()

    with pytest.raises(BackendAuthError):  # the pool's start lists the run's orphans: the key is checked there
        run(_start_only(tmp_path / "sim2", monkeypatch))
    run(go())


async def _start_only(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAYTONA_API_KEY", "not-the-key")
    async with sim_and_client(root, api_key=KEY) as (sim, _):
        pool = _pool(sim, root, "")
        try:
            await pool.start()
        finally:
            await pool.shutdown()
