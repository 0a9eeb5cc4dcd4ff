"""`rl-daytona reap`: by run label only, narrowed by run id and age; a dry run deletes nothing."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rl_daytona.backends import DaytonaOptions
from rl_daytona.backends.daytona import DaytonaBackend
from rl_daytona.backends.local import LocalBackend
from rl_daytona.reap import CREATED_LABEL, ReapQuery, reap, reap_with
from tests.daytona_sim.conftest import run, sim_and_client


def _make(root: Path) -> dict[str, str]:
    """Three local sandboxes: run a (old), run a (new), run b (old); returns name -> id."""
    backend = LocalBackend(root, isolation="none")
    old = str(int(time.time()) - 3600)

    async def go() -> dict[str, str]:
        made = {}
        for name, run_id, created in (("a-old", "a", old), ("a-new", "a", str(int(time.time()))), ("b-old", "b", old)):
            handle = await backend.create(run_id, {"rl-daytona-run": run_id, CREATED_LABEL: created})
            made[name] = handle.sandbox_id
        return made

    return asyncio.run(go())


def _left(root: Path) -> set[str]:
    return {h.sandbox_id for h in asyncio.run(LocalBackend(root, isolation="none").list_sandboxes())}


def test_dry_run_lists_and_keeps_everything(tmp_path: Path) -> None:
    made = _make(tmp_path)
    lines = reap(ReapQuery(backend="local", root=tmp_path, dry_run=True))
    assert lines[-1] == "3 sandboxes would be deleted" and _left(tmp_path) == set(made.values())


def test_run_and_age_narrow_what_is_deleted(tmp_path: Path) -> None:
    made = _make(tmp_path)
    assert reap(ReapQuery(backend="local", root=tmp_path, run_id="a", older_than_minutes=30))[-1] == "1 sandbox deleted"
    assert _left(tmp_path) == {made["a-new"], made["b-old"]}
    assert reap(ReapQuery(backend="local", root=tmp_path, run_id="b"))[-1] == "1 sandbox deleted"
    assert _left(tmp_path) == {made["a-new"]}


def test_cli_reap_and_its_bad_input(tmp_path: Path) -> None:
    made = _make(tmp_path)
    cli = [sys.executable, "-m", "rl_daytona.cli", "reap", "--backend", "local"]
    done = subprocess.run([*cli, "--root", str(tmp_path), "--older-than", "30"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip().splitlines()[-1] == "2 sandboxes deleted"
    assert _left(tmp_path) == {made["a-new"]}
    bad = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip() == "rl-daytona reap: error: reap --backend local needs --root RUNDIR/sandboxes"


def test_daytona_reap_touches_only_labelled_sandboxes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from daytona import CreateSandboxFromSnapshotParams

    monkeypatch.setenv("DAYTONA_API_KEY", "reap-key")

    async def go() -> None:
        async with sim_and_client(tmp_path / "sim", api_key="reap-key") as (sim, client):
            mine = await client.create(CreateSandboxFromSnapshotParams(labels={"rl-daytona-run": "r1"}), timeout=60)
            other = await client.create(CreateSandboxFromSnapshotParams(labels={"team": "someone-else"}), timeout=60)
            backend = DaytonaBackend(DaytonaOptions(api_url=sim.api_url, transport="toolbox"))
            lines = await reap_with(backend, ReapQuery(backend="daytona"))
            assert lines == [f"deleted {mine.id} (run r1)", "1 sandbox deleted"]
            assert [b.id async for b in client.list()] == [other.id]

    run(go())
