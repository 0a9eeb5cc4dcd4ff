"""What `rl-daytona tasks check` measures inside a sandbox: the CPU a phase's commands used, and a
listing of the workspace (path -> sha256) to compare two seedings.

Invariant: `MeteredBackend` is the wrapped backend as far as any caller can tell (same exit
code, stdout, and stderr: the measurement line it appends is cut off again before returning),
except that while `metering` is on it adds each command's CPU seconds (user + system of the
command and every process it waited for, from the shell's `times`) to `cpu_seconds`, and
counts in `unmetered` the commands whose figure was lost (output cut at its cap).
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from rl_daytona.backends.base import WORKSPACE, Backend, ExecResult, SandboxHandle

CPU_MARK = "RLCHECK-CPU "
_TIMES = re.compile(r"(\d+)m([\d.]+)s (\d+)m([\d.]+)s\s*$")


class MeteredBackend:
    """A backend proxy that, while `metering`, measures each command's CPU in the sandbox."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self.metering = False
        self.cpu_seconds = 0.0
        self.unmetered = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    async def exec(self, sandbox: SandboxHandle, command: str, **kwargs: Any) -> ExecResult:
        if not self.metering:
            return await self._backend.exec(sandbox, command, **kwargs)
        wrapped = f"( {command}\n); __rc=$?; printf '\\n{CPU_MARK}' >&2; times >&2; exit $__rc"
        result = await self._backend.exec(sandbox, wrapped, **kwargs)
        stderr, cpu = split_cpu(result.stderr)
        if cpu is None:
            self.unmetered += 1
        else:
            self.cpu_seconds += cpu
        return dataclasses.replace(result, stderr=stderr)


def split_cpu(stderr: str) -> tuple[str, float | None]:
    """(stderr without the measurement, children's user + system seconds or None)."""
    at = stderr.rfind("\n" + CPU_MARK)
    if at < 0:
        return stderr, None
    lines = stderr[at + 1 + len(CPU_MARK):].splitlines()
    match = _TIMES.match(lines[1].strip()) if len(lines) > 1 else None
    if match is None:
        return stderr[:at], None
    minutes_u, user, minutes_s, system = match.groups()
    return stderr[:at], 60 * int(minutes_u) + float(user) + 60 * int(minutes_s) + float(system)


_LISTING = """
import hashlib, json, os
out = {}
for folder, dirs, files in os.walk("."):
    dirs[:] = sorted(d for d in dirs if d != "__pycache__")
    for name in sorted(files):
        path = os.path.join(folder, name)
        if os.path.isfile(path) and not os.path.islink(path):
            with open(path, "rb") as f:
                out[os.path.relpath(path)] = hashlib.sha256(f.read()).hexdigest()
        else:
            out[os.path.relpath(path)] = "link:" + os.readlink(path) if os.path.islink(path) else "special"
print(json.dumps(out))
"""


async def workspace_listing(backend: Backend, sandbox: SandboxHandle) -> dict[str, str]:
    """Every file under the workspace (caches skipped) -> its sha256."""
    result = await backend.exec(sandbox, "exec python -I -B -", stdin=_LISTING.encode(), cwd=WORKSPACE,
                                timeout=60.0)
    if result.exit_code != 0:
        raise RuntimeError(f"could not list the workspace (exit {result.exit_code}): {result.output[-300:]}")
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def listing_diff(first: dict[str, str], second: dict[str, str]) -> list[str]:
    """Paths present in one listing only, or with different contents."""
    return sorted(p for p in first.keys() | second.keys() if first.get(p) != second.get(p))
