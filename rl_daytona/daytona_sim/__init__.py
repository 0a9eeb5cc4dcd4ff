"""daytona-sim: a Daytona-compatible local server for tests and simulation (like moto for AWS).

It serves what the `daytona` SDK (0.226) calls — sandboxes (create, get, list by label,
delete, fork, ssh access), snapshots (Dockerfile builds with streamed logs, their COPY sources
uploaded to the sim's object storage), warm pools and the toolbox process endpoint — with real
LocalBackend sandboxes behind them and an asyncssh gateway, delays from `latency.py` x
`time_scale`, and fault hooks (`faults.py`): create failures and hangs, broken sandboxes, a
creation rate limit answered with 429.

Modules: latency (the model), state (records, stats), faults, dockerfile, catalog (snapshots,
warm pools), objects (S3-compatible storage for build contexts) and tls (its certificates),
engine (sandbox lifecycle), rest and toolbox (HTTP routes), ssh, server, cli.
Forks need a 'linux-vm' sandbox: create from `VM_SNAPSHOT` or a snapshot built with
`sandbox_class=SandboxClass.LINUX_VM`.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"DaytonaSim": "server", "RunningSim": "server", "SimConfig": "server",
            "run_sim_in_thread": "server", "SimStats": "state",
            "DEFAULT_SNAPSHOT": "catalog", "VM_SNAPSHOT": "catalog"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Lazy exports, so `rl-daytona --help` does not import the server's dependencies."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
