"""SandboxPool on the real local backend: warm queue, probes, retries, background deletes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rl_daytona.backends import BackendSpec
from rl_daytona.backends.local import LocalBackend
from rl_daytona.pool import ClaimTimeoutError, PoolConfig, SandboxPool
from tests.fakes.flaky_backend import FlakyBackend


def _pool(tmp_path: Path, backend: object | None = None, **config: object) -> SandboxPool:
    spec = BackendSpec(root=str(tmp_path / "sb"))
    real = LocalBackend(tmp_path / "sb")
    return SandboxPool(spec, "run-t", PoolConfig(**config), backend=backend or real)  # type: ignore[arg-type]


async def _settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0.02)


def test_warm_queue_fills_ahead_of_demand_and_no_further(tmp_path: Path) -> None:
    async def go() -> None:
        pool = _pool(tmp_path, warm_size=4)
        await pool.start()
        await pool.set_demand(3)
        await _settle()
        stats = await pool.stats()
        assert stats.ready == 3 and stats.created == 3  # demand caps the warm queue
        handles = [await pool.claim() for _ in range(3)]
        assert len({h.sandbox_id for h in handles}) == 3
        await _settle()
        assert (await pool.stats()).created == 3  # nothing provisioned past the demand
        await pool.shutdown()

    asyncio.run(go())


def test_release_deletes_in_the_background_and_shutdown_leaves_nothing(tmp_path: Path) -> None:
    async def go() -> None:
        pool = _pool(tmp_path, warm_size=2)
        await pool.start()
        handle = await pool.claim()
        await pool.release(handle)
        await _settle()
        stats = await pool.stats()
        assert stats.released == 1 and stats.deleted >= 1 and stats.in_use == 0
        await pool.claim()  # claimed and never released: shutdown must still delete it
        final = await pool.shutdown()
        assert final.in_use == 0
        assert await LocalBackend(tmp_path / "sb").list_sandboxes("run-t") == []

    asyncio.run(go())


def test_failed_creates_are_retried_and_counted(tmp_path: Path) -> None:
    async def go() -> None:
        flaky = FlakyBackend(LocalBackend(tmp_path / "sb"), fail_creates={0, 1, 2})
        pool = _pool(tmp_path, backend=flaky, warm_size=1, retry_backoff=0.01)
        await pool.start()
        handle = await pool.claim(timeout=10)
        stats = await pool.stats()
        assert handle.sandbox_id and stats.failed == 3 and stats.claimed == 1
        await pool.shutdown()

    asyncio.run(go())


def test_a_sandbox_failing_its_probe_is_never_handed_out(tmp_path: Path) -> None:
    async def go() -> None:
        flaky = FlakyBackend(LocalBackend(tmp_path / "sb"))
        flaky.kill_next_probe = 2
        pool = _pool(tmp_path, backend=flaky, warm_size=3)
        await pool.start()
        handle = await pool.claim(timeout=10)
        assert handle.sandbox_id not in flaky.dead and len(flaky.dead) == 2
        await _settle()
        assert (await pool.stats()).probe_failed == 2
        remaining = {h.sandbox_id for h in await flaky.list_sandboxes("run-t")}
        assert not (remaining & flaky.dead)  # the dead ones were deleted
        await pool.shutdown()

    asyncio.run(go())


def test_claim_times_out_with_a_clear_error_when_nothing_can_be_created(tmp_path: Path) -> None:
    async def go() -> None:
        flaky = FlakyBackend(LocalBackend(tmp_path / "sb"), fail_creates=set(range(100)))
        pool = _pool(tmp_path, backend=flaky, warm_size=1, retry_backoff=0.01, create_retries=1)
        await pool.start()
        with pytest.raises(ClaimTimeoutError, match="creates failed"):
            await pool.claim(timeout=0.5)
        await pool.shutdown()

    asyncio.run(go())


def test_creates_that_keep_failing_back_off_and_the_claim_says_why(tmp_path: Path) -> None:
    """A backend that is down (every create fails, credentials fine) is not hammered: once
    creates fail every retry, each new one waits first, doubling; the timed-out claim names
    the last failure."""
    async def go() -> int:
        flaky = FlakyBackend(LocalBackend(tmp_path / "sb"), fail_creates=set(range(10_000)))
        pool = _pool(tmp_path, backend=flaky, warm_size=4, retry_backoff=0.01, create_retries=0)
        await pool.start()
        with pytest.raises(ClaimTimeoutError, match=r"creates failed; last: SandboxError: injected create failure #\d+\)"):
            await pool.claim(timeout=3.0)
        await pool.shutdown()
        return flaky.create_calls

    calls = asyncio.run(go())
    # without the back-off: 5 creates in flight, a new one as each fails, ~1,500 calls in 3 s;
    # with it each failure doubles the wait (after the first 5: 0.32 s, then 10 s): 10 calls
    assert 5 <= calls <= 60, calls


def test_start_reaps_orphans_of_the_same_run(tmp_path: Path) -> None:
    async def go() -> None:
        backend = LocalBackend(tmp_path / "sb")
        for _ in range(3):
            await backend.create("run-t", {"rl-daytona-run": "run-t"})
        pool = _pool(tmp_path, warm_size=0)
        assert await pool.start() == 3
        await pool.shutdown()

    asyncio.run(go())


def test_fork_hands_out_a_child_the_pool_tracks(tmp_path: Path) -> None:
    async def go() -> None:
        pool = _pool(tmp_path, warm_size=1)
        await pool.start()
        parent = await pool.claim()
        await pool.backend.write_files(parent, {"a.txt": "from parent"})
        child = await pool.fork(parent)
        assert (await pool.backend.read_file(child, "a.txt")) == b"from parent"
        assert (await pool.stats()).forked == 1
        await pool.shutdown()
        assert await LocalBackend(tmp_path / "sb").list_sandboxes("run-t") == []

    asyncio.run(go())
