"""Shared fixtures: one session-wide Ray (num_cpus=2), never init/shutdown per test."""

from __future__ import annotations

import os
from typing import Iterator

import pytest


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": os.getcwd()}})
    yield
    ray.shutdown()
