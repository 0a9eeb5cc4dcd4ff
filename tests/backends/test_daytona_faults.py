"""DaytonaBackend under daytona-sim's faults: failed, throttled and hung creates, bad credentials."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rl_daytona.backends.base import BackendAuthError, SandboxError, SandboxHandle
from rl_daytona.backends.daytona_options import RUN_LABEL
from tests.backends.daytona_env import daytona_key, run, sim_backend  # noqa: F401

pytestmark = pytest.mark.usefixtures("daytona_key")
CREATE = ("POST", "/api/sandbox")


def test_injected_create_failures_are_retried_and_leave_nothing_behind(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_backend(tmp_path, create_fail_rate=0.3, seed=3) as (sim, backend):
            handles = await asyncio.gather(*(backend.create("run-r") for _ in range(8)))
            stats = sim.stats()
            assert stats.failed >= 1 and stats.creates_requested == 8 + stats.failed
            ids = {h.sandbox_id for h in handles}
            assert len(ids) == 8 and stats.alive == 8
            assert {sid for sid, _ in stats.labels} == ids
            assert {h.sandbox_id for h in await backend.list_sandboxes("run-r")} == ids
            assert all(await asyncio.gather(*(backend.is_alive(h) for h in handles)))
    run(go())


def test_429_waits_what_the_server_says_then_succeeds(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_backend(tmp_path, rate_limit_per_min=2) as (sim, backend):
            first = [await backend.create("run-l") for _ in range(2)]
            third = asyncio.ensure_future(backend.create("run-l"))
            while sim.stats().rate_limited < 2:
                await asyncio.sleep(0.01)
            sim.set_faults(rate_limit_per_min=None)
            handles = [*first, await third]
            rate_limited = sim.stats().rate_limited
            # each 429 waited its Retry-After (60 s), cut to the policy's max_wait (0.1 s)
            assert backend.waited_for_rate >= 0.1 * rate_limited - 1e-6
            assert sim.stats().alive == 3 == len({h.sandbox_id for h in handles})
            assert sim.stats().creates_requested == 3 + rate_limited
    run(go())


@pytest.mark.parametrize("transport", ("ssh", "toolbox"))
def test_a_broken_sandbox_is_not_alive(tmp_path: Path, transport: str) -> None:
    async def go() -> None:
        async with sim_backend(tmp_path, transport=transport, probe_fail_rate=1.0) as (sim, backend):
            assert not await backend.is_alive(await backend.create("run-p"))
    run(go())


def test_a_hung_create_times_out_and_is_deleted(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_backend(tmp_path, create_hang_rate=1.0, create_timeout=0.5) as (sim, backend):
            with pytest.raises(SandboxError, match="timed out") as caught:
                await backend.create("run-h")
            assert "\n" not in str(caught.value)
            stats = sim.stats()
            assert (stats.hung, stats.creates_requested, stats.alive) == (1, 1, 0)
            assert await backend.list_sandboxes("run-h") == []
    run(go())


def test_a_wrong_key_is_one_line_never_retried_never_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wrong = "dtn_wrong_0123456789abcdef"
    monkeypatch.setenv("DAYTONA_API_KEY", wrong)

    async def go() -> None:
        async with sim_backend(tmp_path) as (sim, backend):
            calls = (backend.create("run-w"), backend.list_sandboxes("run-w"),
                     backend.delete(SandboxHandle("no-such-id", "run-w")))
            for call in calls:
                with pytest.raises(BackendAuthError) as caught:
                    await call
                message = str(caught.value)
                assert wrong not in message and "\n" not in message and "DAYTONA_API_KEY" in message
            assert sim.requests[CREATE] == 1 and sim.requests[("GET", "/api/sandbox")] == 1
            assert sim.requests[("GET", "/api/sandbox/no-such-id")] == 1
            assert sim.stats().creates_requested == 0
    run(go())


def test_a_missing_key_names_what_to_set_and_sends_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DAYTONA_API_KEY")

    async def go() -> None:
        async with sim_backend(tmp_path) as (sim, backend):
            with pytest.raises(BackendAuthError, match="DAYTONA_API_KEY is not set"):
                await backend.create("run-m")
            assert sum(sim.requests.values()) == 0
    run(go())


def test_labels_given_by_the_caller_cannot_move_a_sandbox_to_another_run(tmp_path: Path) -> None:
    async def go() -> None:
        async with sim_backend(tmp_path) as (sim, backend):
            box = await backend.create("run-x", {RUN_LABEL: "someone-else"})
            assert box.labels[RUN_LABEL] == "run-x"
            assert [h.sandbox_id for h in await backend.list_sandboxes("run-x")] == [box.sandbox_id]
    run(go())
