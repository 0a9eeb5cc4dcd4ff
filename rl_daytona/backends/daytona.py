"""DaytonaBackend: the `Backend` protocol on Daytona's cloud through the `daytona` SDK.

Invariant: every sandbox is created from the run's snapshot with `ephemeral=True`,
`auto_stop_interval=0`, the run label and a per-create label, and no env vars (the API key
never reaches a sandbox); every create attempt passes the run's shared rate gate, at most
`max_creating` are in flight per backend, and an attempt that fails is cleaned up (deleted by
the id a timeout names, else by its per-create label) before it is retried or reported, so
nothing is left running; a rejected credential raises `BackendAuthError` and is never retried.
Each backend owns one `AsyncDaytona` per event loop; commands go over SSH (one connection per
sandbox) or, as the fallback, the toolbox API (`daytona_toolbox`).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Callable, Mapping

from daytona import (
    AsyncDaytona, AsyncSandbox, CreateSandboxFromSnapshotParams, DaytonaConfig, DaytonaError,
    DaytonaNotFoundError, DaytonaTimeoutError, DaytonaValidationError, ListSandboxesQuery,
)

from rl_daytona.backends.base import WORKSPACE, BackendAuthError, ExecResult, SandboxError, SandboxHandle
from rl_daytona.backends.daytona_limits import CreateGate, create_gate
from rl_daytona.backends.daytona_options import CREATE_LABEL, RUN_LABEL, DaytonaOptions, api_key
from rl_daytona.backends.daytona_retry import (
    RetryPolicy, StartFailedError, call_with_retries, classify, one_line, FATAL, WAIT,
)
from rl_daytona.backends.daytona_ssh import SshConnections, SshTarget, parse_ssh_command
from rl_daytona.backends.daytona_toolbox import ToolboxCommands
from rl_daytona.backends.daytona_transport import SshWithToolboxFallback
from rl_daytona.types import SandboxLimits

GateFactory = Callable[[str, int], CreateGate]


class DaytonaBackend:
    """Sandboxes on Daytona; see the module docstring for the guarantees."""

    name = "daytona"
    # A sandbox's processes outlive the command that started them: the grader ends every one the
    # agent left (rl_daytona/tasks/grader_reap.py) before it grades.
    grading_needs_reap = True

    def __init__(self, options: DaytonaOptions, limits: SandboxLimits = SandboxLimits(),
                 retry: RetryPolicy = RetryPolicy(), gate_for: GateFactory = create_gate) -> None:
        self.options, self.limits, self.retry, self._gate_for = options.resolved(), limits, retry, gate_for
        self._boxes: dict[str, AsyncSandbox] = {}
        self._fork_locks: dict[str, asyncio.Lock] = {}
        self._inflight: asyncio.Semaphore | None = None
        self._gates: dict[str, CreateGate] = {}
        self._client: tuple[asyncio.AbstractEventLoop, AsyncDaytona] | None = None
        toolbox = ToolboxCommands(self._box, limits.max_output_bytes)
        self._commands: SshWithToolboxFallback | ToolboxCommands = (
            SshWithToolboxFallback(SshConnections(self._ssh_target, limits.max_output_bytes,
                                                  self.options.ssh_connect_seconds), toolbox)
            if self.options.transport == "ssh" else toolbox)
        self.waited_for_rate = 0.0

    @property
    def client(self) -> AsyncDaytona:
        """This backend's AsyncDaytona for the running loop (its HTTP session binds to the loop)."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._client[0] is not loop:
            config = DaytonaConfig(api_key=api_key(), api_url=self.options.api_url,
                                   target=self.options.target or None,
                                   connection_pool_maxsize=max(64, self.options.max_creating * 2))
            self._client, self._boxes = (loop, AsyncDaytona(config)), {}
        return self._client[1]

    # -- lifecycle ----------------------------------------------------------------------

    async def create(self, run_id: str, labels: Mapping[str, str] | None = None) -> SandboxHandle:
        unique = uuid.uuid4().hex
        tags = {**dict(labels or {}), RUN_LABEL: run_id, CREATE_LABEL: unique}
        self._inflight = self._inflight or asyncio.Semaphore(self.options.max_creating)
        async with self._inflight:
            try:
                box = await call_with_retries(lambda: self._create_once(run_id, tags), "create a sandbox",
                                              self.retry, self._count_wait)
            except (BackendAuthError, SandboxError):
                raise
            except Exception as exc:  # noqa: BLE001 - attempts ran out: report in one line
                raise SandboxError(f"sandbox create failed: {one_line(exc)}") from None
        self._boxes[box.id] = box
        return SandboxHandle(box.id, run_id, None, dict(box.labels or tags))

    async def _create_once(self, run_id: str, tags: dict[str, str]) -> AsyncSandbox:
        """One create attempt behind the gate; a failed one leaves nothing behind."""
        params = CreateSandboxFromSnapshotParams(snapshot=self.options.snapshot or None, ephemeral=True,
                                                 auto_stop_interval=0, labels=dict(tags))
        self.waited_for_rate += await self._gate(run_id).acquire()
        try:
            return await self.client.create(params, timeout=self.options.create_timeout)
        except DaytonaTimeoutError as exc:
            await self._delete_leftover(exc.sandbox_id, tags[CREATE_LABEL])
            raise SandboxError(f"sandbox create timed out after {self.options.create_timeout:g} s "
                               "(the sandbox was deleted)") from None
        except Exception as exc:
            if classify(exc) not in (FATAL, WAIT):  # 401/429: the API made nothing
                await self._delete_leftover(None, tags[CREATE_LABEL])
            if _never_started(exc):
                raise StartFailedError(one_line(exc)) from None
            raise

    async def fork(self, parent: SandboxHandle) -> SandboxHandle:
        lock = self._fork_locks.setdefault(parent.sandbox_id, asyncio.Lock())
        async with lock:  # Daytona forks one child at a time per parent
            try:
                box = await self._box(parent.sandbox_id)
                child = await asyncio.wait_for(  # the SDK waits for the child without a limit
                    call_with_retries(lambda: box.fork(timeout=self.options.create_timeout), "fork a sandbox",
                                      self.retry, self._count_wait), self.options.create_timeout)
            except BackendAuthError:
                raise
            except asyncio.TimeoutError:
                raise SandboxError(f"fork of sandbox {parent.sandbox_id} timed out after "
                                   f"{self.options.create_timeout:g} s") from None
            except Exception as exc:  # noqa: BLE001
                raise SandboxError(f"fork of sandbox {parent.sandbox_id} failed: {one_line(exc)}") from None
        self._boxes[child.id] = child
        return SandboxHandle(child.id, parent.run_id, parent.sandbox_id, dict(child.labels or parent.labels))

    async def delete(self, sandbox: SandboxHandle) -> None:
        await self._commands.forget(sandbox.sandbox_id)
        self._fork_locks.pop(sandbox.sandbox_id, None)
        self._boxes.pop(sandbox.sandbox_id, None)
        try:
            await call_with_retries(lambda: self._delete_by_id(sandbox.sandbox_id), "delete a sandbox", self.retry)
        except DaytonaNotFoundError:
            return
        except BackendAuthError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise SandboxError(f"delete of sandbox {sandbox.sandbox_id} failed: {one_line(exc)}") from None

    async def _delete_by_id(self, sandbox_id: str) -> None:
        await self.client.delete(await self.client.get(sandbox_id))

    async def list_sandboxes(self, run_id: str | None = None) -> list[SandboxHandle]:
        query = ListSandboxesQuery(labels={RUN_LABEL: run_id}) if run_id else ListSandboxesQuery()

        async def listed() -> list[AsyncSandbox]:
            return [box async for box in self.client.list(query)]

        try:
            boxes = await call_with_retries(listed, "list sandboxes", self.retry)
        except BackendAuthError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise SandboxError(f"listing sandboxes failed: {one_line(exc)}") from None
        return [SandboxHandle(b.id, (b.labels or {}).get(RUN_LABEL, ""), None, dict(b.labels or {}))
                for b in boxes if RUN_LABEL in (b.labels or {})]

    async def is_alive(self, sandbox: SandboxHandle) -> bool:
        try:
            result = await self.exec(sandbox, "echo alive", timeout=15, cwd="/")
        except SandboxError:
            return False
        return result.exit_code == 0 and result.stdout.strip() == "alive"

    async def close(self) -> None:
        await self._commands.close()
        if self._client is not None:
            loop, client = self._client
            self._client, self._boxes = None, {}
            if loop is asyncio.get_running_loop():
                await client.close()

    # -- commands and files ---------------------------------------------------------------

    async def exec(self, sandbox: SandboxHandle, command: str, *, timeout: float = 60.0, cwd: str = WORKSPACE,
                   stdin: bytes | None = None, env: Mapping[str, str] | None = None) -> ExecResult:
        return await self._commands.run(sandbox.sandbox_id, command, timeout=timeout, cwd=cwd, stdin=stdin, env=env)

    async def write_files(self, sandbox: SandboxHandle, files: Mapping[str, bytes | str]) -> None:
        await self._commands.write_files(sandbox.sandbox_id, files)

    async def read_file(self, sandbox: SandboxHandle, path: str) -> bytes:
        return await self._commands.read_file(sandbox.sandbox_id, path)

    # -- helpers ----------------------------------------------------------------------------

    def _gate(self, run_id: str) -> CreateGate:
        gate = self._gates.get(run_id)
        if gate is None:
            self._gates[run_id] = gate = self._gate_for(run_id, self.options.creates_per_minute)
        return gate

    def _count_wait(self, seconds: float) -> None:
        self.waited_for_rate += seconds

    async def _box(self, sandbox_id: str) -> AsyncSandbox:
        client = self.client  # resets the cache when the loop changed
        box = self._boxes.get(sandbox_id)
        if box is None:
            try:
                box = await call_with_retries(lambda: client.get(sandbox_id), "get a sandbox", self.retry)
            except DaytonaError as exc:
                raise SandboxError(f"sandbox {sandbox_id} is not reachable: {one_line(exc)}") from None
            self._boxes[sandbox_id] = box
        return box

    async def _ssh_target(self, sandbox_id: str) -> SshTarget:
        box = await self._box(sandbox_id)
        try:
            access = await call_with_retries(lambda: box.create_ssh_access(expires_in_minutes=24 * 60),
                                             "open SSH access", self.retry)
        except DaytonaError as exc:
            raise SandboxError(f"SSH access to sandbox {sandbox_id} failed: {one_line(exc)}") from None
        return parse_ssh_command(access.ssh_command, self.options.ssh_gateway or None, access.token)

    async def _delete_leftover(self, sandbox_id: str | None, unique: str) -> None:
        """Delete what a failed create left: by id when the SDK knows it, else by its label."""
        try:
            ids = [sandbox_id] if sandbox_id else [
                b.id async for b in self.client.list(ListSandboxesQuery(labels={CREATE_LABEL: unique}))]
            for leftover in ids:
                await call_with_retries(lambda: self._delete_by_id(leftover), "delete a sandbox", self.retry)
        except Exception:  # noqa: BLE001 - the run's reaper deletes by run label at the end
            pass


def _never_started(exc: BaseException) -> bool:
    """The SDK's wait saw the sandbox reach an error state (no HTTP status: not a refused request)."""
    return (isinstance(exc, DaytonaError) and exc.status_code is None
            and not isinstance(exc, (DaytonaTimeoutError, DaytonaValidationError)))
