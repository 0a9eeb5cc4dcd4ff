"""The policy on a nested workspace it was never written for (textkit: `textkit/*.py`, `tests/`):
files come from the prompt and the look, beliefs are kept per file, edits name their file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from rl_daytona.backends.base import ExecResult
from rl_daytona.policy import features as F
from rl_daytona.policy import grammar as G
from rl_daytona.policy import params as P
from rl_daytona.policy import vocab as V
from rl_daytona.policy.model import PolicyModel, log_softmax
from rl_daytona.policy.observe import observe
from rl_daytona.policy.path_features import relevance
from rl_daytona.tasks.textkit import PROMPT, TESTS, seeded_files
from tests.policy.transcripts import Chat, tool_content

_BIN = str(Path(sys.executable).parent)


class Workspace:
    """A scratch folder holding one textkit variant; commands run through `sh -c` there."""

    def __init__(self, root: Path, variant: int) -> None:
        for path, text in {**seeded_files(variant), **TESTS}.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
        self.root = root

    def run(self, command: str) -> str:
        env = {"PATH": f"{_BIN}:/usr/bin:/bin", "HOME": str(self.root), "LC_ALL": "C", "PYTHONDONTWRITEBYTECODE": "1"}
        proc = subprocess.run(["sh", "-c", command], cwd=self.root, env=env, capture_output=True, timeout=120)
        return tool_content(ExecResult(proc.returncode, proc.stdout.decode(), proc.stderr.decode(), 0.0))

    def lines(self, path: str) -> dict[int, str]:
        return {n: t for n, t in enumerate((self.root / path).read_text().splitlines(), 1) if t.strip()}


def test_files_beliefs_and_edits_follow_the_nested_layout(tmp_path: Path) -> None:
    shell, chat = Workspace(tmp_path, 24), Chat(prompt=PROMPT)  # count_above's `>=` and rotate's `//`
    obs = observe(chat.prompt_ids())
    assert obs.sources == ("textkit/strings.py", "textkit/seqs.py") and "tests/test_seqs.py" in obs.files

    chat.run(V.LOOK_VERB, shell)
    obs = observe(chat.prompt_ids())
    assert obs.path == "textkit/seqs.py" and obs.failing_functions == {"count_above", "rotate"}
    assert obs.lines == shell.lines("textkit/seqs.py")
    assert obs.beliefs["textkit/strings.py"].lines == shell.lines("textkit/strings.py")
    assert not obs.beliefs["textkit/strings.py"].failing_functions and "textkit/__init__.py" in obs.files

    line = next(n for n, t in obs.lines.items() if " >= " in t)
    chat.run(f"f=textkit/seqs.py; sed -i '{line}s/ >= / > /' \"$f\"" + V.EDIT_SUFFIXES[0], shell)
    obs = observe(chat.prompt_ids())
    assert obs.lines == shell.lines("textkit/seqs.py") and obs.failing_functions == {"rotate"}
    assert obs.failing_tests == ("test_rotate_one",) and not obs.bad_texts


def test_a_path_byte_is_scored_as_the_most_relevant_file_it_leads_to(tmp_path: Path) -> None:
    """`textkit/s` leads to `seqs.py` and `strings.py`: when the failing function is in
    `strings.py`, the byte carries that file's features, so the package's `__init__.py` (a
    docstring) is not an even bet against it."""
    shell, chat = Workspace(tmp_path, 32), Chat(prompt=PROMPT)  # truncate's `width - 2`, in strings.py
    chat.run(V.LOOK_VERB, shell)
    obs = observe(chat.prompt_ids())
    assert obs.beliefs["textkit/strings.py"].failing_functions == {"truncate"}
    ranked = sorted(obs.sources, key=lambda p: relevance(obs, p))
    assert ranked[0] == "textkit/strings.py" and ranked[1:] == ["textkit/__init__.py", "textkit/seqs.py"]

    prefix = [G.EDIT_ID, *V.encode_bytes("textkit/")]
    decision = F.decide(obs, prefix, G.walk(prefix + V.encode_bytes("s"))[-1])
    init, s = V.BYTE_OFFSET + ord("_"), V.BYTE_OFFSET + ord("s")
    assert set(decision.candidates) == {init, s}
    (block,) = decision.blocks
    flags = {c: {P.PATH_FEATURES[i] for i, v in zip(block.index[k], block.value[k]) if v}
             for k, c in enumerate(decision.candidates)}
    assert "has_failing_fn" in flags[s] and "has_failing_fn" not in flags[init]
    p = np.exp(log_softmax(PolicyModel().logits(decision)))
    assert p[decision.candidates.index(init)] < 0.01
