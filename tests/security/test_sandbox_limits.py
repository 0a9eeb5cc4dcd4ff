"""Disk fillers against real bubblewrap sandboxes (LocalBackend), the one exhaustion the
backend tests (tests/backends/test_local.py, test_escape.py) did not cover: /tmp and /dev/shm
are tmpfs capped at `workspace_mb`, so filling them ends in ENOSPC inside the sandbox; the
workspace itself lives on the host's disk with only the per-file limit (`max_file_mb`), so
many files fill it past `workspace_mb` (bounded here to 40 MB)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rl_daytona.backends.local import LocalBackend
from rl_daytona.types import SandboxLimits

LIMITS = SandboxLimits(cpu_seconds=10, max_file_mb=4, workspace_mb=16)
MB = 1024 * 1024


def _fill(tmp_path: Path, where: str, files: int = 10, size_mb: int = 4) -> tuple[str, int, int]:
    """(output, exit code, bytes the sandbox's upper layer holds on the host) after the attempt."""
    backend = LocalBackend(tmp_path / "sandboxes", limits=LIMITS)

    async def go() -> tuple[str, int, int]:
        box = await backend.create("run-1")
        result = await backend.exec(box, f"for i in $(seq 1 {files}); do head -c {size_mb}M /dev/zero > {where}/f$i "
                                         f"|| exit 1; done; echo filled", timeout=30)
        upper = backend.root / box.sandbox_id / "upper"
        held = sum(p.stat().st_size for p in upper.rglob("*") if p.is_file())
        after = await backend.exec(box, "echo alive")
        assert after.stdout == "alive\n", "the sandbox still works"
        await backend.delete(box)
        return result.output, result.exit_code, held

    return asyncio.run(go())


@pytest.mark.parametrize("where", ["/tmp", "/dev/shm"])
def test_filling_tmp_stops_at_its_size_inside_the_sandbox(tmp_path: Path, where: str) -> None:
    output, code, held = _fill(tmp_path, where)
    assert code == 1 and "No space left on device" in output and "filled" not in output, output
    assert held == 0, "nothing reached the host's disk"


def test_filling_the_workspace_stops_at_workspace_mb(tmp_path: Path) -> None:
    output, code, held = _fill(tmp_path, "/workspace")
    assert held <= LIMITS.workspace_mb * MB, f"{held / MB:.0f} MB written to the host for a {LIMITS.workspace_mb} MB workspace"
