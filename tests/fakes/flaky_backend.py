"""A real backend with failures injected at chosen calls: the way a cloud misbehaves."""

from __future__ import annotations

from typing import Mapping

from rl_daytona.backends.base import Backend, SandboxError, SandboxHandle


class FlakyBackend:
    """Wraps a real backend; fails the creates whose 0-based index is in `fail_creates`
    and reports dead on the probes of sandboxes listed in `dead`."""

    def __init__(self, inner: Backend, fail_creates: set[int] | None = None) -> None:
        self.inner, self.fail_creates = inner, fail_creates or set()
        self.name = inner.name
        self.create_calls = 0
        self.dead: set[str] = set()
        self.kill_next_probe = 0

    async def create(self, run_id: str, labels: Mapping[str, str] | None = None) -> SandboxHandle:
        index = self.create_calls
        self.create_calls += 1
        if index in self.fail_creates:
            raise SandboxError(f"injected create failure #{index}")
        return await self.inner.create(run_id, labels)

    async def is_alive(self, sandbox: SandboxHandle) -> bool:
        if self.kill_next_probe > 0:
            self.kill_next_probe -= 1
            self.dead.add(sandbox.sandbox_id)
            return False
        return await self.inner.is_alive(sandbox)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)
