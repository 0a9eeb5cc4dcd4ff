"""The published latency model as a backend, in virtual time: plan studies in milliseconds.

Invariant: `ModelBackend` draws every delay from daytona-sim's pure latency model
(`rl_daytona.daytona_sim.latency`: cold create by creates in flight, fork 0.66 s, one fork at a
time per parent, the overload failures past 256 in flight) plus `fail_rate` injected failures,
and holds no sandbox anywhere (handles only). Run under `VirtualClock`, an asyncio loop whose
clock jumps to the next timer whenever nothing is ready, simulated seconds cost no real time,
so the pool and the planner run unchanged against the model; its figures are the model's, not
a measurement of any server.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from typing import Any, Coroutine, Mapping, TypeVar

from rl_daytona.backends.base import WORKSPACE, ExecResult, SandboxError, SandboxHandle
from rl_daytona.daytona_sim import latency

T = TypeVar("T")


class VirtualClock(asyncio.SelectorEventLoop):
    """An event loop on simulated time (for coroutines that only sleep and wait on each other)."""

    def __init__(self) -> None:
        super().__init__()
        self._virtual = 0.0

    def time(self) -> float:
        return self._virtual

    def _run_once(self) -> None:
        ready, scheduled = self._ready, self._scheduled  # type: ignore[attr-defined]
        if not ready and scheduled:
            self._virtual = max(self._virtual, scheduled[0]._when)
        super()._run_once()  # type: ignore[misc]


def run_virtual(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to completion on a fresh `VirtualClock`."""
    loop = VirtualClock()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


class ModelBackend:
    """Creates, forks and probes that take the model's time; see the module docstring."""

    name = "model"

    def __init__(self, *, forkable: bool = True, fail_rate: float = 0.0, probe_seconds: float = 0.05,
                 seed: int = 0) -> None:
        self.forkable, self.fail_rate, self.probe_seconds = forkable, fail_rate, probe_seconds
        self.rng = random.Random(seed)
        self.in_flight = 0
        self.alive: dict[str, SandboxHandle] = {}
        self._forking: set[str] = set()

    async def create(self, run_id: str, labels: Mapping[str, str] | None = None) -> SandboxHandle:
        self.in_flight += 1
        failed = (self.rng.random() < self.fail_rate
                  or self.rng.random() < latency.overload_fail_rate(self.in_flight))
        try:
            await asyncio.sleep(latency.sample_cold(self.in_flight, self.rng))
        finally:
            self.in_flight -= 1
        if failed:
            raise SandboxError("model: injected create failure")
        handle = SandboxHandle(uuid.uuid4().hex[:12], run_id, None, dict(labels or {}))
        self.alive[handle.sandbox_id] = handle
        return handle

    async def fork(self, parent: SandboxHandle) -> SandboxHandle:
        if not self.forkable or parent.sandbox_id in self._forking or parent.sandbox_id not in self.alive:
            raise SandboxError(f"model: sandbox {parent.sandbox_id} cannot be forked now")
        self._forking.add(parent.sandbox_id)
        try:
            await asyncio.sleep(latency.sample_fork(self.rng))
        finally:
            self._forking.discard(parent.sandbox_id)
        child = SandboxHandle(uuid.uuid4().hex[:12], parent.run_id, parent.sandbox_id, dict(parent.labels))
        self.alive[child.sandbox_id] = child
        return child

    async def exec(self, sandbox: SandboxHandle, command: str, *, timeout: float = 60.0, cwd: str = WORKSPACE,
                   stdin: bytes | None = None, env: Mapping[str, str] | None = None) -> ExecResult:
        await asyncio.sleep(self.probe_seconds)
        return ExecResult(0, "", "", self.probe_seconds)

    async def write_files(self, sandbox: SandboxHandle, files: Mapping[str, bytes | str]) -> None:
        return None

    async def read_file(self, sandbox: SandboxHandle, path: str) -> bytes:
        raise FileNotFoundError(path)

    async def is_alive(self, sandbox: SandboxHandle) -> bool:
        await asyncio.sleep(self.probe_seconds)
        return sandbox.sandbox_id in self.alive

    async def delete(self, sandbox: SandboxHandle) -> None:
        self.alive.pop(sandbox.sandbox_id, None)

    async def list_sandboxes(self, run_id: str | None = None) -> list[SandboxHandle]:
        return [h for h in self.alive.values() if run_id is None or h.run_id == run_id]

    async def close(self) -> None:
        return None
