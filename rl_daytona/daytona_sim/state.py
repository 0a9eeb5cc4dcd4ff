"""What daytona-sim holds: sandbox records, ssh tokens, and the counters behind `stats()`.

Invariant: a record's `state` only moves along Daytona's machine (creating -> started, or
creating -> error, or stays creating for a hung create; any -> destroyed on delete), a record
in state started always has a real LocalBackend sandbox (`handle`), and a destroyed record has
none. Records are mutated only on the server's event loop; `SimStats` is a frozen copy.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from rl_daytona.backends.base import SandboxHandle

ORG_ID = "daytona-sim-org"
TARGET = "us"
CONTAINER, LINUX_VM = "container", "linux-vm"


class SimError(Exception):
    """An API error: HTTP status, one-line message, extra headers."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, dict(headers or {})


def now_iso() -> str:
    """The current UTC time the way the API writes timestamps."""
    return dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z")


def new_id() -> str:
    return str(uuid.uuid4())


@dataclass
class SandboxRecord:
    """One Daytona sandbox as the API reports it (mutable; server-internal)."""

    id: str
    name: str
    snapshot: str
    sandbox_class: str
    labels: dict[str, str]
    env: dict[str, str]
    auto_stop_interval: float = 15
    auto_delete_interval: float = -1
    state: str = "creating"
    error_reason: str | None = None
    handle: SandboxHandle | None = None
    broken: bool = False  # probe fault: commands fail
    forking: bool = False  # a fork of this sandbox is in flight
    warm_pool_id: str | None = None  # set while an unclaimed warm-pool member
    parent_id: str | None = None
    created_at: str = field(default_factory=now_iso)
    updated_at: str = field(default_factory=now_iso)
    listener: Callable[[SandboxRecord, str], None] | None = field(default=None, repr=False, compare=False)

    def set_state(self, state: str, error_reason: str | None = None) -> None:
        old = self.state
        self.state, self.error_reason, self.updated_at = state, error_reason, now_iso()
        if self.listener is not None and old != state:
            self.listener(self, old)

    def dto(self, toolbox_proxy_url: str) -> dict[str, Any]:
        """The JSON the SDK's `Sandbox` / `SandboxListItem` models accept."""
        return {
            "id": self.id, "organizationId": ORG_ID, "name": self.name, "snapshot": self.snapshot,
            "user": "daytona", "env": dict(self.env), "labels": dict(self.labels), "public": False,
            "networkBlockAll": False, "kvm": False, "target": TARGET, "cpu": 1, "gpu": 0,
            "memory": 1, "disk": 3, "state": self.state,
            "desiredState": "destroyed" if self.state == "destroyed" else "started",
            "errorReason": self.error_reason, "recoverable": False, "warmPoolId": self.warm_pool_id,
            "autoStopInterval": self.auto_stop_interval, "autoPauseInterval": 0,
            "autoArchiveInterval": 10080, "autoDeleteInterval": self.auto_delete_interval,
            "createdAt": self.created_at, "updatedAt": self.updated_at,
            "lastActivityAt": self.updated_at, "sandboxClass": self.sandbox_class,
            "daemonVersion": "daytona-sim", "runnerId": "daytona-sim-runner",
            "toolboxProxyUrl": toolbox_proxy_url,
        }


@dataclass(frozen=True)
class SshToken:
    """One ssh-access grant: the token is the ssh username."""

    id: str
    token: str
    sandbox_id: str
    expires_at: dt.datetime
    created_at: dt.datetime

    def valid(self, at: dt.datetime | None = None) -> bool:
        return (at or dt.datetime.now(dt.timezone.utc)) < self.expires_at


@dataclass(frozen=True)
class SimStats:
    """Counters since start. `labels` holds (sandbox id, labels) of every live sandbox."""

    creates_requested: int = 0
    created: int = 0
    failed: int = 0
    hung: int = 0
    rate_limited: int = 0
    deleted: int = 0
    forks: int = 0
    alive: int = 0
    served_from_warm: int = 0
    snapshots_built: int = 0
    labels: tuple[tuple[str, Mapping[str, str]], ...] = ()

    def ids_with_label(self, key: str, value: str) -> list[str]:
        """Ids of live sandboxes whose label `key` equals `value`."""
        return [sid for sid, labels in self.labels if labels.get(key) == value]


@dataclass
class Counters:
    """The mutable counters `SimStats` is copied from."""

    creates_requested: int = 0
    created: int = 0
    failed: int = 0
    hung: int = 0
    rate_limited: int = 0
    deleted: int = 0
    forks: int = 0
    served_from_warm: int = 0
    snapshots_built: int = 0
