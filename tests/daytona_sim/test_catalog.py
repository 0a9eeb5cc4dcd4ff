"""Snapshots (Dockerfile builds with streamed logs) and warm pools through the real SDK."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
from daytona import (
    AsyncDaytona, CreateSandboxFromSnapshotParams, CreateSnapshotParams, DaytonaConflictError, DaytonaError, Image,
    SandboxClass,
)

from rl_daytona.backends.ca_trust import trust_in_this_process
from rl_daytona.daytona_sim.objects import context_key
from rl_daytona.daytona_sim.state import ORG_ID
from tests.daytona_sim.conftest import run, sim_and_client


def _dockerfile(tmp_path: Path, text: str) -> str:
    path = tmp_path / "Dockerfile"
    path.write_text(text)
    return str(path)


def test_snapshot_build_streams_logs_and_is_reused_by_name(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_and_client(tmp_path / "sim") as (sim, client):
            logs: list[str] = []
            image = Image.from_dockerfile(_dockerfile(tmp_path, "FROM python:3.11-slim\nRUN pip install pytest\n"))
            snap = await client.snapshot.create(
                CreateSnapshotParams(name="calc-abc123", image=image, sandbox_class=SandboxClass.LINUX_VM),
                on_logs=logs.append)
            assert snap.state.value == "active"
            text = "\n".join(logs)  # the SDK hands over chunks of the stream, not lines
            assert "Step 1/2 : FROM python:3.11-slim\n" in text and "Step 2/2 : RUN pip install pytest\n" in text
            assert text.index("Step 1/2") < text.index("Step 2/2") < text.index("Successfully built")
            again = await client.snapshot.get("calc-abc123")
            assert again.id == snap.id
            with pytest.raises(DaytonaConflictError):
                await client.snapshot.create(CreateSnapshotParams(name="calc-abc123", image=image))
            box = await client.create(CreateSandboxFromSnapshotParams(snapshot="calc-abc123"), timeout=60)
            assert box.snapshot == "calc-abc123"
            await box.fork()  # a linux-vm snapshot's sandboxes fork
            names = [s.name for s in (await client.snapshot.list()).items]
            assert "calc-abc123" in names and sim.stats().snapshots_built == 1
    run(go())


@pytest.mark.parametrize(("text", "reason"), [
    ("RUN echo no base\n", "no FROM before RUN"),
    ("FROM python:3.11\nRUNN echo\n", "unknown instruction: RUNN"),
])
def test_bad_dockerfile_fails_the_build_with_its_reason(tmp_path: Path, text: str, reason: str) -> None:
    async def go() -> None:
        async with sim_and_client(tmp_path / "sim") as (_sim, client):
            image = Image.from_dockerfile(_dockerfile(tmp_path, text))
            with pytest.raises(DaytonaError, match=reason):
                await client.snapshot.create(CreateSnapshotParams(name="broken", image=image))
            assert (await client.snapshot.get("broken")).state.value == "build_failed"
            with pytest.raises(DaytonaError, match="build_failed"):
                await client.create(CreateSandboxFromSnapshotParams(snapshot="broken"), timeout=30)
    run(go())


def test_a_copy_build_uploads_its_context_to_the_sims_object_storage(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_and_client(tmp_path / "sim") as (sim, client):
            (tmp_path / "app.py").write_text("print(1)\n")
            image = Image.from_dockerfile(_dockerfile(tmp_path, "FROM python:3.11-slim\nCOPY app.py /app/\n"))
            with trust_in_this_process(sim.objects.ca_bundle):
                snap = await client.snapshot.create(CreateSnapshotParams(name="ctx", image=image))
            assert snap.state.value == "active"
            hashes = sim.engine.catalog.snapshot("ctx").context_hashes
            assert len(hashes) == 1 and sim.objects.has(context_key(ORG_ID, hashes[0]))
    run(go())


def test_a_build_whose_context_was_never_uploaded_fails(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_and_client(tmp_path / "sim") as (sim, client):
            body = {"name": "no-ctx", "buildInfo": {"dockerfileContent": "FROM python:3.11-slim\nCOPY a /a\n",
                                                    "contextHashes": ["0123abcd"]}}
            headers = {"Authorization": f"Bearer {sim.config.api_key}"}
            async with aiohttp.ClientSession() as http:
                async with http.post(f"{sim.api_url}/snapshots", json=body, headers=headers) as response:
                    assert response.status == 200
            await _until(lambda: _state_is(client, "no-ctx", "build_failed"))
            snap = await client.snapshot.get("no-ctx")
            assert snap.error_reason == "build context 0123abcd was not uploaded to object storage"
    run(go())


async def _state_is(client: AsyncDaytona, name: str, state: str) -> bool:
    return (await client.snapshot.get(name)).state.value == state


async def _until(predicate, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


def test_warm_pool_serves_creates_and_refills(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_and_client(tmp_path) as (sim, client):
            pool = await client.warm_pool.create("daytona-sim/default", 2)

            async def full() -> bool:
                return [p.current_size for p in await client.warm_pool.list() if p.id == pool.id] == [2]

            await _until(full)
            assert [s async for s in client.list()] == []  # unclaimed members are not listed
            box = await client.create(CreateSandboxFromSnapshotParams(labels={"run": "w"}), timeout=60)
            assert sim.stats().served_from_warm == 1 and box.labels["run"] == "w"
            assert (await box.process.exec("echo warm")).result == "warm\n"
            cold = await client.create(CreateSandboxFromSnapshotParams(env_vars={"A": "1"}), timeout=60)
            assert sim.stats().served_from_warm == 1 and cold.id != box.id  # env vars: not claimable
            await _until(full)
            await client.warm_pool.delete(pool.id)
            assert await client.warm_pool.list() == []
            assert len(await sim.engine.backend.list_sandboxes()) == 2  # only the two claimed ones
    run(go())
