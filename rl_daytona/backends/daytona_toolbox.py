"""Commands and files through the SDK's toolbox API: the Daytona backend's fallback transport.

Invariant: the toolbox answers one merged text, so each command's stdout and stderr go to files
in a temporary folder inside the sandbox and come back base64-encoded, separately, capped at
the run's output limit (binary-safe, no marker the command could forge); stdin (which the
toolbox cannot carry) travels base64-encoded inside the command line, at most `MAX_STDIN`
bytes; a command ends within its timeout (coreutils `timeout` inside, as over SSH). Files go
through the toolbox's file API; a missing file is `FileNotFoundError`.
"""

from __future__ import annotations

import base64
import binascii
import time
from typing import Awaitable, Callable, Mapping

from daytona import AsyncSandbox, DaytonaError, DaytonaNotFoundError, FileUpload

from rl_daytona.backends.base import WORKSPACE, ExecResult, SandboxError
from rl_daytona.backends.daytona_retry import one_line
from rl_daytona.backends.daytona_ssh import TIMED_OUT_CODES, wrap

MAX_STDIN = 64 * 1024  # base64 of it must fit one argument (Linux: 128 KiB)
GRACE = 10


def capture(line: str, *, stdin: bytes | None, cap: int) -> str:
    """`line` with its stdin fed from an inline literal and its two outputs returned as
    `<base64 stdout> <base64 stderr>` (each at most `cap + 1` bytes before encoding)."""
    feed = "< /dev/null"
    prepare = ""
    if stdin:
        prepare = f"printf %s {base64.b64encode(stdin).decode()} | base64 -d > \"$d/i\" && "
        feed = '< "$d/i"'
    keep = cap + 1
    return (f'd=$(mktemp -d) && {prepare}( {line} ) {feed} > "$d/o" 2> "$d/e"; c=$?; '
            f'head -c {keep} "$d/o" | base64 -w0; printf " "; head -c {keep} "$d/e" | base64 -w0; '
            'rm -rf "$d"; exit $c')


def split_capture(text: str) -> tuple[bytes, bytes]:
    """(stdout, stderr) from what `capture` printed; SandboxError if it is not that shape."""
    out, sep, err = text.strip("\n").partition(" ")
    try:
        if not sep:
            raise ValueError("no separator")
        return base64.b64decode(out, validate=True), base64.b64decode(err.strip(), validate=True)
    except (ValueError, binascii.Error):
        raise SandboxError(f"the toolbox answered something other than captured output: {text[:120]!r}") from None


class ToolboxCommands:
    """Exec, write and read through `AsyncSandbox.process` and `AsyncSandbox.fs`."""

    def __init__(self, box_for: Callable[[str], Awaitable[AsyncSandbox]], max_output: int) -> None:
        self._box_for, self._max_output = box_for, max_output

    async def run(self, sandbox_id: str, command: str, *, timeout: float, cwd: str = WORKSPACE,
                  stdin: bytes | None = None, env: Mapping[str, str] | None = None) -> ExecResult:
        if stdin and len(stdin) > MAX_STDIN:
            raise SandboxError(f"the toolbox transport carries at most {MAX_STDIN} bytes of stdin, "
                               f"got {len(stdin)} (use --transport ssh)")
        line = capture(wrap(command, cwd=cwd, timeout=timeout, env=env), stdin=stdin, cap=self._max_output)
        started = time.monotonic()
        try:
            box = await self._box_for(sandbox_id)
            reply = await box.process.exec(line, timeout=int(timeout + GRACE))
        except DaytonaError as exc:
            raise SandboxError(f"toolbox exec in sandbox {sandbox_id} failed: {one_line(exc)}") from None
        code = int(reply.exit_code if reply.exit_code is not None else 255)
        stdout, stderr = split_capture(reply.result or "")
        return self._result(stdout, stderr, code, time.monotonic() - started)

    def _result(self, stdout: bytes, stderr: bytes, code: int, seconds: float) -> ExecResult:
        cut = len(stdout) + len(stderr) > self._max_output
        stdout = stdout[: self._max_output]
        stderr = stderr[: max(0, self._max_output - len(stdout))]
        return ExecResult(code, stdout.decode(errors="replace"), stderr.decode(errors="replace"), seconds,
                          timed_out=code in TIMED_OUT_CODES, output_truncated=cut,
                          limit_hit="output" if cut else None)

    async def write_files(self, sandbox_id: str, files: Mapping[str, bytes | str]) -> None:
        uploads = [FileUpload(content.encode() if isinstance(content, str) else content, _full(path))
                   for path, content in files.items()]
        try:
            box = await self._box_for(sandbox_id)
            await box.fs.upload_files(uploads)
        except DaytonaError as exc:
            raise SandboxError(f"writing {len(files)} files into sandbox {sandbox_id} failed: "
                               f"{one_line(exc)}") from None

    async def read_file(self, sandbox_id: str, path: str) -> bytes:
        try:
            box = await self._box_for(sandbox_id)
            data = await box.fs.download_file(_full(path))
        except DaytonaNotFoundError:
            raise FileNotFoundError(f"{path} (in sandbox {sandbox_id})") from None
        except DaytonaError as exc:
            raise SandboxError(f"reading {path} from sandbox {sandbox_id} failed: {one_line(exc)}") from None
        return data or b""

    async def forget(self, sandbox_id: str) -> None:
        """Nothing is held per sandbox (the SDK's session is the backend's)."""

    async def close(self) -> None:
        """Nothing to close."""


def _full(path: str) -> str:
    return path if path.startswith("/") else f"{WORKSPACE}/{path}"

