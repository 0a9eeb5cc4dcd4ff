"""Snapshots named by content, built with the real SDK against daytona-sim."""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path
from typing import Callable

import pytest
from daytona import AsyncDaytona

from rl_daytona.backends.ca_trust import trust_in_this_process
from rl_daytona.backends.daytona_snapshot import (
    ContextUploadTLSError, SnapshotBuildError, build_inputs, copy_sources, ensure_snapshot, snapshot_name,
)
from rl_daytona.daytona_sim import DaytonaSim
from tests.daytona_sim.conftest import run, sim_and_client

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = "Dockerfile.hud"
POLL = 0.05


def _repo_copy(dest: Path) -> Path:
    """What Dockerfile.hud builds from, copied (the repo's own files are never edited)."""
    dest.mkdir(parents=True)
    for name in (DOCKERFILE, "pyproject.toml", "requirements.lock"):
        shutil.copy2(REPO / name, dest / name)
    shutil.copytree(REPO / "rl_daytona", dest / "rl_daytona", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _repo_copy(tmp_path_factory.mktemp("pristine") / "repo")


def _append(text: str) -> Callable[[Path], None]:
    def edit(path: Path) -> None:
        path.write_text(path.read_text() + text)
    return edit


def test_the_name_is_a_stable_hash_of_the_content(pristine: Path, tmp_path: Path) -> None:
    name = snapshot_name(pristine, DOCKERFILE)
    assert re.fullmatch(r"rl-daytona-[0-9a-f]{12}", name)
    again = tmp_path / "again"
    shutil.copytree(pristine, again)
    assert snapshot_name(again, DOCKERFILE) == name == snapshot_name(pristine, pristine / DOCKERFILE)
    (again / "rl_daytona" / "tasks" / "__pycache__").mkdir()
    (again / "rl_daytona" / "tasks" / "__pycache__" / "api.cpython-311.pyc").write_bytes(b"\0cache")
    (again / "README.md").write_text("not copied by the Dockerfile\n")
    assert snapshot_name(again, DOCKERFILE) == name
    rels = {p.relative_to(pristine).as_posix() for p in build_inputs(pristine, DOCKERFILE)}
    assert {"requirements.lock", "pyproject.toml", "rl_daytona/tasks/calc/bugs.py"} <= rels


@pytest.mark.parametrize("path, edit", [
    (DOCKERFILE, _append("ENV EXTRA=1\n")),
    ("rl_daytona/tasks/calc/bugs.py", _append("# a task edit\n")),
    ("pyproject.toml", _append("\n# a packaging edit\n")),
    ("requirements.lock", _append("six==1.17.0\n")),
    ("rl_daytona/tasks/new_task.py", lambda p: p.write_text("TASK = 1\n")),
    ("rl_daytona/tasks/grader.py", lambda p: p.chmod(0o755)),
], ids=["dockerfile", "task-file", "pyproject", "lock", "new-task-file", "exec-bit"])
def test_any_change_to_what_shapes_the_image_renames_it(pristine: Path, tmp_path: Path, path: str,
                                                        edit: Callable[[Path], None]) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(pristine, repo)
    edit(repo / path)
    assert snapshot_name(repo, DOCKERFILE) != snapshot_name(pristine, DOCKERFILE)


def test_copy_sources_reads_every_local_copy_and_add() -> None:
    text = ('FROM python:3.11-slim AS base\nCOPY --chown=1:1 a.txt b/ /dst/\n# COPY ignored.txt /x\n'
            'COPY --from=base /usr/bin/env /env\nADD https://example.invalid/x.tar /x\n'
            'ADD c.tar \\\n    /c/\nCOPY ["d e.txt", "/d/"]\nRUN cat <<EOF > /f\nEOF\n')
    assert copy_sources(text) == ["a.txt", "b/", "c.tar", "d e.txt"]


def test_a_source_outside_the_build_context_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ctx").mkdir()
    (tmp_path / "secret.txt").write_text("no\n")
    (tmp_path / "ctx" / "Dockerfile").write_text("FROM python:3.11-slim\nCOPY ../secret.txt /s\n")
    with pytest.raises(ValueError, match="outside the build context"):
        snapshot_name(tmp_path / "ctx", "Dockerfile")


async def _built(sim: DaytonaSim, client: AsyncDaytona, repo: Path, logs: list[str]) -> str:
    with trust_in_this_process(sim.objects.ca_bundle):
        return await ensure_snapshot(client, repo, DOCKERFILE, logs.append, poll_seconds=POLL)


def test_ensure_snapshot_builds_once_then_reuses_it(pristine: Path, tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_and_client(tmp_path / "sim") as (sim, client):
            logs: list[str] = []
            name = await _built(sim, client, pristine, logs)
            assert name == snapshot_name(pristine, DOCKERFILE) and sim.stats().snapshots_built == 1
            assert (await client.snapshot.get(name)).state.value == "active"
            steps = [line for line in logs if line.startswith("Step ")]
            assert steps[0].startswith("Step 1/") and steps[0].endswith(": FROM python:3.11-slim")
            assert steps[-1].endswith(": WORKDIR /workspace") and len(steps) == int(steps[0].split("/")[1].split()[0])
            assert all("\n" not in line for line in logs)  # one line per call, though the SDK sends chunks
            again: list[str] = []
            assert await _built(sim, client, pristine, again) == name
            assert sim.stats().snapshots_built == 1 and not any(line.startswith("Step ") for line in again)
            assert any("reusing" in line for line in again)
            ours = [s.name for s in (await client.snapshot.list()).items if s.name.startswith("rl-daytona-")]
            assert ours == [name]
    run(go())


def test_a_changed_input_builds_a_second_snapshot(pristine: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(pristine, repo)

    async def go() -> None:
        async with sim_and_client(tmp_path / "sim") as (sim, client):
            first = await _built(sim, client, repo, [])
            _append("# edited\n")(repo / "rl_daytona" / "tasks" / "calc" / "bugs.py")
            second = await _built(sim, client, repo, [])
            assert first != second and sim.stats().snapshots_built == 2
    run(go())


def test_concurrent_runs_share_one_build(pristine: Path, tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_and_client(tmp_path / "sim") as (sim, client):
            with trust_in_this_process(sim.objects.ca_bundle):
                names = await asyncio.gather(*(ensure_snapshot(client, pristine, DOCKERFILE, lambda _: None,
                                                               poll_seconds=POLL) for _ in range(3)))
            assert len(set(names)) == 1 and sim.stats().snapshots_built == 1
    run(go())


def test_a_broken_dockerfile_fails_in_one_line_and_is_retried_next_time(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "app.py").write_text("print(1)\n")
    (repo / DOCKERFILE).write_text("FROM python:3.11-slim\nCOPY app.py /app/\nRUNN echo typo\n")

    async def go() -> None:
        async with sim_and_client(tmp_path / "sim") as (sim, client):
            for attempt in range(2):
                logs: list[str] = []
                with pytest.raises(SnapshotBuildError) as failed:
                    await _built(sim, client, repo, logs)
                message = str(failed.value)
                assert "\n" not in message and "unknown instruction: RUNN" in message
                assert message.startswith(f"snapshot {snapshot_name(repo, DOCKERFILE)} failed to build")
                assert any("deleting it to build it again" in line for line in logs) == (attempt == 1)
            assert sim.stats().snapshots_built == 0
    run(go())


def test_the_repos_own_dockerfile_builds_in_the_sim(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_and_client(tmp_path / "sim") as (sim, client):
            logs: list[str] = []
            name = await _built(sim, client, REPO, logs)
            assert name.startswith("rl-daytona-") and (await client.snapshot.get(name)).state.value == "active"
            assert any(line.startswith("Successfully built snapshot") for line in logs)
            build = sim.engine.catalog.snapshot(name)
            assert build.dockerfile == (REPO / DOCKERFILE).read_text() and len(build.context_hashes) == 3
    run(go())


def test_an_untrusted_upload_names_the_ca_variable_not_the_dockerfile(pristine: Path, tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_and_client(tmp_path / "sim") as (sim, client):
            with pytest.raises(ContextUploadTLSError) as failed:  # no trust_in_this_process: the sim's CA is unknown
                await ensure_snapshot(client, pristine, DOCKERFILE, lambda _: None, poll_seconds=POLL)
            message = str(failed.value)
            assert "\n" not in message and "DAYTONA_SIM_CA_BUNDLE" in message and "TLS" in message
            assert "Dockerfile" not in message and sim.stats().snapshots_built == 0
    run(go())
