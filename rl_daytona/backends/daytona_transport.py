"""SSH first, the toolbox API as the fallback, per sandbox.

Invariant: a sandbox's commands go over SSH until an SSH connection to it cannot be opened
(`SshUnavailableError`: access refused, gateway unreachable, handshake failed); from then on
that sandbox's commands, file writes and reads go through the SDK's toolbox API, and the switch
is counted. A command that fails on an open SSH connection is not retried on the toolbox (it
may have run): it is reported, as on any transport.
"""

from __future__ import annotations

from typing import Mapping

from rl_daytona.backends.base import WORKSPACE, ExecResult
from rl_daytona.backends.daytona_ssh import SshConnections, SshUnavailableError
from rl_daytona.backends.daytona_toolbox import ToolboxCommands


class SshWithToolboxFallback:
    """The `ssh` transport: SshConnections, falling back to ToolboxCommands per sandbox."""

    def __init__(self, ssh: SshConnections, toolbox: ToolboxCommands) -> None:
        self.ssh, self.toolbox = ssh, toolbox
        self.on_toolbox: set[str] = set()
        self.fallbacks = 0
        self.last_reason = ""

    def _fell_back(self, sandbox_id: str, exc: SshUnavailableError) -> None:
        self.on_toolbox.add(sandbox_id)
        self.fallbacks += 1
        self.last_reason = str(exc)[:200]

    async def run(self, sandbox_id: str, command: str, *, timeout: float, cwd: str = WORKSPACE,
                  stdin: bytes | None = None, env: Mapping[str, str] | None = None) -> ExecResult:
        if sandbox_id not in self.on_toolbox:
            try:
                return await self.ssh.run(sandbox_id, command, timeout=timeout, cwd=cwd, stdin=stdin, env=env)
            except SshUnavailableError as exc:
                self._fell_back(sandbox_id, exc)
        return await self.toolbox.run(sandbox_id, command, timeout=timeout, cwd=cwd, stdin=stdin, env=env)

    async def write_files(self, sandbox_id: str, files: Mapping[str, bytes | str]) -> None:
        if sandbox_id not in self.on_toolbox:
            try:
                return await self.ssh.write_files(sandbox_id, files)
            except SshUnavailableError as exc:
                self._fell_back(sandbox_id, exc)
        await self.toolbox.write_files(sandbox_id, files)

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        if sandbox_id not in self.on_toolbox:
            try:
                return await self.ssh.read_file(sandbox_id, path)
            except SshUnavailableError as exc:
                self._fell_back(sandbox_id, exc)
        return await self.toolbox.read_file(sandbox_id, path)

    async def forget(self, sandbox_id: str) -> None:
        self.on_toolbox.discard(sandbox_id)
        await self.ssh.forget(sandbox_id)
        await self.toolbox.forget(sandbox_id)

    async def close(self) -> None:
        await self.ssh.close()
        await self.toolbox.close()
