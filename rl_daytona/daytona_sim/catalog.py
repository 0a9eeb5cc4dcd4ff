"""Snapshots and warm pools of daytona-sim.

Invariant: a snapshot is usable for creates only while 'active'; a Dockerfile build is
answered in state building (so the SDK streams its log at once) and goes to active, or to
build_failed with the first problem as errorReason (the Dockerfile's, or a context hash of the
request whose tar was never uploaded to object storage), appending one log line per step to a
log that `follow` readers stream until the build ends. Two snapshots are pre-registered:
`DEFAULT_SNAPSHOT` (class 'container', used when a create names none) and `VM_SNAPSHOT` (class
'linux-vm', the only class that can fork); a build's class is the `sandboxClass` of its request
(default 'container').

A warm pool keeps `pool` started, unclaimed sandboxes of its snapshot (members carry
`warmPoolId` and are hidden from lists); a create of that snapshot with no env vars claims one
(warm latency instead of cold) and a background task refills the pool.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

from rl_daytona.daytona_sim.dockerfile import DockerfileError, build_steps
from rl_daytona.daytona_sim.state import (
    CONTAINER, LINUX_VM, ORG_ID, TARGET, Counters, SandboxRecord, SimError, new_id, now_iso,
)


class Engine(Protocol):
    """What the catalog needs of the sandbox engine it is bound to (the engine imports the
    catalog, never the other way round)."""

    counters: Counters
    records: dict[str, SandboxRecord]

    async def make_member(self, snapshot: str, sandbox_class: str, pool_id: str) -> SandboxRecord | None: ...

    async def destroy(self, record: SandboxRecord) -> None: ...

DEFAULT_SNAPSHOT = "daytona-sim/default"
VM_SNAPSHOT = "daytona-sim/vm"
BUILD_START_SECONDS = 1.0  # x time_scale: before the first step (or pending -> pulling)
STEP_SECONDS = 0.5  # x time_scale per Dockerfile step


@dataclass
class SnapshotRecord:
    id: str
    name: str
    sandbox_class: str
    image_name: str | None = None
    dockerfile: str | None = None
    context_hashes: list[str] = field(default_factory=list)
    state: str = "active"
    error_reason: str | None = None
    logs: list[str] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    created_at: str = field(default_factory=now_iso)
    updated_at: str = field(default_factory=now_iso)

    @property
    def finished(self) -> bool:
        return self.state in ("active", "build_failed", "error")

    def set_state(self, state: str, error_reason: str | None = None) -> None:
        self.state, self.error_reason, self.updated_at = state, error_reason, now_iso()
        self.poke()

    def log(self, line: str) -> None:
        self.logs.append(line)
        self.poke()

    def poke(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    def dto(self) -> dict[str, Any]:
        build = None if self.dockerfile is None else {
            "dockerfileContent": self.dockerfile, "contextHashes": list(self.context_hashes),
            "createdAt": self.created_at, "updatedAt": self.updated_at, "snapshotRef": f"daytona-sim/{self.id}"}
        return {"id": self.id, "organizationId": ORG_ID, "general": False, "name": self.name,
                "imageName": self.image_name, "state": self.state, "size": 0.1, "entrypoint": None,
                "cpu": 1, "gpu": 0, "mem": 1, "disk": 3, "errorReason": self.error_reason,
                "createdAt": self.created_at, "updatedAt": self.updated_at, "lastUsedAt": None,
                "buildInfo": build, "regionIds": [TARGET], "ref": f"daytona-sim/{self.id}",
                "sourceSandboxId": None, "sandboxClass": self.sandbox_class}


@dataclass
class WarmPoolRecord:
    id: str
    snapshot: str
    sandbox_class: str
    pool: int
    members: list[str] = field(default_factory=list)
    filling: int = 0
    created_at: str = field(default_factory=now_iso)
    updated_at: str = field(default_factory=now_iso)
    error_reason: str | None = None

    def dto(self) -> dict[str, Any]:
        return {"id": self.id, "organizationId": ORG_ID, "snapshot": self.snapshot, "target": TARGET,
                "pool": self.pool, "currentSize": len(self.members), "cpu": 1, "mem": 1, "disk": 3,
                "osUser": "daytona", "env": {}, "errorReason": self.error_reason,
                "createdAt": self.created_at, "updatedAt": self.updated_at}


class Catalog:
    """Snapshots by id and name, warm pools and their refill tasks."""

    def __init__(self, time_scale: float, uploaded: Callable[[str], bool] = lambda context_hash: False) -> None:
        self.time_scale, self._uploaded = time_scale, uploaded
        self.snapshots: dict[str, SnapshotRecord] = {}
        self.pools: dict[str, WarmPoolRecord] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._engine: Engine | None = None
        for name, cls in ((DEFAULT_SNAPSHOT, CONTAINER), (VM_SNAPSHOT, LINUX_VM)):
            self._add(SnapshotRecord(new_id(), name, cls, image_name=name))

    def bind(self, engine: Engine) -> None:
        self._engine = engine

    def _add(self, snap: SnapshotRecord) -> SnapshotRecord:
        self.snapshots[snap.id] = snap
        return snap

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ----- snapshots ---------------------------------------------------------------------
    def snapshot(self, id_or_name: str) -> SnapshotRecord:
        found = self.snapshots.get(id_or_name) or next(
            (s for s in self.snapshots.values() if s.name == id_or_name), None)
        if found is None:
            raise SimError(404, f"Snapshot {id_or_name} not found")
        return found

    def usable_snapshot(self, name: str | None) -> SnapshotRecord:
        snap = self.snapshot(name or DEFAULT_SNAPSHOT)
        if snap.state != "active":
            raise SimError(400, f"Snapshot {snap.name} is {snap.state}; only an active snapshot can be used")
        return snap

    def create_snapshot(self, body: Mapping[str, Any]) -> SnapshotRecord:
        name = str(body.get("name") or "").strip()
        if not name:
            raise SimError(400, "name must not be empty")
        if any(s.name == name for s in self.snapshots.values()):
            raise SimError(409, f"Snapshot with name {name} already exists")
        build = body.get("buildInfo") or {}
        dockerfile = build.get("dockerfileContent")
        if dockerfile is None and not body.get("imageName"):
            raise SimError(400, "either imageName or buildInfo.dockerfileContent is required")
        snap = self._add(SnapshotRecord(new_id(), name, str(body.get("sandboxClass") or CONTAINER),
                                        image_name=body.get("imageName"), dockerfile=dockerfile,
                                        context_hashes=[str(h) for h in build.get("contextHashes") or []],
                                        state="building" if dockerfile is not None else "pending"))
        self._spawn(self._build(snap))
        return snap

    async def _build(self, snap: SnapshotRecord) -> None:
        await asyncio.sleep(BUILD_START_SECONDS * self.time_scale)
        if snap.state == "pending":
            snap.set_state("pulling")
        try:
            steps = build_steps(snap.dockerfile) if snap.dockerfile is not None else [f"FROM {snap.image_name}"]
            missing = [h for h in snap.context_hashes if not self._uploaded(h)]
            if missing:
                raise DockerfileError(f"build context {missing[0]} was not uploaded to object storage")
        except DockerfileError as exc:
            snap.log(f"ERROR: {exc}")
            snap.set_state("build_failed", str(exc))
            return
        for i, step in enumerate(steps, 1):
            await asyncio.sleep(STEP_SECONDS * self.time_scale)
            snap.log(f"Step {i}/{len(steps)} : {step}")
        snap.log(f"Successfully built snapshot {snap.name}")
        if self._engine is not None:
            self._engine.counters.snapshots_built += 1
        snap.set_state("active")

    def remove_snapshot(self, id_or_name: str) -> None:
        snap = self.snapshot(id_or_name)
        del self.snapshots[snap.id]

    # ----- warm pools --------------------------------------------------------------------
    def pool(self, pool_id: str) -> WarmPoolRecord:
        if pool_id not in self.pools:
            raise SimError(404, f"Warm pool {pool_id} not found")
        return self.pools[pool_id]

    def create_pool(self, body: Mapping[str, Any]) -> WarmPoolRecord:
        snap = self.usable_snapshot(str(body.get("snapshot") or ""))
        size = body.get("pool")
        if not isinstance(size, (int, float)) or size < 1:
            raise SimError(400, f"pool must be a number of at least 1, got {size!r}")
        pool = WarmPoolRecord(new_id(), snap.name, snap.sandbox_class, int(size))
        self.pools[pool.id] = pool
        self._spawn(self._refill(pool))
        return pool

    def update_pool(self, pool_id: str, body: Mapping[str, Any]) -> WarmPoolRecord:
        pool = self.pool(pool_id)
        size = body.get("pool")
        if not isinstance(size, (int, float)) or size < 0:
            raise SimError(400, f"pool must be a number of at least 0, got {size!r}")
        pool.pool, pool.updated_at = int(size), now_iso()
        self._spawn(self._refill(pool))
        return pool

    async def delete_pool(self, pool_id: str) -> None:
        pool = self.pools.pop(self.pool(pool_id).id)
        await self._drop_members(pool, 0)

    def claim_warm(self, snapshot: str, env: Mapping[str, str], body: Mapping[str, Any]) -> SandboxRecord | None:
        """A ready member of a pool of `snapshot` (None: no pool, none ready, or claim rules fail)."""
        if env or body.get("volumes") or body.get("secrets") or body.get("user") or body.get("name"):
            return None
        assert self._engine is not None
        for pool in self.pools.values():
            if pool.snapshot == snapshot and pool.members:
                record = self._engine.records.get(pool.members.pop(0))
                self._spawn(self._refill(pool))
                if record is not None and record.state == "started":
                    return record
        return None

    async def _refill(self, pool: WarmPoolRecord) -> None:
        assert self._engine is not None
        if len(pool.members) > pool.pool:
            await self._drop_members(pool, pool.pool)
        while pool.id in self.pools and len(pool.members) + pool.filling < pool.pool:
            pool.filling += 1
            try:
                record = await self._engine.make_member(pool.snapshot, pool.sandbox_class, pool.id)
            finally:
                pool.filling -= 1
            if record is None:
                continue
            if pool.id in self.pools and len(pool.members) < pool.pool:
                pool.members.append(record.id)
            else:
                await self._engine.destroy(record)

    async def _drop_members(self, pool: WarmPoolRecord, keep: int) -> None:
        assert self._engine is not None
        while len(pool.members) > keep:
            sid = pool.members.pop()
            if sid in self._engine.records:
                await self._engine.destroy(self._engine.records[sid])

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.pools.clear()
