"""DaytonaBackend against daytona-sim: lifecycle on both transports, forks, and the API key."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rl_daytona.backends.base import SandboxError, SandboxHandle
from rl_daytona.backends.daytona import DaytonaBackend
from rl_daytona.backends.daytona_options import RUN_LABEL
from rl_daytona.daytona_sim import VM_SNAPSHOT
from rl_daytona.types import SandboxLimits
from tests.backends.daytona_env import SIM_KEY, daytona_key, run, sim_backend  # noqa: F401

pytestmark = pytest.mark.usefixtures("daytona_key")
TRANSPORTS = ("ssh", "toolbox")
BINARY = bytes(range(256)) * 3 + b"\x00\r\n\xff"


async def _commands_behave(backend: DaytonaBackend, box: SandboxHandle) -> None:
    both = await backend.exec(box, "echo out; echo err >&2; exit 3")
    assert (both.exit_code, both.stdout, both.stderr, both.timed_out) == (3, "out\n", "err\n", False)
    assert (await backend.exec(box, "pwd")).stdout == "/workspace\n"
    env = await backend.exec(box, 'printf %s "$GREETING"', env={"GREETING": "hi 'there' $x"})
    assert env.stdout == "hi 'there' $x"
    piped = await backend.exec(box, "tr a-z A-Z", stdin=b"piped input\n")
    assert piped.stdout == "PIPED INPUT\n"
    assert (await backend.exec(box, "cat")).stdout == ""  # no stdin: EOF at once, no hang
    slow = await backend.exec(box, "sleep 20; echo never", timeout=0.5)
    assert slow.timed_out and "never" not in slow.stdout
    loud = await backend.exec(box, "head -c 5000 /dev/zero | tr '\\0' x")
    assert loud.output_truncated and loud.limit_hit == "output" and loud.stdout == "x" * 1000


async def _files_behave(backend: DaytonaBackend, box: SandboxHandle) -> None:
    await backend.write_files(box, {"top.txt": "hello\n", "deep/er/blob.bin": BINARY,
                                    "/workspace/abs/x.txt": b"absolute"})
    assert await backend.read_file(box, "top.txt") == b"hello\n"
    assert await backend.read_file(box, "deep/er/blob.bin") == BINARY
    assert await backend.read_file(box, "/workspace/abs/x.txt") == b"absolute"
    big = bytes(range(256)) * 400  # larger than the output cap: reads are never capped
    await backend.write_files(box, {"big.bin": big})
    assert await backend.read_file(box, "big.bin") == big
    assert (await backend.exec(box, "cat top.txt", cwd="/workspace/deep/..")).stdout == "hello\n"
    assert (await backend.exec(box, "pwd", cwd="/workspace/deep/er")).stdout == "/workspace/deep/er\n"
    with pytest.raises(FileNotFoundError):
        await backend.read_file(box, "missing.txt")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_lifecycle(tmp_path: Path, transport: str) -> None:
    async def go() -> None:
        limits = SandboxLimits(max_output_bytes=1000)
        async with sim_backend(tmp_path, transport=transport, limits=limits) as (sim, backend):
            box = await backend.create("run-a", {"task": "calc"})
            other = await backend.create("run-b")
            assert box.labels[RUN_LABEL] == "run-a" and box.labels["task"] == "calc"
            assert sim.stats().ids_with_label(RUN_LABEL, "run-a") == [box.sandbox_id]
            await _commands_behave(backend, box)
            await _files_behave(backend, box)
            assert await backend.is_alive(box)
            assert [h.sandbox_id for h in await backend.list_sandboxes("run-a")] == [box.sandbox_id]
            assert {h.sandbox_id for h in await backend.list_sandboxes()} == {box.sandbox_id, other.sandbox_id}
            await backend.delete(box)
            await backend.delete(box)  # twice is not an error
            assert not await backend.is_alive(box)
            assert await backend.list_sandboxes("run-a") == []
            assert sim.stats().alive == 1
    run(go())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_api_key_never_reaches_a_sandbox(tmp_path: Path, transport: str) -> None:
    async def go() -> None:
        async with sim_backend(tmp_path, transport=transport) as (sim, backend):
            box = await backend.create("run-k")
            seen = await backend.exec(box, "env; cat /proc/self/environ")
            assert seen.exit_code == 0 and "PATH=" in seen.stdout
            assert SIM_KEY not in seen.output and "DAYTONA" not in seen.output
    run(go())


def test_fork_sees_the_parent_workspace_and_forks_of_one_parent_are_serialised(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_backend(tmp_path, snapshot=VM_SNAPSHOT) as (sim, backend):
            parent = await backend.create("run-f")
            await backend.write_files(parent, {"seed/task.txt": "from the parent"})
            children = await asyncio.gather(*(backend.fork(parent) for _ in range(3)))
            assert len({c.sandbox_id for c in children}) == 3
            for child in children:
                assert child.parent_id == parent.sandbox_id and child.labels[RUN_LABEL] == "run-f"
                assert await backend.read_file(child, "seed/task.txt") == b"from the parent"
            await backend.write_files(children[0], {"seed/task.txt": "changed in a child"})
            assert await backend.read_file(parent, "seed/task.txt") == b"from the parent"
            assert sim.stats().forks == 3
            assert len(await backend.list_sandboxes("run-f")) == 4
    run(go())


def test_fork_of_a_container_sandbox_is_a_one_line_error(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_backend(tmp_path) as (sim, backend):
            parent = await backend.create("run-c")
            with pytest.raises(SandboxError) as caught:
                await backend.fork(parent)
            assert "\n" not in str(caught.value) and parent.sandbox_id in str(caught.value)
            assert "linux-vm" in str(caught.value)
            assert sim.stats().alive == 1
    run(go())
