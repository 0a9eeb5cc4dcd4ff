"""tinker-sim: a Tinker-compatible local service for the built-in model (like moto for AWS).

It serves the HTTP API the pinned `tinker` SDK (0.38) calls — service config, sessions and
heartbeats, create model / get info, forward_backward (protobuf) and optim_step with their
request futures, save weights / save weights for sampler / load weights with `tinker://`
paths, sampling sessions and sample with logprobs — backed by the built-in numpy model
(`rl_daytona.policy.model` + `policy.training`), so `tinker.ServiceClient(base_url=...)` runs
unchanged against it. Faults are injectable (`faults.py`); retried calls are applied once.

Modules: wire (protobuf bodies), state (sessions, models, futures, checkpoints), faults,
routes (service + training), sampling (sampling + futures), server (app, thread, process), cli.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"RunningSim": "server", "SimConfig": "server", "run_sim_in_thread": "server",
            "SIM_API_KEY": "server", "Faults": "faults", "BASE_MODEL": "state"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Lazy exports, so `rl-daytona --help` does not import the server's dependencies."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
