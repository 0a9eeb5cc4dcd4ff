"""What a backend can do for the SandboxPool beyond plain creates: warm pools and fork trees.

Invariant: the pool learns the backend's facts from the provider (never assumed): the run's
snapshot's class decides whether children are forked (only a VM-class sandbox can fork on
Daytona), and the region of the run's first real sandbox is the one a warm pool is made in. A warm pool exists only while the
claim rules hold (the run's creates name one snapshot, default resources and user, no env
vars, volumes or secrets: the Daytona backend's creates never set those), is sized to the
demand the pool was told, and is removed at the end unless it was there before the run.
`NoProvisioner` is what the local backend gets: cold creates (cheap there) and no warm pool.
"""

from __future__ import annotations

from typing import Any, Protocol

from rl_daytona.backends.base import SandboxHandle

VM_CLASS = "linux-vm"


class Provisioner(Protocol):
    forkable: bool

    async def start(self) -> None:
        """Read what is known before any sandbox exists (the snapshot's class)."""
        ...

    async def learn(self, first: SandboxHandle) -> None:
        """Read the backend's facts (class, region) from the run's first sandbox."""
        ...

    async def size_for(self, demand: int) -> None:
        """Keep about `demand` sandboxes warm on the provider's side (0: none)."""
        ...

    async def close(self) -> dict[str, Any]:
        """Undo what was made for the run (a warm pool); returns what was done, for the stats."""
        ...


class NoProvisioner:
    """Cold creates only (and forks when the backend says it can: `ModelBackend`)."""

    def __init__(self, forkable: bool = False) -> None:
        self.forkable = forkable

    async def start(self) -> None:
        return None

    async def learn(self, first: SandboxHandle) -> None:
        return None

    async def size_for(self, demand: int) -> None:
        return None

    async def close(self) -> dict[str, Any]:
        return {}


class DaytonaProvisioner:
    """A Daytona warm pool sized to the batch, and forking when the snapshot is a VM snapshot."""

    def __init__(self, backend: Any, max_warm: int = 256) -> None:
        self.backend, self.max_warm = backend, max_warm
        self.forkable = False
        self.region: str | None = None
        self.sandbox_class: str | None = None
        self._learned = False
        self._pool_id: str | None = None
        self._owned = False
        self._demand = 0
        self.events: list[str] = []

    async def start(self) -> None:
        from rl_daytona.backends.daytona_retry import call_with_retries

        snapshot = self.backend.options.snapshot
        if snapshot:
            found = await call_with_retries(lambda: self.backend.client.snapshot.get(snapshot),
                                            "read the run's snapshot", self.backend.retry)
            self.sandbox_class = found.sandbox_class
            self.forkable = found.sandbox_class == VM_CLASS

    async def learn(self, first: SandboxHandle) -> None:
        if self._learned:
            return
        self._learned = True
        box = await self.backend.client.get(first.sandbox_id)
        self.region = box.target
        await self._apply()

    async def size_for(self, demand: int) -> None:
        self._demand = max(0, demand)
        if self._learned:
            await self._apply()

    async def close(self) -> dict[str, Any]:
        if self._pool_id is not None and self._owned:
            try:
                await self.backend.client.warm_pool.delete(self._pool_id)
                self.events.append(f"deleted warm pool {self._pool_id}")
            except Exception as exc:  # noqa: BLE001 - reported, the run still ends
                self.events.append(f"could not delete warm pool {self._pool_id}: {type(exc).__name__}")
        return {"region": self.region, "sandbox_class": self.sandbox_class, "forkable": self.forkable,
                "warm_pool": self._pool_id, "warm_pool_events": list(self.events)}

    async def _apply(self) -> None:
        """Create or resize the warm pool to the demand (forking runs need none)."""
        if not self.backend.options.warm_pool or self.forkable or not self.backend.options.snapshot:
            return
        size = min(self._demand, self.max_warm)
        client, snapshot = self.backend.client, self.backend.options.snapshot
        try:
            if self._pool_id is None and size > 0:
                await self._create(client, snapshot, size)
            elif self._pool_id is not None and self._owned:
                await client.warm_pool.update(self._pool_id, size)
                self.events.append(f"resized warm pool to {size}")
        except Exception as exc:  # noqa: BLE001 - a warm pool is an optimisation: cold creates still work
            self.events.append(f"warm pool not used: {type(exc).__name__}: {str(exc)[:160]}")

    async def _create(self, client: Any, snapshot: str, size: int) -> None:
        existing = [p for p in await client.warm_pool.list()
                    if p.snapshot == snapshot and (self.region is None or p.target == self.region)]
        if existing:  # another run's (or a standing) pool: use it, leave it as it was
            self._pool_id, self._owned = existing[0].id, False
            self.events.append(f"using existing warm pool {existing[0].id}")
            return
        pool = await client.warm_pool.create(snapshot, pool=size, target=self.region)
        self._pool_id, self._owned = pool.id, True
        self.events.append(f"created warm pool {pool.id} of {size} in {self.region}")


def make_provisioner(backend: Any) -> Provisioner:
    """The provisioner a backend supports."""
    if getattr(backend, "name", "") == "daytona":
        return DaytonaProvisioner(backend, max_warm=backend.options.max_creating)
    return NoProvisioner(forkable=getattr(backend, "name", "") == "model" and bool(backend.forkable))
