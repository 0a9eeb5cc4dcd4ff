"""The SSH gateway of daytona-sim: an asyncssh server where the username is an ssh-access token.

Invariant: a connection is accepted only while its username is a valid, unrevoked token of a
live sandbox (no password or key auth exists, so any other username is refused); each exec
channel runs its command in that token's sandbox (stdin, stdout, stderr, exit status carried
over) and a broken sandbox (probe fault) has its connections refused. The host key is made at
start and kept in the sim's root folder.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncssh

from rl_daytona.daytona_sim.engine import Engine
from rl_daytona.daytona_sim.state import SimError

STDIN_WAIT = 0.3  # seconds to wait for the first stdin byte when the client keeps stdin open
EXEC_TIMEOUT = 3600.0


class _Server(asyncssh.SSHServer):
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def begin_auth(self, username: str) -> bool:
        grant = self.engine.valid_token(username)
        if grant is None or self.engine.records[grant.sandbox_id].broken:
            return True  # auth required, and no method can succeed
        return False

    def password_auth_supported(self) -> bool:
        return False

    def public_key_auth_supported(self) -> bool:
        return False


async def _read_stdin(process: asyncssh.SSHServerProcess) -> bytes:
    """All of stdin until EOF; b'' if nothing arrives within STDIN_WAIT and EOF never comes."""
    chunks: list[bytes] = []
    first = True
    while True:
        try:
            chunk = await (asyncio.wait_for(process.stdin.read(65536), STDIN_WAIT) if first
                           else process.stdin.read(65536))
        except asyncio.TimeoutError:
            return b""
        first = False
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


class SshGateway:
    """Starts and stops the asyncssh server for one engine."""

    def __init__(self, engine: Engine, root: Path) -> None:
        self.engine, self.root = engine, root
        self._server: asyncssh.SSHAcceptor | None = None
        self.port = 0

    def _host_key(self) -> asyncssh.SSHKey:
        path = self.root / "ssh_host_ed25519_key"
        if not path.exists():
            asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(path))
            path.chmod(0o600)
        return asyncssh.read_private_key(str(path))

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncssh.create_server(
            lambda: _Server(self.engine), host, port, server_host_keys=[self._host_key()],
            process_factory=self._handle, encoding=None, allow_scp=False)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _handle(self, process: asyncssh.SSHServerProcess) -> None:
        username = process.get_extra_info("username")
        grant = self.engine.valid_token(username)
        command = process.command
        if grant is None or not command:
            process.stderr.write(b"daytona-sim: only exec channels with a valid token are served\n")
            process.exit(255)
            return
        stdin = await _read_stdin(process)
        try:
            record = self.engine.get(grant.sandbox_id)
            result = await self.engine.exec(record, command, timeout=EXEC_TIMEOUT, cwd=None, stdin=stdin)
        except SimError as exc:
            process.stderr.write(f"daytona-sim: {exc.message}\n".encode())
            process.exit(255)
            return
        process.stdout.write(result.stdout.encode())
        process.stderr.write(result.stderr.encode())
        process.exit(result.exit_code if 0 <= result.exit_code < 256 else 255)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
