"""Start a server child process by module name and know its URL; the child's half of that contract.

    with spawn_server(["-m", "some.server.module", "--port", "0"], None, 30.0, "what") as child:
        child.url                            # from the one `LISTENING <url>` line the child prints
    # in the child: print(f"LISTENING {url}", flush=True); await until_stopped(stop_on_stdin_eof)

The core starts the built-in chat server and the local Tinker-compatible service this way,
by module name, as it would reach any other service: it imports neither.

Invariant: a `ServerProcess` owns exactly one child. The child is stopped by `close()`, by
leaving the `with` block, at interpreter exit, and (through its stdin pipe closing) even
when this process dies without cleaning up.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

READY_PREFIX = "LISTENING "
BUILTIN_SERVER_MODULE = "rl_daytona.policy.server"  # the built-in policy's OpenAI-compatible server


class ServerStartError(RuntimeError):
    """The server child did not report a listening address in time."""


class ServerProcess:
    """A running server child (`python -m MODULE ...`); `.url` as the child printed it."""

    def __init__(self, process: subprocess.Popen[bytes], url: str, log_path: Path) -> None:
        self.process = process
        self.url = url
        self.log_path = log_path
        atexit.register(self.close)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the child (stdin closed + SIGTERM, then SIGKILL after `timeout`); closing twice is fine.

        Closing stdin first ends the child's `--stop-on-stdin-eof` reader thread, so its event
        loop can shut down cleanly instead of waiting on that thread until it is killed.
        """
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None and not stream.closed:
                stream.close()
        atexit.unregister(self.close)

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_ready_line(process: subprocess.Popen[bytes], timeout: float) -> str | None:
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    buffer = b""
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while b"\n" not in buffer and time.monotonic() < deadline:
            if not selector.select(max(0.0, deadline - time.monotonic())):
                break
            chunk = os.read(process.stdout.fileno(), 4096)
            if not chunk:
                break
            buffer += chunk
    line = buffer.split(b"\n", 1)[0].decode("utf-8", "replace")
    return line[len(READY_PREFIX):].strip() if line.startswith(READY_PREFIX) else None


def start_builtin_server(state: Path | None = None, timeout: float = 30.0, seed: int | None = None,
                         host: str | None = None, port: int = 0) -> ServerProcess:
    """Spawn the built-in chat server, wait for its `LISTENING <url>` line, return a handle to it
    (`.url` ends in `/v1`). `host` None: loopback, or this node's address when the driver
    joined a Ray cluster."""
    command = ["-m", BUILTIN_SERVER_MODULE, "--port", str(port)]
    if state is not None:
        command += ["--state", str(state)]
    if seed is not None:
        command += ["--seed", str(seed)]
    return spawn_server(command, host, timeout, "built-in policy server")


def spawn_server(args: list[str], host: str | None, timeout: float, what: str) -> ServerProcess:
    """`python ARGS --host H --stop-on-stdin-eof` as a child that prints `LISTENING <url>` once bound."""
    if host is None:
        host = "127.0.0.1"
        if "ray" in sys.modules:  # never imports Ray just to learn it is not running
            from rl_daytona.runtime import policy_host

            host = policy_host()
    command = [sys.executable, *args, "--host", host, "--stop-on-stdin-eof"]
    log_file = tempfile.NamedTemporaryFile(prefix="rl-daytona-server-", suffix=".log", delete=False)
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_file)
    log_file.close()
    url = _read_ready_line(process, timeout)
    if url is None:
        process.kill()
        process.wait()
        tail = Path(log_file.name).read_text(errors="replace")[-2000:]
        raise ServerStartError(f"{what} did not start within {timeout}s: {tail.strip()}")
    return ServerProcess(process, url, Path(log_file.name))


async def until_stopped(stop_on_stdin_eof: bool) -> None:
    """(In the child) return on SIGTERM or SIGINT, or (with `stop_on_stdin_eof`) once the
    parent closes stdin."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if stop_on_stdin_eof:
        loop.run_in_executor(None, wait_stdin_eof, loop, stop)
    await stop.wait()


def wait_stdin_eof(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """Block until the parent closes our stdin (or dies), then stop the server."""
    while sys.stdin.buffer.read(1 << 16):
        pass
    loop.call_soon_threadsafe(stop.set)
