"""The ssh transport falls back to the toolbox API per sandbox when SSH cannot be opened."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from rl_daytona.backends.daytona import DaytonaBackend
from rl_daytona.backends.daytona_options import DaytonaOptions
from rl_daytona.backends.daytona_transport import SshWithToolboxFallback
from tests.backends.daytona_env import QUICK_RETRY, local_gate, run, sim_backend  # noqa: F401
from tests.backends.daytona_env import daytona_key  # noqa: F401

pytestmark = pytest.mark.usefixtures("daytona_key")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends: connects are refused


def test_unreachable_ssh_gateway_falls_back_to_the_toolbox(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_backend(tmp_path) as (sim, _):
            options = DaytonaOptions(api_url=sim.api_url, transport="ssh", ssh_connect_seconds=0.3,
                                     ssh_gateway=f"127.0.0.1:{_closed_port()}")
            backend = DaytonaBackend(options, retry=QUICK_RETRY, gate_for=local_gate)
            try:
                box = await backend.create("run-f")
                done = await backend.exec(box, "echo via; echo err >&2", env={"X": "1"})
                assert (done.exit_code, done.stdout, done.stderr) == (0, "via\n", "err\n")
                await backend.write_files(box, {"a/b.txt": b"kept"})
                assert await backend.read_file(box, "a/b.txt") == b"kept"
                commands = backend._commands
                assert isinstance(commands, SshWithToolboxFallback)
                assert commands.fallbacks == 1 and box.sandbox_id in commands.on_toolbox
                assert "SSH to sandbox" in commands.last_reason
                await backend.delete(box)
            finally:
                await backend.close()

    run(go())


def test_reachable_ssh_is_used_and_nothing_falls_back(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_backend(tmp_path, transport="ssh") as (sim, backend):
            box = await backend.create("run-s")
            assert (await backend.exec(box, "echo ssh")).stdout == "ssh\n"
            commands = backend._commands
            assert isinstance(commands, SshWithToolboxFallback) and commands.fallbacks == 0
            await backend.delete(box)

    run(go())
