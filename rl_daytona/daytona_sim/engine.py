"""The sandboxes of daytona-sim: Daytona's lifecycle on top of real LocalBackend sandboxes.

Invariant: every sandbox the API reports as started is a LocalBackend sandbox that commands
really run in (cwd /workspace); a create is answered at once in state 'creating' and moves to
'started' (or 'error') after the latency model's delay x time_scale, in a task the engine owns;
deleting a sandbox cancels its bring-up and deletes its LocalBackend sandbox, and `close()`
deletes every one. A parent serves one fork at a time (a second one gets 409), and only
sandboxes of class 'linux-vm' (from a VM snapshot) can be forked.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import random
import secrets
import time
from typing import Any, Callable, Mapping

from rl_daytona.backends.base import ExecResult
from rl_daytona.backends.local import LocalBackend
from rl_daytona.daytona_sim import faults, latency
from rl_daytona.daytona_sim.catalog import Catalog
from rl_daytona.daytona_sim.state import (
    LINUX_VM, Counters, SandboxRecord, SimError, SimStats, SshToken, new_id,
)

RUN_ID = "daytona-sim"


class Engine:
    """Sandbox records, their bring-up tasks, ssh tokens and counters."""

    def __init__(self, config: Any, backend: LocalBackend, catalog: Catalog) -> None:
        self.config, self.backend, self.catalog = config, backend, catalog
        self.rng = random.Random(config.seed)
        self.records: dict[str, SandboxRecord] = {}
        self.tokens: dict[str, SshToken] = {}
        self.counters = Counters()
        self.limiter = faults.RateLimiter(config.rate_limit_per_min)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._in_flight = 0
        self.listener: Callable[[SandboxRecord, str], None] | None = None  # state-change events
        catalog.bind(self)

    # ----- create ------------------------------------------------------------------------
    def create(self, body: Mapping[str, Any]) -> SandboxRecord:
        """Admit one create (429 past the rate limit) and start bringing it up."""
        self.counters.creates_requested += 1
        throttled = self.limiter.admit(time.monotonic())
        if throttled is not None:
            self.counters.rate_limited += 1
            raise SimError(429, "ThrottlerException: Too Many Requests", throttled.headers())
        snap = self.catalog.usable_snapshot(body.get("snapshot"))
        env = dict(body.get("env") or {})
        labels = {str(k): str(v) for k, v in dict(body.get("labels") or {}).items()}
        member = self.catalog.claim_warm(snap.name, env, body)
        if member is not None:
            return self._claimed(member, labels, env, body)
        record = self.new_record(snap.name, snap.sandbox_class, labels, env, body)
        self._in_flight += 1
        outcome, reason = faults.create_outcome(self.rng, self.config.create_fail_rate,
                                                self.config.create_hang_rate, self._in_flight)
        seconds = latency.sample_cold(self._in_flight, self.rng)
        self._spawn(record, self._bring_up(record, seconds, outcome, reason))
        return record

    def new_record(self, snapshot: str, sandbox_class: str, labels: dict[str, str],
                   env: dict[str, str], body: Mapping[str, Any]) -> SandboxRecord:
        sid = new_id()
        record = SandboxRecord(
            id=sid, name=str(body.get("name") or sid), snapshot=snapshot, sandbox_class=sandbox_class,
            labels=labels, env=env, auto_stop_interval=_num(body.get("autoStopInterval"), 15),
            auto_delete_interval=_num(body.get("autoDeleteInterval"), -1), listener=self.listener)
        if any(r.name == record.name for r in self.records.values()):
            raise SimError(409, f"Sandbox with name {record.name} already exists")
        self.records[sid] = record
        return record

    def _claimed(self, member: SandboxRecord, labels: dict[str, str], env: dict[str, str],
                 body: Mapping[str, Any]) -> SandboxRecord:
        member.labels, member.env, member.warm_pool_id = labels, env, None
        member.auto_stop_interval = _num(body.get("autoStopInterval"), 15)
        member.auto_delete_interval = _num(body.get("autoDeleteInterval"), -1)
        member.set_state("starting")
        self.counters.served_from_warm += 1
        self._in_flight += 1  # a warm claim is a create in flight too (the model's concurrency)
        seconds = latency.sample_warm(self._in_flight, self.rng)
        self._spawn(member, self._finish_start(member, seconds))
        return member

    def _spawn(self, record: SandboxRecord, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks[record.id] = task
        task.add_done_callback(lambda t, sid=record.id: self._forget_task(sid, t))

    def _forget_task(self, sandbox_id: str, task: asyncio.Task[None]) -> None:
        if self._tasks.get(sandbox_id) is task:
            del self._tasks[sandbox_id]

    async def _bring_up(self, record: SandboxRecord, seconds: float, outcome: str,
                        reason: str | None) -> None:
        if outcome == faults.HANG:  # stays 'creating' until deleted; no longer counted in flight
            self._in_flight -= 1
            self.counters.hung += 1
            await asyncio.Event().wait()
        try:
            await asyncio.sleep(seconds * self.config.time_scale)
            if outcome == faults.FAIL:
                self.counters.failed += 1
                record.set_state("error", reason)
                return
            record.handle = await self.backend.create(RUN_ID, {"daytona_id": record.id})
            self._started(record)
        finally:
            self._in_flight -= 1

    async def _finish_start(self, record: SandboxRecord, seconds: float) -> None:
        try:
            await asyncio.sleep(seconds * self.config.time_scale)
            record.set_state("started")
        finally:
            self._in_flight -= 1

    def _started(self, record: SandboxRecord) -> None:
        record.broken = faults.is_broken(self.rng, self.config.probe_fail_rate)
        self.counters.created += 1
        record.set_state("started")

    async def make_member(self, snapshot: str, sandbox_class: str, pool_id: str) -> SandboxRecord | None:
        """A cold-started warm-pool member (not a requested create); None if deleted meanwhile."""
        record = self.new_record(snapshot, sandbox_class, {}, {}, {})
        record.warm_pool_id = pool_id
        seconds = latency.sample_cold(self._in_flight + 1, self.rng)
        await asyncio.sleep(seconds * self.config.time_scale)
        if record.id not in self.records:
            return None
        record.handle = await self.backend.create(RUN_ID, {"daytona_id": record.id})
        record.set_state("started")
        return record

    # ----- read --------------------------------------------------------------------------
    def get(self, id_or_name: str) -> SandboxRecord:
        record = self.records.get(id_or_name)
        if record is None:
            record = next((r for r in self.records.values() if r.name == id_or_name), None)
        if record is None:
            raise SimError(404, f"Sandbox with ID or name {id_or_name} not found")
        return record

    def listed(self, labels: Mapping[str, str], include_warm: bool = False,
               states: list[str] | None = None) -> list[SandboxRecord]:
        """Records whose labels include every pair of `labels`, oldest first."""
        found = [r for r in self.records.values()
                 if all(r.labels.get(k) == v for k, v in labels.items())
                 and (include_warm or r.warm_pool_id is None)
                 and (not states or r.state in states)]
        return sorted(found, key=lambda r: (r.created_at, r.id))

    def stats(self) -> SimStats:
        c = self.counters
        alive = [r for r in self.records.values() if r.warm_pool_id is None]
        return SimStats(c.creates_requested, c.created, c.failed, c.hung, c.rate_limited, c.deleted,
                        c.forks, len(alive), c.served_from_warm, c.snapshots_built,
                        tuple((r.id, dict(r.labels)) for r in alive))

    # ----- delete ------------------------------------------------------------------------
    async def delete(self, id_or_name: str) -> SandboxRecord:
        record = self.get(id_or_name)
        await self.destroy(record)
        self.counters.deleted += 1
        return record

    async def destroy(self, record: SandboxRecord) -> None:
        """Cancel the bring-up, delete the local sandbox, forget the record and its tokens."""
        self.records.pop(record.id, None)
        task = self._tasks.pop(record.id, None)
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        for token in [t for t in self.tokens.values() if t.sandbox_id == record.id]:
            self.tokens.pop(token.token, None)
        if record.handle is not None:
            handle, record.handle = record.handle, None
            await self.backend.delete(handle)
        record.set_state("destroyed")

    async def close(self) -> None:
        """Delete every sandbox (warm-pool members too, and any local one a cancelled task left)."""
        await self.catalog.close()
        for record in list(self.records.values()):
            await self.destroy(record)
        for handle in await self.backend.list_sandboxes(RUN_ID):
            await self.backend.delete(handle)

    # ----- fork --------------------------------------------------------------------------
    def fork(self, id_or_name: str, name: str | None) -> SandboxRecord:
        parent = self.get(id_or_name)
        if parent.sandbox_class != LINUX_VM:
            raise SimError(400, f"Sandbox {parent.id} cannot be forked: fork needs a linux-vm sandbox "
                                f"(its snapshot {parent.snapshot} is a {parent.sandbox_class} snapshot)")
        if parent.state != "started" or parent.handle is None:
            raise SimError(409, f"Sandbox {parent.id} is {parent.state}; only a started sandbox can be forked")
        if parent.forking:
            raise SimError(409, f"Sandbox {parent.id} is already being forked; one fork at a time per sandbox")
        child = self.new_record(parent.snapshot, parent.sandbox_class, dict(parent.labels),
                                dict(parent.env), {"name": name})
        child.parent_id, parent.forking = parent.id, True
        self._spawn(child, self._fork(parent, child))
        return child

    async def _fork(self, parent: SandboxRecord, child: SandboxRecord) -> None:
        try:
            assert parent.handle is not None
            started = time.monotonic()
            child.handle = await self.backend.fork(parent.handle)
            rest = latency.sample_fork(self.rng) * self.config.time_scale - (time.monotonic() - started)
            await asyncio.sleep(max(0.0, rest))
            self.counters.forks += 1
            child.set_state("started")
        except Exception as exc:  # a failed fork is the child's error state, not a server crash
            if child.state != "destroyed":
                child.set_state("error", f"fork failed: {exc}")
        finally:
            parent.forking = False

    # ----- run ---------------------------------------------------------------------------
    async def exec(self, record: SandboxRecord, command: str, *, timeout: float, cwd: str | None,
                   env: Mapping[str, str] | None = None, stdin: bytes | None = None) -> ExecResult:
        if record.state != "started" or record.handle is None:
            raise SimError(409, f"Sandbox {record.id} is {record.state}, not started")
        if record.broken:
            return ExecResult(1, "", "daytona-sim: connection refused (injected probe failure)\n", 0.0)
        merged = {**record.env, **dict(env or {})}
        return await self.backend.exec(record.handle, command, timeout=timeout, cwd=cwd or "/workspace",
                                       stdin=stdin, env=merged or None)

    # ----- ssh access --------------------------------------------------------------------
    def grant_ssh(self, id_or_name: str, minutes: int | None) -> SshToken:
        record = self.get(id_or_name)
        now = dt.datetime.now(dt.timezone.utc)
        token = SshToken(new_id(), secrets.token_urlsafe(24), record.id,
                         now + dt.timedelta(minutes=minutes or 60), now)
        self.tokens[token.token] = token
        return token

    def valid_token(self, token: str) -> SshToken | None:
        grant = self.tokens.get(token)
        return grant if grant is not None and grant.valid() and grant.sandbox_id in self.records else None

    def revoke_ssh(self, id_or_name: str, token: str | None) -> SandboxRecord:
        record = self.get(id_or_name)
        for grant in [t for t in self.tokens.values() if t.sandbox_id == record.id]:
            if token is None or grant.token == token:
                self.tokens.pop(grant.token, None)
        return record


def _num(value: Any, default: float) -> float:
    return default if value is None else value
