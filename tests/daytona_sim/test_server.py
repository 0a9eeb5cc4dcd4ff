"""Sandboxes through the real `daytona` SDK against a real daytona-sim (real bwrap sandboxes)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
from daytona import (
    AsyncDaytona, CreateSandboxFromSnapshotParams, DaytonaAuthenticationError, DaytonaBadRequestError,
    DaytonaConfig, DaytonaConflictError, DaytonaError, DaytonaNotFoundError, DaytonaRateLimitError,
    DaytonaTimeoutError, ListSandboxesQuery,
)

from rl_daytona.daytona_sim import VM_SNAPSHOT
from tests.daytona_sim.conftest import run, sim_and_client


def _params(**kw: object) -> CreateSandboxFromSnapshotParams:
    kw.setdefault("ephemeral", True)
    kw.setdefault("auto_stop_interval", 0)
    return CreateSandboxFromSnapshotParams(**kw)  # type: ignore[arg-type]


def test_create_starts_and_exec_runs_in_the_workspace(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_and_client(tmp_path) as (sim, client):
            box = await client.create(_params(labels={"run": "r1"}, env_vars={"GREETING": "hello"}), timeout=60)
            assert box.state.value == "started" and box.labels["run"] == "r1"
            out = await box.process.exec("echo $GREETING; pwd; echo oops >&2; exit 4")
            assert out.exit_code == 4 and out.result == "hello\n/workspace\noops\n"
            assert (await box.process.exec("echo -n x > f && cat f")).result == "x"
            stats = sim.stats()
            assert (stats.creates_requested, stats.created, stats.alive) == (1, 1, 1)
            assert stats.ids_with_label("run", "r1") == [box.id]
    run(go())


def test_exec_timeout_stops_the_command(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_and_client(tmp_path) as (_sim, client):
            box = await client.create(_params(), timeout=60)
            started = asyncio.get_running_loop().time()
            out = await box.process.exec("sleep 30; echo finished", timeout=1)
            assert out.exit_code != 0 and "finished" not in out.result
            assert asyncio.get_running_loop().time() - started < 25  # the 1 s limit, not the 30 s sleep
    run(go())


def test_list_filters_by_labels_across_pages(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_and_client(tmp_path) as (_sim, client):
            boxes = await asyncio.gather(*(client.create(_params(labels={"run": run_id}), timeout=60)
                                           for run_id in ("a", "a", "a", "b")))
            want = sorted(b.id for b in boxes[:3])
            got = sorted([s.id async for s in client.list(ListSandboxesQuery(labels={"run": "a"}, limit=2))])
            assert got == want
            assert [s.id async for s in client.list(ListSandboxesQuery(labels={"run": "b"}))] == [boxes[3].id]
            assert [s async for s in client.list(ListSandboxesQuery(labels={"run": "zzz"}))] == []
    run(go())


def test_delete_removes_the_sandbox_and_a_second_delete_is_404(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_and_client(tmp_path) as (sim, client):
            box = await client.create(_params(), timeout=60)
            await box.process.exec("echo data > kept.txt")
            await client.delete(box)
            with pytest.raises(DaytonaNotFoundError):
                await client.get(box.id)
            with pytest.raises(DaytonaNotFoundError):
                await box.delete()
            assert sim.stats().alive == 0 and sim.stats().deleted == 1
            assert await sim.engine.backend.list_sandboxes() == []
    run(go())


def test_fork_sees_the_parent_files_and_is_independent(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_and_client(tmp_path) as (sim, client):
            parent = await client.create(_params(snapshot=VM_SNAPSHOT), timeout=60)
            await parent.process.exec("echo v1 > state.txt")
            child = await parent.fork()
            assert child.state.value == "started" and child.id != parent.id
            assert (await child.process.exec("cat state.txt")).result == "v1\n"
            await child.process.exec("echo child > state.txt")
            await parent.process.exec("echo parent > other.txt")
            assert (await parent.process.exec("cat state.txt")).result == "v1\n"
            assert (await child.process.exec("cat other.txt")).exit_code != 0
            grandchild = await child.fork()
            assert (await grandchild.process.exec("cat state.txt")).result == "child\n"
            assert sim.stats().forks == 2
    run(go())


def test_only_vm_sandboxes_fork_and_one_fork_at_a_time(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_and_client(tmp_path, time_scale=1.0) as (_sim, client):
            container, vm = await asyncio.gather(client.create(_params(), timeout=60),
                                                 client.create(_params(snapshot=VM_SNAPSHOT), timeout=60))
            with pytest.raises(DaytonaBadRequestError, match="linux-vm"):
                await container.fork()
            results = await asyncio.gather(vm.fork(), vm.fork(), return_exceptions=True)
            conflicts = [r for r in results if isinstance(r, DaytonaConflictError)]
            assert len(conflicts) == 1 and "one fork at a time" in str(conflicts[0])
            assert sum(1 for r in results if not isinstance(r, BaseException)) == 1
    run(go())


def test_bad_api_key_is_an_sdk_authentication_error(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_and_client(tmp_path) as (sim, _client):
            async with AsyncDaytona(DaytonaConfig(api_key="wrong", api_url=sim.api_url)) as bad:
                with pytest.raises(DaytonaAuthenticationError):
                    await bad.create(_params(), timeout=30)
                with pytest.raises(DaytonaAuthenticationError):
                    [s async for s in bad.list()]
            assert sim.stats().creates_requested == 0
    run(go())


def test_creates_past_the_rate_limit_get_429_with_headers(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_and_client(tmp_path, rate_limit_per_min=2) as (sim, client):
            await client.create(_params(), timeout=60)
            await client.create(_params(), timeout=60)
            with pytest.raises(DaytonaRateLimitError) as err:
                await client.create(_params(), timeout=60)
            assert err.value.status_code == 429
            async with aiohttp.ClientSession() as http:
                async with http.post(f"{sim.api_url}/sandbox", json={},
                                     headers={"Authorization": "Bearer sim-key"}) as resp:
                    assert resp.status == 429
                    assert 1 <= int(resp.headers["Retry-After"]) <= 60
                    assert resp.headers["X-RateLimit-Limit"] == "2"
                    assert resp.headers["X-RateLimit-Remaining"] == "0"
                    assert (await resp.json())["statusCode"] == 429
            assert (sim.stats().created, sim.stats().rate_limited) == (2, 2)
    run(go())


def test_injected_create_failure_is_an_error_state_the_sdk_surfaces(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_and_client(tmp_path, create_fail_rate=1.0) as (sim, client):
            with pytest.raises(DaytonaError, match="entered error state"):
                await client.create(_params(labels={"run": "f"}), timeout=60)
            [listed] = [s async for s in client.list(ListSandboxesQuery(labels={"run": "f"}))]
            failed = await client.get(listed.id)
            assert failed.state.value == "error" and "injected create failure" in (failed.error_reason or "")
            await failed.delete()
            assert (sim.stats().failed, sim.stats().alive) == (1, 0)
    run(go())


def test_faults_can_be_switched_while_serving(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_and_client(tmp_path) as (sim, client):
            sim.set_faults(create_fail_rate=1.0)
            with pytest.raises(DaytonaError, match="entered error state"):
                await client.create(_params(), timeout=60)
            sim.set_faults(create_fail_rate=0.0, rate_limit_per_min=1)
            await client.create(_params(), timeout=60)
            with pytest.raises(DaytonaRateLimitError):
                await client.create(_params(), timeout=60)
            with pytest.raises(ValueError, match="unknown fields"):
                sim.set_faults(time_scale=5)
            with pytest.raises(ValueError, match="between 0 and 1"):
                sim.set_faults(probe_fail_rate=3)
            assert (sim.stats().failed, sim.stats().created, sim.stats().rate_limited) == (1, 1, 1)
    run(go())


def test_hung_create_times_out_with_its_id_and_can_be_deleted(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_and_client(tmp_path, create_hang_rate=1.0) as (sim, client):
            with pytest.raises(DaytonaTimeoutError) as err:
                await client.create(_params(), timeout=1.5)
            assert err.value.sandbox_id is not None
            hung = await client.get(err.value.sandbox_id)
            assert hung.state.value == "creating"
            await hung.delete()
            assert (sim.stats().hung, sim.stats().alive) == (1, 0)
    run(go())


def test_probe_failure_makes_every_command_fail(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_and_client(tmp_path, probe_fail_rate=1.0) as (_sim, client):
            box = await client.create(_params(), timeout=60)
            out = await box.process.exec("echo alive")
            assert out.exit_code == 1 and "connection refused" in out.result
    run(go())


def test_stop_deletes_every_sandbox(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_and_client(tmp_path) as (sim, client):
            await asyncio.gather(*(client.create(_params(), timeout=60) for _ in range(3)))
            assert len(await sim.engine.backend.list_sandboxes()) == 3
        assert await sim.engine.backend.list_sandboxes() == []
    run(go())


def test_files_upload_and_download_through_the_toolbox(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_and_client(tmp_path / "sim") as (_sim, client):
            box = await client.create(_params(), timeout=60)
            await box.fs.upload_file(b"print('hi')\n", "/workspace/src/app.py")
            assert (await box.process.exec("python3 src/app.py")).result == "hi\n"
            await box.process.exec("printf 'x\\0y' > out.bin")
            assert await box.fs.download_file("/workspace/out.bin") == b"x\0y"
            with pytest.raises(DaytonaNotFoundError):
                await box.fs.download_file("/workspace/missing.txt")
    run(go())


def test_run_sim_in_thread_serves_synchronous_callers(tmp_path: Path) -> None:
    from rl_daytona.daytona_sim import SimConfig, run_sim_in_thread

    async def use(api_url: str) -> str:
        async with AsyncDaytona(DaytonaConfig(api_key="sim-key", api_url=api_url)) as client:
            box = await client.create(_params(labels={"run": "t"}), timeout=60)
            return box.id

    with run_sim_in_thread(SimConfig(root=str(tmp_path), time_scale=0.02)) as sim:
        assert sim.api_url.startswith("http://127.0.0.1:") and sim.api_url.endswith("/api") and sim.ssh_port > 0
        box_id = asyncio.run(use(sim.api_url))
        assert sim.stats().ids_with_label("run", "t") == [box_id]
    assert [p for p in (tmp_path / "sandboxes").iterdir() if not p.name.startswith("_")] == []


def test_sdk_in_polling_mode_works_too(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_and_client(tmp_path) as (sim, _client):
            config = DaytonaConfig(api_key="sim-key", api_url=sim.api_url, use_deprecated_polling=True)
            with pytest.warns(DeprecationWarning):
                polling = AsyncDaytona(config)
            async with polling:
                box = await polling.create(_params(snapshot=VM_SNAPSHOT), timeout=60)
                child = await box.fork()
                assert (await child.process.exec("echo polled")).result == "polled\n"
    run(go())
