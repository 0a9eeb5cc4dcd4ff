"""Commands and files over SSH to a Daytona sandbox: one connection per sandbox, a channel each.

Invariant: a command always ends within its timeout plus a small grace: it runs under
coreutils `timeout` inside the sandbox (exit 124/137 -> `timed_out`) and the client gives up
on the channel past the grace; output is capped at the limit the run set; files travel as a
tar stream on stdin (parent folders made) and come back base64-encoded (binary-safe through
any gateway).
"""

from __future__ import annotations

import asyncio
import base64
import io
import shlex
import tarfile
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Mapping

import asyncssh

from rl_daytona.backends.base import WORKSPACE, ExecResult, SandboxError

GRACE = 10.0
READ_TIMEOUT = 120.0
TIMED_OUT_CODES = (124, 137)


@dataclass(frozen=True)
class SshTarget:
    """Where a sandbox's SSH gateway is and the token that names the sandbox."""

    host: str
    port: int
    token: str


def parse_ssh_command(command: str, override: str | None = None, token: str = "") -> SshTarget:
    """`ssh -p PORT TOKEN@HOST` (Daytona's sshCommand) -> target; `override` is 'host:port'."""
    words = shlex.split(command)
    port, user, host = 22, token, ""
    for i, word in enumerate(words):
        if word == "-p" and i + 1 < len(words):
            port = int(words[i + 1])
        elif "@" in word:
            user, host = word.rsplit("@", 1)
    if override:
        host, _, port_text = override.rpartition(":")
        if not host or not port_text.isdigit():
            raise ValueError(f"DAYTONA_SSH_GATEWAY must be host:port, got {override!r}")
        port = int(port_text)
    if not host or not (token or user):
        raise SandboxError(f"cannot read an SSH gateway from the ssh-access reply ({len(words)} words)")
    return SshTarget(host, port, token or user)


def wrap(command: str, *, cwd: str, timeout: float, env: Mapping[str, str] | None) -> str:
    """The remote command line: cd, env, then `sh -c` under coreutils timeout."""
    assigns = " ".join(shlex.quote(f"{k}={v}") for k, v in (env or {}).items())
    limit = f"timeout -k 2 {max(timeout, 0.1):.3f}"
    return f"cd {shlex.quote(cwd)} && exec env {assigns} {limit} sh -c {shlex.quote(command)}"


def tar_bytes(files: Mapping[str, bytes | str]) -> bytes:
    """An uncompressed tar of `files` (relative paths land under the workspace), paths from /."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path, content in files.items():
            data = content.encode() if isinstance(content, str) else content
            full = path if path.startswith("/") else f"{WORKSPACE}/{path}"
            info = tarfile.TarInfo(full.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class SshUnavailableError(SandboxError):
    """No SSH connection could be opened to a sandbox (access, gateway or handshake failed)."""


class SshConnections:
    """One asyncssh connection per sandbox, opened on first use with connect retries."""

    def __init__(self, target_for: Callable[[str], Awaitable[SshTarget]], max_output: int,
                 connect_seconds: float = 15.0) -> None:
        self._target_for, self._max_output, self._connect_seconds = target_for, max_output, connect_seconds
        self._conns: dict[str, asyncssh.SSHClientConnection] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def _conn(self, sandbox_id: str) -> asyncssh.SSHClientConnection:
        lock = self._locks.setdefault(sandbox_id, asyncio.Lock())
        async with lock:
            conn = self._conns.get(sandbox_id)
            if conn is not None and not conn.is_closed():
                return conn
            self._conns[sandbox_id] = conn = await self._connect(sandbox_id)
            return conn

    async def _connect(self, sandbox_id: str) -> asyncssh.SSHClientConnection:
        try:
            target = await self._target_for(sandbox_id)
        except SandboxError as exc:
            raise SshUnavailableError(str(exc)) from None
        deadline = time.monotonic() + self._connect_seconds
        delay = 0.1
        while True:
            try:
                return await asyncssh.connect(target.host, port=target.port, username=target.token,
                                              known_hosts=None, client_keys=None, agent_path=None,
                                              password=None, connect_timeout=10)
            except asyncssh.PermissionDenied:  # the token is refused: trying again cannot help
                raise SshUnavailableError(f"SSH to sandbox {sandbox_id} was refused (access token not accepted)") from None
            except (OSError, asyncssh.Error) as exc:
                if time.monotonic() + delay > deadline:
                    raise SshUnavailableError(f"SSH to sandbox {sandbox_id} failed: {type(exc).__name__}: {exc}") from None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    async def _call(self, sandbox_id: str, line: str, stdin: bytes | None,
                    timeout: float) -> asyncssh.SSHCompletedProcess:
        """One exec channel; asyncssh.TimeoutError passes through, other failures are SandboxError."""
        conn = await self._conn(sandbox_id)
        try:
            return await conn.run(line, input=stdin or b"", encoding=None, timeout=timeout)
        except asyncssh.TimeoutError:
            raise
        except (OSError, asyncssh.Error) as exc:
            self._conns.pop(sandbox_id, None)
            conn.close()
            raise SandboxError(f"SSH exec in sandbox {sandbox_id} failed: {type(exc).__name__}: {exc}") from None

    async def run(self, sandbox_id: str, command: str, *, timeout: float, cwd: str = WORKSPACE,
                  stdin: bytes | None = None, env: Mapping[str, str] | None = None) -> ExecResult:
        started = time.monotonic()
        line = wrap(command, cwd=cwd, timeout=timeout, env=env)
        try:
            done = await self._call(sandbox_id, line, stdin, timeout + GRACE)
        except asyncssh.TimeoutError as exc:
            return self._result(exc.stdout, exc.stderr, 124, started)
        code = done.exit_status if done.exit_status is not None else 255
        return self._result(done.stdout, done.stderr, code, started)

    def _result(self, out: object, err: object, code: int, started: float) -> ExecResult:
        stdout, stderr = _bytes(out), _bytes(err)
        cut = len(stdout) + len(stderr) > self._max_output
        stdout = stdout[: self._max_output]
        stderr = stderr[: max(0, self._max_output - len(stdout))]
        return ExecResult(code, stdout.decode(errors="replace"), stderr.decode(errors="replace"),
                          time.monotonic() - started, timed_out=code in TIMED_OUT_CODES,
                          output_truncated=cut, limit_hit="output" if cut else None)

    async def write_files(self, sandbox_id: str, files: Mapping[str, bytes | str]) -> None:
        result = await self.run(sandbox_id, "tar -x -o -f - -C /", timeout=120, cwd="/", stdin=tar_bytes(files))
        if result.exit_code != 0:
            raise SandboxError(f"writing {len(files)} files into sandbox {sandbox_id} failed: {result.output.strip()[:200]}")

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        quoted = shlex.quote(path if path.startswith("/") else f"{WORKSPACE}/{path}")
        try:
            done = await self._call(sandbox_id, f"test -f {quoted} || exit 44; base64 -w0 -- {quoted}",
                                    None, READ_TIMEOUT)
        except asyncssh.TimeoutError:
            raise SandboxError(f"reading {path} from sandbox {sandbox_id} timed out") from None
        if done.exit_status == 44:
            raise FileNotFoundError(f"{path} (in sandbox {sandbox_id})")
        if done.exit_status != 0:
            raise SandboxError(f"reading {path} from sandbox {sandbox_id} failed: "
                               f"{_bytes(done.stderr).decode(errors='replace').strip()[:200]}")
        return base64.b64decode(_bytes(done.stdout).strip())

    async def forget(self, sandbox_id: str) -> None:
        conn = self._conns.pop(sandbox_id, None)
        self._locks.pop(sandbox_id, None)
        if conn is not None:
            conn.close()

    async def close(self) -> None:
        for sandbox_id in list(self._conns):
            await self.forget(sandbox_id)


def _bytes(data: object) -> bytes:
    if data is None:
        return b""
    return data if isinstance(data, bytes) else str(data).encode()
