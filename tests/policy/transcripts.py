"""Real transcripts for the built-in policy tests.

A `CalcShell` is a directory holding one calc variant and the pristine tests; commands run
through `sh -c` there (with this venv's `python` first on PATH), and their output is shaped
exactly as the agent loop shapes it: `ExecResult.output`, cut by `truncate_output`, then the
`[exit code N]` line. A `Chat` keeps the OpenAI message list the agent would send.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from rl_daytona.agent import SYSTEM_PROMPT, truncate_output
from rl_daytona.backends.base import ExecResult
from rl_daytona.policy import grammar as G
from rl_daytona.policy import vocab as V
from rl_daytona.policy.chat import SUBMIT_TEXT, CompletionMemo, encode_prompt
from rl_daytona.tasks.calc import PROMPT, TEST_SOURCE, buggy_source
from rl_daytona.types import Settings

OUTPUT_LIMIT = Settings().output_limit
_BIN = str(Path(sys.executable).parent)


class CalcShell:
    """A scratch workspace with `calc.py` (one variant) and the pristine `test_calc.py`."""

    def __init__(self, root: Path, variant: int) -> None:
        root.mkdir(parents=True, exist_ok=True)
        (root / "calc.py").write_text(buggy_source(variant))
        (root / "test_calc.py").write_text(TEST_SOURCE)
        self.root = root
        self._env = {"PATH": f"{_BIN}:/usr/bin:/bin", "HOME": str(root), "LC_ALL": "C",
                     "PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}

    def exec(self, command: str) -> ExecResult:
        proc = subprocess.run(["sh", "-c", command], cwd=self.root, env=self._env, capture_output=True,
                              timeout=120)
        return ExecResult(proc.returncode, proc.stdout.decode("utf-8", "replace"),
                          proc.stderr.decode("utf-8", "replace"), 0.0)

    def run(self, command: str, output_limit: int = OUTPUT_LIMIT) -> str:
        """The tool message content the agent would send back for `command`."""
        return tool_content(self.exec(command), output_limit)

    def source(self) -> str:
        return (self.root / "calc.py").read_text()

    def source_lines(self) -> dict[int, str]:
        """calc.py as the policy numbers it: {line number: text}."""
        return dict(enumerate(self.source().splitlines(), start=1))


def tool_content(result: ExecResult, output_limit: int = OUTPUT_LIMIT) -> str:
    """What `agent._run_tool` sends back for one command's result."""
    return f"{truncate_output(result.output, output_limit)}\n[exit code {result.exit_code}]"


def command_ids(command: str) -> tuple[int, ...]:
    """The grammar completion of a command text (which must be one)."""
    ids = G.parse_command(command)
    assert ids is not None, f"not a grammar command: {command!r}"
    return ids


def tool_call_message(call_id: str, command: str) -> dict[str, Any]:
    """An assistant message as the agent echoes a `bash` tool call back."""
    call = {"id": call_id, "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": command})}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


class Chat:
    """The agent's message list, plus the prompt ids and completions of every turn so far."""

    def __init__(self, prompt: str = PROMPT, memo: CompletionMemo | None = None) -> None:
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": prompt}]
        self.memo = memo
        self.prompts: list[list[int]] = []
        self.completions: list[tuple[int, ...]] = []
        self.turn_starts: list[int] = []  # len(messages) when each turn's prompt was made

    def prompt_ids(self) -> list[int]:
        return encode_prompt(self.messages, self.memo)

    def act(self, ids: tuple[int, ...] | list[int], shell: CalcShell | None = None) -> str | None:
        """Append one turn whose completion is `ids`: its assistant message and (for a
        command) the tool output from `shell`. Returns the tool output."""
        ids = tuple(ids)
        self.prompts.append(self.prompt_ids())
        self.turn_starts.append(len(self.messages))
        self.completions.append(ids)
        if ids == (V.SUBMIT,):
            self.messages.append({"role": "assistant", "content": SUBMIT_TEXT})
            return None
        call_id = f"call_{len(self.completions)}"
        if self.memo is not None:
            self.memo.remember(call_id, ids)
        command = G.render(ids)
        self.messages.append(tool_call_message(call_id, command))
        assert shell is not None, "a command turn needs a shell"
        output = shell.run(command)
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
        return output

    def run(self, command: str, shell: CalcShell) -> str:
        out = self.act(command_ids(command), shell)
        assert out is not None
        return out

    def training_sequence(self) -> tuple[list[int], list[int]]:
        """(token ids, loss mask) of the whole chat as the trainer sees it after the last turn."""
        ids: list[int] = []
        mask: list[int] = []
        for prompt, completion in zip(self.prompts, self.completions):
            new_prompt = prompt[len(ids):]
            assert prompt[: len(ids)] == ids, "prefix property broken"
            ids += new_prompt + list(completion)
            mask += [0] * len(new_prompt) + [1] * len(completion)
        return ids, mask

