"""Tokenizer folders for the renderer tests, made once per session under a temp folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rl_daytona.renderers import load_tokenizer
from tests.renderers.tokenizer_folders import write_tokenizer_folder


@pytest.fixture(scope="session")
def tokenizer_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tokenizers")
    return {"qwen3": write_tokenizer_folder(root / "qwen3", "qwen3", "qwen3"),
            "llama3": write_tokenizer_folder(root / "llama3", "llama3", "llama3")}


@pytest.fixture(scope="session")
def tokenizers(tokenizer_folders: dict[str, Path]) -> dict[str, Any]:
    return {name: load_tokenizer(folder) for name, folder in tokenizer_folders.items()}
