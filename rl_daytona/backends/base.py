"""The one async protocol every sandbox backend speaks.

Invariant: callers (SandboxPool, RolloutActor, grader) only ever see `SandboxHandle`s and
`ExecResult`s; nothing backend-specific crosses this line, so the Daytona backend plugs in
without changing a caller.

Paths inside a sandbox are absolute POSIX paths; the agent's writable workspace is
`WORKSPACE` (`/workspace`). Relative paths given to `write_files`/`read_file` are taken
relative to the workspace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Protocol, runtime_checkable

WORKSPACE = "/workspace"


class SandboxError(RuntimeError):
    """An infrastructure failure of a sandbox (create, exec plumbing, delete)."""


class IsolationUnavailableError(SandboxError):
    """The requested isolation (bubblewrap) cannot run on this machine."""


class BackendAuthError(SandboxError):
    """The backend rejected the run's credentials: never retried, the run stops."""


@dataclass(frozen=True)
class SandboxHandle:
    """A sandbox as callers see it: an id, the run label, and where it came from."""

    sandbox_id: str
    run_id: str
    parent_id: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ExecResult:
    """What one command produced. `timed_out`/`killed` mark a limit that was hit."""

    exit_code: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    output_truncated: bool = False
    limit_hit: str | None = None  # "cpu" | "memory" | "processes" | "file_size" | "output" | "disk" | None

    @property
    def output(self) -> str:
        """stdout then stderr, the way a terminal would show them."""
        if self.stderr and self.stdout:
            return f"{self.stdout}{'' if self.stdout.endswith(chr(10)) else chr(10)}{self.stderr}"
        return self.stdout or self.stderr


@runtime_checkable
class Backend(Protocol):
    """Create, fork, run in, read, write, delete and list sandboxes, all async."""

    name: str

    async def create(self, run_id: str, labels: Mapping[str, str] | None = None) -> SandboxHandle:
        """A new empty sandbox (its workspace exists and is empty)."""
        ...

    async def fork(self, parent: SandboxHandle) -> SandboxHandle:
        """A copy-on-write child that sees the parent's workspace as it is now."""
        ...

    async def exec(
        self,
        sandbox: SandboxHandle,
        command: str,
        *,
        timeout: float = 60.0,
        cwd: str = WORKSPACE,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        """Run `command` with `sh -c` inside the sandbox; never raises for a failing command."""
        ...

    async def write_files(self, sandbox: SandboxHandle, files: Mapping[str, bytes | str]) -> None:
        """Write files (creating parent folders) inside the sandbox."""
        ...

    async def read_file(self, sandbox: SandboxHandle, path: str) -> bytes:
        """The bytes of one file inside the sandbox; FileNotFoundError if absent."""
        ...

    async def is_alive(self, sandbox: SandboxHandle) -> bool:
        """A cheap liveness probe, run before a sandbox is handed out."""
        ...

    async def delete(self, sandbox: SandboxHandle) -> None:
        """Delete the sandbox and everything it holds; deleting twice is not an error."""
        ...

    async def list_sandboxes(self, run_id: str | None = None) -> list[SandboxHandle]:
        """Sandboxes carrying the run's label (all of this backend's when run_id is None)."""
        ...

    async def close(self) -> None:
        """Release backend resources (connections); does not delete sandboxes."""
        ...
