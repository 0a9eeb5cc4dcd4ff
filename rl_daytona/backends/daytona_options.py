"""What a run tells the Daytona backend, as a frozen, picklable, secret-free value.

Invariant: `DaytonaOptions` never holds the API key. Every process of the run reads
DAYTONA_API_KEY from its own environment; the URL and target are resolved once in the driver
(from flags, else DAYTONA_API_URL / DAYTONA_TARGET) so actors on other nodes reach the same API.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

TRANSPORTS = ("ssh", "toolbox")
DEFAULT_API_URL = "https://app.daytona.io/api"
RUN_LABEL = "rl-daytona-run"
CREATE_LABEL = "rl-daytona-create"


@dataclass(frozen=True)
class DaytonaOptions:
    """Snapshot, endpoint, limits and transport of a Daytona-backed run."""

    snapshot: str = ""
    api_url: str = ""
    target: str = ""
    creates_per_minute: int = 300
    max_creating: int = 256
    transport: str = "ssh"
    create_timeout: float = 120.0
    ssh_gateway: str = ""
    ssh_connect_seconds: float = 15.0  # SSH connects retry this long after a sandbox reports started
    warm_pool: bool = True

    def __post_init__(self) -> None:
        if self.transport not in TRANSPORTS:
            raise ValueError(f"unknown transport {self.transport!r} (choose from: {', '.join(TRANSPORTS)})")
        if self.creates_per_minute < 1:
            raise ValueError(f"--creates-per-minute must be at least 1, got {self.creates_per_minute}")
        if self.max_creating < 1:
            raise ValueError(f"--max-creating must be at least 1, got {self.max_creating}")
        if self.ssh_connect_seconds < 0:
            raise ValueError(f"SSH connect window must be >= 0 s, got {self.ssh_connect_seconds}")
        if self.create_timeout <= 0:
            raise ValueError(f"create timeout must be positive, got {self.create_timeout}")

    def resolved(self) -> DaytonaOptions:
        """Fill the endpoint and target from the environment (driver side, before the run starts)."""
        return replace(self, api_url=self.api_url or os.environ.get("DAYTONA_API_URL") or DEFAULT_API_URL,
                       target=self.target or os.environ.get("DAYTONA_TARGET", ""),
                       ssh_gateway=self.ssh_gateway or os.environ.get("DAYTONA_SSH_GATEWAY", ""))


def api_key() -> str:
    """This process's DAYTONA_API_KEY, or a clear error naming what to set."""
    from rl_daytona.backends.base import BackendAuthError

    key = os.environ.get("DAYTONA_API_KEY", "")
    if not key:
        raise BackendAuthError("DAYTONA_API_KEY is not set in this process's environment "
                               "(export it before the run; on a cluster, on every node)")
    return key
