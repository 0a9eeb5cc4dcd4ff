"""Fixtures for the task tests: one real LocalBackend (bubblewrap) per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from rl_daytona.backends.local import LocalBackend


@pytest.fixture(scope="session")
def local_backend(tmp_path_factory: pytest.TempPathFactory) -> LocalBackend:
    return LocalBackend(Path(tmp_path_factory.mktemp("task-sandboxes")), isolation="bwrap")
