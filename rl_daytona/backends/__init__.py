"""Backends behind one async protocol, built from a frozen, picklable `BackendSpec`.

Invariant: every process of a run (pool actor, rollout actors, the driver's reaper) builds its
own backend from the same spec and sees the same sandboxes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rl_daytona.backends.base import (
    WORKSPACE, Backend, BackendAuthError, ExecResult, IsolationUnavailableError, SandboxError, SandboxHandle,
)
from rl_daytona.backends.daytona_options import DaytonaOptions
from rl_daytona.types import SandboxLimits

BACKENDS = ("local", "daytona")
ISOLATIONS = ("bwrap", "none")

__all__ = ["WORKSPACE", "Backend", "BackendAuthError", "BackendSpec", "DaytonaOptions", "ExecResult",
           "IsolationUnavailableError", "SandboxError", "SandboxHandle", "make_backend"]


@dataclass(frozen=True)
class BackendSpec:
    """Which backend, and how to build it in any process of the run."""

    kind: str = "local"
    root: str = ""
    isolation: str = "bwrap"
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    daytona: DaytonaOptions = field(default_factory=DaytonaOptions)

    def __post_init__(self) -> None:
        if self.kind not in BACKENDS:
            raise ValueError(f"unknown backend {self.kind!r} (choose from: {', '.join(BACKENDS)})")
        if self.isolation not in ISOLATIONS:
            raise ValueError(f"unknown isolation {self.isolation!r} (choose from: {', '.join(ISOLATIONS)})")


def make_backend(spec: BackendSpec) -> Backend:
    """Build the backend a spec names (imports lazily so each backend's deps stay optional)."""
    if spec.kind == "daytona":
        from rl_daytona.backends.daytona import DaytonaBackend

        return DaytonaBackend(spec.daytona, limits=spec.limits)
    from rl_daytona.backends.local import LocalBackend

    return LocalBackend(Path(spec.root), isolation=spec.isolation, limits=spec.limits)
