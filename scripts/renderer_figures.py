"""Per renderer: an 8-turn agent conversation on the locally built test tokenizers -> segments
(datums), tokens stored, tokens trained, and the time to render one prompt.

    PYTHONPATH=. .venv/bin/python scripts/renderer_figures.py
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from rl_daytona.learn.segments import SegmentedTokens
from rl_daytona.renderers import load_tokenizer, pick_renderer
from tests.renderers.tokenizer_folders import write_tokenizer_folder

THINKS = {"qwen3", "qwen3_thinking", "qwen3_5"}


def run(name: str, tokenizer: object, turns: int = 8) -> str:
    renderer, _ = pick_renderer(name, "m", tokenizer)
    messages = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix calc.py."}]
    tokens, render = SegmentedTokens(), 0.0
    for turn in range(turns):
        started = time.perf_counter()
        prompt = renderer.prompt_ids(messages)
        render += time.perf_counter() - started
        text = f"<think>\nstep {turn}\n</think>\n\n" if name in THINKS else ""
        call = {"id": f"c{turn}", "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": f"pytest -q -k t{turn}"})}}
        reply = {"role": "assistant", "content": "" if name == "llama3" else text + "Running.", "tool_calls": [call]}
        completion = renderer.completion_ids(reply)
        tokens.add_turn(prompt, completion, [-0.5] * len(completion))
        choice = renderer.choice(completion, [-0.5] * len(completion), "stop")
        messages += [{"role": "assistant", "content": choice.content, "tool_calls": [
                          {"id": f"c{turn}", "type": "function", "function": {"name": "bash", "arguments": choice.arguments}}]},
                     {"role": "tool", "tool_call_id": f"c{turn}", "content": f"{turn} passed\n[exit code 0]"}]
    return (f"{name:26s} datums {len(tokens.segment_starts) + 1:2d}  tokens stored {len(tokens.token_ids):6d}  "
            f"trained {sum(tokens.loss_mask):4d}  render {1000 * render / turns:5.2f} ms/prompt")


def main() -> None:
    root = Path(tempfile.mkdtemp())
    qwen = load_tokenizer(write_tokenizer_folder(root / "q", "qwen3", "qwen3"))
    llama = load_tokenizer(write_tokenizer_folder(root / "l", "llama3", "llama3"))
    for name in ("qwen3", "qwen3_instruct", "qwen3_disable_thinking", "qwen3_thinking", "qwen3_5",
                 "qwen3_5_disable_thinking", "hf"):
        print(run(name, qwen))
    print(run("llama3", llama))


if __name__ == "__main__":
    main()
