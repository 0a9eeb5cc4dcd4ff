"""DaytonaBackend: the `Backend` protocol on Daytona's cloud through the `daytona` SDK.

Invariant: every sandbox is created from the run's snapshot with `ephemeral=True`,
`auto_stop_interval=0`, the run label and a per-create label, so a create that fails or times
out is deleted by id or by that label and nothing is left running; creates pass the run's
shared rate gate and at most `max_creating` are in flight per process; a rejected credential
raises `BackendAuthError` and is never retried. One `AsyncDaytona` per process and event loop
(its HTTP pool sized for the width); commands go over SSH (one connection per sandbox) or, as
the fallback, the SDK's toolbox exec.
"""

from __future__ import annotations

import asyncio
import base64
import shlex
import uuid
from typing import Mapping

from daytona import AsyncDaytona, AsyncSandbox, CreateSandboxFromSnapshotParams, DaytonaConfig, DaytonaTimeoutError
from daytona import DaytonaNotFoundError, ListSandboxesQuery

from rl_daytona.backends.base import WORKSPACE, BackendAuthError, ExecResult, SandboxError, SandboxHandle
from rl_daytona.backends.daytona_limits import CreateGate, create_gate
from rl_daytona.backends.daytona_options import CREATE_LABEL, RUN_LABEL, DaytonaOptions, api_key
from rl_daytona.backends.daytona_retry import RetryPolicy, call_with_retries
from rl_daytona.backends.daytona_ssh import SshConnections, SshTarget, parse_ssh_command, tar_bytes, wrap
from rl_daytona.types import SandboxLimits

_CLIENTS: dict[tuple[int, str, str, int], AsyncDaytona] = {}


def shared_client(options: DaytonaOptions, pool_size: int = 512) -> AsyncDaytona:
    """The process's AsyncDaytona for this endpoint (one per event loop: its sessions bind to it)."""
    loop = asyncio.get_running_loop()
    key = (id(loop), options.api_url, options.target, pool_size)
    client = _CLIENTS.get(key)
    if client is None:
        config = DaytonaConfig(api_key=api_key(), api_url=options.api_url, target=options.target or None,
                               connection_pool_maxsize=pool_size)
        _CLIENTS[key] = client = AsyncDaytona(config)
    return client


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]


class DaytonaBackend:
    """Sandboxes on Daytona; see the module docstring for the guarantees."""

    name = "daytona"

    def __init__(self, options: DaytonaOptions, limits: SandboxLimits = SandboxLimits(),
                 retry: RetryPolicy = RetryPolicy()) -> None:
        self.options, self.limits, self.retry = options.resolved(), limits, retry
        self._boxes: dict[str, AsyncSandbox] = {}
        self._fork_locks: dict[str, asyncio.Lock] = {}
        self._inflight: asyncio.Semaphore | None = None
        self._gates: dict[str, CreateGate] = {}
        self._ssh = SshConnections(self._ssh_target, limits.max_output_bytes)
        self.waited_for_rate = 0.0

    @property
    def client(self) -> AsyncDaytona:
        return shared_client(self.options, pool_size=max(64, self.options.max_creating * 2))

    # -- lifecycle ----------------------------------------------------------------------

    async def create(self, run_id: str, labels: Mapping[str, str] | None = None) -> SandboxHandle:
        unique = uuid.uuid4().hex
        tags = {**dict(labels or {}), RUN_LABEL: run_id, CREATE_LABEL: unique}
        params = CreateSandboxFromSnapshotParams(snapshot=self.options.snapshot or None, ephemeral=True,
                                                 auto_stop_interval=0, labels=tags)
        self._inflight = self._inflight or asyncio.Semaphore(self.options.max_creating)
        async with self._inflight:
            self.waited_for_rate += await self._gate(run_id).acquire()
            try:
                box = await call_with_retries(lambda: self.client.create(params, timeout=self.options.create_timeout),
                                              "create a sandbox", self.retry, self._count_wait)
            except BackendAuthError:
                raise
            except DaytonaTimeoutError as exc:
                await self._delete_leftover(exc.sandbox_id, unique)
                raise SandboxError(f"sandbox create timed out after {self.options.create_timeout:.0f} s "
                                   "(the sandbox was deleted)") from None
            except Exception as exc:  # noqa: BLE001 - any other failure: clean up, then report
                await self._delete_leftover(None, unique)
                raise SandboxError(f"sandbox create failed: {_one_line(exc)}") from None
        self._boxes[box.id] = box
        return SandboxHandle(box.id, run_id, None, dict(box.labels or tags))

    async def fork(self, parent: SandboxHandle) -> SandboxHandle:
        lock = self._fork_locks.setdefault(parent.sandbox_id, asyncio.Lock())
        async with lock:  # Daytona forks one child at a time per parent
            box = await self._box(parent.sandbox_id)
            try:
                child = await call_with_retries(lambda: box.fork(timeout=self.options.create_timeout),
                                                "fork a sandbox", self.retry, self._count_wait)
            except BackendAuthError:
                raise
            except Exception as exc:  # noqa: BLE001
                raise SandboxError(f"fork of sandbox {parent.sandbox_id} failed: {_one_line(exc)}") from None
        self._boxes[child.id] = child
        return SandboxHandle(child.id, parent.run_id, parent.sandbox_id, dict(child.labels or parent.labels))

    async def delete(self, sandbox: SandboxHandle) -> None:
        await self._ssh.forget(sandbox.sandbox_id)
        self._fork_locks.pop(sandbox.sandbox_id, None)
        box = self._boxes.pop(sandbox.sandbox_id, None)
        try:
            box = box or await self._get(sandbox.sandbox_id)
            await call_with_retries(lambda: self.client.delete(box), "delete a sandbox", self.retry)
        except DaytonaNotFoundError:
            return
        except Exception as exc:  # noqa: BLE001
            if getattr(exc, "status_code", None) == 404:
                return
            if isinstance(exc, BackendAuthError):
                raise
            raise SandboxError(f"delete of sandbox {sandbox.sandbox_id} failed: {_one_line(exc)}") from None

    async def list_sandboxes(self, run_id: str | None = None) -> list[SandboxHandle]:
        query = ListSandboxesQuery(labels={RUN_LABEL: run_id}) if run_id else ListSandboxesQuery()

        async def listed() -> list[AsyncSandbox]:
            return [box async for box in self.client.list(query)]

        boxes = await call_with_retries(listed, "list sandboxes", self.retry)
        return [SandboxHandle(b.id, (b.labels or {}).get(RUN_LABEL, ""), None, dict(b.labels or {}))
                for b in boxes if RUN_LABEL in (b.labels or {})]

    async def is_alive(self, sandbox: SandboxHandle) -> bool:
        try:
            result = await self.exec(sandbox, "echo alive", timeout=15, cwd="/")
        except SandboxError:
            return False
        return result.exit_code == 0 and result.stdout.strip() == "alive"

    async def close(self) -> None:
        await self._ssh.close()
        loop = asyncio.get_running_loop()
        for key in [k for k in _CLIENTS if k[0] == id(loop)]:
            await _CLIENTS.pop(key).close()

    # -- commands and files ---------------------------------------------------------------

    async def exec(self, sandbox: SandboxHandle, command: str, *, timeout: float = 60.0, cwd: str = WORKSPACE,
                   stdin: bytes | None = None, env: Mapping[str, str] | None = None) -> ExecResult:
        if self.options.transport == "ssh":
            return await self._ssh.run(sandbox.sandbox_id, command, timeout=timeout, cwd=cwd, stdin=stdin, env=env)
        return await self._toolbox_exec(sandbox, command, timeout=timeout, cwd=cwd, stdin=stdin, env=env)

    async def write_files(self, sandbox: SandboxHandle, files: Mapping[str, bytes | str]) -> None:
        if self.options.transport == "ssh":
            await self._ssh.write_files(sandbox.sandbox_id, files)
            return
        archive = base64.b64encode(tar_bytes(files)).decode()
        result = await self._toolbox_exec(sandbox, "base64 -d | tar -x -o -f - -C /", timeout=120, cwd="/",
                                          stdin=archive.encode())
        if result.exit_code != 0:
            raise SandboxError(f"writing {len(files)} files into sandbox {sandbox.sandbox_id} failed: "
                               f"{result.output.strip()[:200]}")

    async def read_file(self, sandbox: SandboxHandle, path: str) -> bytes:
        if self.options.transport == "ssh":
            return await self._ssh.read_file(sandbox.sandbox_id, path)
        full = shlex.quote(path if path.startswith("/") else f"{WORKSPACE}/{path}")
        result = await self._toolbox_exec(sandbox, f"test -f {full} || exit 44; base64 -w0 -- {full}",
                                          timeout=120, cwd="/")
        if result.exit_code == 44:
            raise FileNotFoundError(f"{path} (in sandbox {sandbox.sandbox_id})")
        if result.exit_code != 0:
            raise SandboxError(f"reading {path} from sandbox {sandbox.sandbox_id} failed: {result.output[:200]}")
        return base64.b64decode(result.stdout.strip())

    async def _toolbox_exec(self, sandbox: SandboxHandle, command: str, *, timeout: float, cwd: str,
                            stdin: bytes | None, env: Mapping[str, str] | None) -> ExecResult:
        """The SDK's toolbox exec: stdout and stderr arrive merged; stdin goes via a file."""
        box = await self._box(sandbox.sandbox_id)
        line = wrap(command, cwd=cwd, timeout=timeout, env=env)
        if stdin:
            staged = f"/tmp/.rl-daytona-stdin-{uuid.uuid4().hex}"
            await box.fs.upload_file(stdin, staged)
            line = f"({line}) < {staged}; code=$?; rm -f {staged}; exit $code"
        try:
            reply = await box.process.exec(line, timeout=int(timeout + 10))
        except Exception as exc:  # noqa: BLE001
            raise SandboxError(f"toolbox exec in sandbox {sandbox.sandbox_id} failed: {_one_line(exc)}") from None
        text = reply.result or ""
        cut = len(text.encode()) > self.limits.max_output_bytes
        text = text.encode()[: self.limits.max_output_bytes].decode(errors="replace")
        code = int(reply.exit_code if reply.exit_code is not None else 255)
        return ExecResult(code, text, "", 0.0, timed_out=code in (124, 137), output_truncated=cut,
                          limit_hit="output" if cut else None)

    # -- helpers ----------------------------------------------------------------------------

    def _gate(self, run_id: str) -> CreateGate:
        gate = self._gates.get(run_id)
        if gate is None:
            self._gates[run_id] = gate = create_gate(run_id, self.options.creates_per_minute)
        return gate

    def _count_wait(self, seconds: float) -> None:
        self.waited_for_rate += seconds

    async def _get(self, sandbox_id: str) -> AsyncSandbox:
        return await call_with_retries(lambda: self.client.get(sandbox_id), "get a sandbox", self.retry)

    async def _box(self, sandbox_id: str) -> AsyncSandbox:
        box = self._boxes.get(sandbox_id)
        if box is None:
            self._boxes[sandbox_id] = box = await self._get(sandbox_id)
        return box

    async def _ssh_target(self, sandbox_id: str) -> SshTarget:
        box = await self._box(sandbox_id)
        access = await call_with_retries(lambda: box.create_ssh_access(expires_in_minutes=24 * 60),
                                         "open SSH access", self.retry)
        return parse_ssh_command(access.ssh_command, self.options.ssh_gateway or None, access.token)

    async def _delete_leftover(self, sandbox_id: str | None, unique: str) -> None:
        """Delete what a failed create left: by id when the SDK knows it, else by its label."""
        try:
            ids = [sandbox_id] if sandbox_id else [
                b.id async for b in self.client.list(ListSandboxesQuery(labels={CREATE_LABEL: unique}))]
            for leftover in ids:
                await self.client.delete(await self.client.get(leftover))
        except Exception:  # noqa: BLE001 - the run's reaper deletes by run label at the end
            pass

