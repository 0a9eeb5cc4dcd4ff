"""A DaytonaBackend driven against a started daytona-sim, the real SDK and real asyncssh.

`LocalGate` stands in for the Ray-shared rate window (`local_gate`), so these tests behave the
same whether or not the session's Ray was started earlier in the process.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, TypeVar

import pytest
from aiohttp import web

from rl_daytona.backends.daytona import DaytonaBackend
from rl_daytona.backends.daytona_limits import CreateGate, LocalGate
from rl_daytona.backends.daytona_options import DaytonaOptions
from rl_daytona.backends.daytona_retry import RetryPolicy
from rl_daytona.daytona_sim import DEFAULT_SNAPSHOT, DaytonaSim, SimConfig
from rl_daytona.types import SandboxLimits

T = TypeVar("T")
SCALE = 0.02  # simulated delays x 0.02
SIM_KEY = "sim-key-7c1f0e9a5b"
QUICK_RETRY = RetryPolicy(attempts=8, base=0.02, cap=0.1, max_wait=0.1)


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(asyncio.wait_for(coro, timeout=120))  # type: ignore[arg-type]


def local_gate(run_id: str, per_minute: int) -> CreateGate:
    return LocalGate(per_minute)


class CountingSim(DaytonaSim):
    """The sim with a record of every HTTP request it was sent (method, path)."""

    def __init__(self, config: SimConfig) -> None:
        super().__init__(config)
        self.requests: Counter[tuple[str, str]] = Counter()

    def _app(self) -> web.Application:
        app = super()._app()

        @web.middleware
        async def count(request: web.Request, handler: Any) -> web.StreamResponse:
            self.requests[(request.method, request.path)] += 1
            return await handler(request)

        app.middlewares.insert(0, count)
        return app


@asynccontextmanager
async def sim_backend(root: Path, *, transport: str = "ssh", snapshot: str = DEFAULT_SNAPSHOT,
                      create_timeout: float = 30.0, retry: RetryPolicy = QUICK_RETRY,
                      limits: SandboxLimits = SandboxLimits(), **sim: Any,
                      ) -> AsyncIterator[tuple[CountingSim, DaytonaBackend]]:
    """A started sim (stopped, sandboxes deleted, on exit) and a DaytonaBackend pointed at it."""
    sim.setdefault("time_scale", SCALE)
    sim.setdefault("api_key", SIM_KEY)
    server = CountingSim(SimConfig(root=str(root / "sim"), **sim))
    await server.start()
    options = DaytonaOptions(snapshot=snapshot, api_url=server.api_url, transport=transport,
                             create_timeout=create_timeout)
    backend = DaytonaBackend(options, limits=limits, retry=retry, gate_for=local_gate)
    try:
        yield server, backend
    finally:
        await backend.close()
        await server.stop()


@pytest.fixture
def daytona_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """This process's DAYTONA_API_KEY is the sim's; no other DAYTONA_* setting leaks in."""
    for name in ("DAYTONA_API_URL", "DAYTONA_TARGET", "DAYTONA_SSH_GATEWAY", "DAYTONA_JWT_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DAYTONA_API_KEY", SIM_KEY)
    return SIM_KEY
