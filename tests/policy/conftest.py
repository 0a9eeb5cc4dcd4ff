"""Shared fixtures for the built-in policy tests: realistic contexts and completions sampled on them.

Contexts come from real transcripts (real calc variants, real `nl`/`sed`/`pytest` output shaped
like the agent shapes it); completions are sampled by the real `PolicyModel` with seeded rngs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from rl_daytona.policy import vocab as V
from rl_daytona.policy.model import PolicyModel
from tests.policy.transcripts import CalcShell, Chat

# Commands of the fixed transcripts (all grammar commands; checked by `command_ids`).
LOOK = V.LOOK_VERB
# variant 8 bugs: median line 11 (`% 2 == 0`) and percentile line 41 (`s[f] - (...)`)
EDIT_NOT_FIXING_MEDIAN = "f=calc.py; sed -i '13s/ \\/ / \\/\\/ /' \"$f\"" + V.EDIT_SUFFIXES[0]
# variant 0 bug: mean line 5; this edit leaves a syntax error
EDIT_BREAKING_SYNTAX = "f=calc.py; sed -i '5s/ \\/ /not /' \"$f\"" + V.EDIT_SUFFIXES[0]


@dataclass(frozen=True)
class Sample:
    context_name: str
    context: tuple[int, ...]
    ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    temperature: float
    finished: bool


def _contexts(root: Path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {"fresh": Chat().prompt_ids()}

    chat, shell = Chat(), CalcShell(root / "looked", 8)
    chat.run(LOOK, shell)
    out["looked"] = chat.prompt_ids()
    chat.run(EDIT_NOT_FIXING_MEDIAN, shell)
    out["edit_rejected"] = chat.prompt_ids()

    chat, shell = Chat(), CalcShell(root / "three_bugs", 19)
    chat.run(LOOK, shell)
    out["looked_three_bugs"] = chat.prompt_ids()

    chat, shell = Chat(), CalcShell(root / "read_then_tested", 3)
    chat.run("cat calc.py", shell)
    chat.run("python -m pytest -q", shell)
    out["read_then_tested"] = chat.prompt_ids()

    chat, shell = Chat(), CalcShell(root / "broken", 0)
    chat.run(LOOK, shell)
    chat.run(EDIT_BREAKING_SYNTAX, shell)
    out["broken"] = chat.prompt_ids()
    return out


@pytest.fixture(scope="session")
def contexts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[int]]:
    """Prompt ids (ending in `<|assistant|>`) of a few realistic points of a calc episode."""
    return _contexts(tmp_path_factory.mktemp("policy-contexts"))


@pytest.fixture(scope="session")
def prior_model() -> PolicyModel:
    """The untrained policy; tests must not change its params (use a fresh one to train)."""
    return PolicyModel()


@pytest.fixture(scope="session")
def samples(contexts: dict[str, list[int]], prior_model: PolicyModel) -> list[Sample]:
    """Completions sampled on every context at a few temperatures (seeded)."""
    out = []
    rng = np.random.default_rng(20240611)
    for name, context in contexts.items():
        for temperature in (1.0, 2.5):
            for _ in range(8):
                s = prior_model.sample_detailed(context, rng, temperature)
                out.append(Sample(name, tuple(context), s.token_ids, s.logprobs, temperature, s.finished))
    return out


@dataclass
class Episode:
    """A policy-driven chat on a real shell: per turn the prompt, the sampled completion and
    its logprobs, and calc.py's real lines when the prompt was made (plus after the last turn)."""

    variant: int
    chat: Chat
    logprobs: list[tuple[float, ...]]
    files: list[dict[int, str]]


def _episode(root: Path, model: PolicyModel, variant: int, seed: int, turns: int) -> Episode:
    shell, chat = CalcShell(root, variant), Chat()
    rng = np.random.default_rng(seed)
    episode = Episode(variant, chat, [], [])
    for _ in range(turns):
        episode.files.append(shell.source_lines())
        ids, lps = model.sample(chat.prompt_ids(), rng)
        episode.logprobs.append(tuple(lps))
        chat.act(ids, shell)
        if ids == [V.SUBMIT]:
            break
    episode.files.append(shell.source_lines())
    return episode


@pytest.fixture(scope="session")
def episodes(tmp_path_factory: pytest.TempPathFactory, prior_model: PolicyModel) -> list[Episode]:
    """Two multi-turn episodes the prior policy drives on real calc variants (seeded)."""
    root = tmp_path_factory.mktemp("policy-episodes")
    return [_episode(root / f"ep{i}", prior_model, variant, seed, turns=6)
            for i, (variant, seed) in enumerate([(8, 1), (19, 2)])]
