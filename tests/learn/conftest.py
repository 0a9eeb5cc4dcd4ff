"""Session fixtures: real trajectories sampled by the untrained built-in policy (seeded)."""

from __future__ import annotations

import os
import tempfile

import pytest

from rl_daytona.policy.model import PolicyModel
from rl_daytona.types import Trajectory
from tests.learn.builders import episode, one_turn

# Hypothesis caches under ./.hypothesis by default; keep the checkout clean (pytest's own cache is off too).
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(tempfile.gettempdir(), "rl_daytona-hypothesis"))


@pytest.fixture(scope="session")
def short_trajectories() -> list[Trajectory]:
    """Twelve one-turn attempts on the fresh calc prompt, at two temperatures."""
    model = PolicyModel()
    return [one_turn(model, seed, 1.0 if seed % 2 else 2.0) for seed in range(12)]


@pytest.fixture(scope="session")
def long_trajectories(tmp_path_factory: pytest.TempPathFactory) -> list[Trajectory]:
    """Two three-turn attempts on real calc variants (real shell output between turns)."""
    root = tmp_path_factory.mktemp("learn-episodes")
    model = PolicyModel()
    return [episode(root / f"ep{i}", model, variant, seed, turns=3)
            for i, (variant, seed) in enumerate([(8, 1), (19, 2)])]


@pytest.fixture(scope="session")
def trajectories(short_trajectories: list[Trajectory], long_trajectories: list[Trajectory]) -> list[Trajectory]:
    return short_trajectories + long_trajectories
