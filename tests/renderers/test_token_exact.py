"""Property: for every renderer, random multi-turn conversations become datums whose trained
tokens are exactly the sampled tokens with their sampled logprobs, under the prompt each turn
really had, and whose prompt tokens are never trained."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rl_daytona.learn.datum import Datum
from rl_daytona.learn.segments import SegmentedTokens
from rl_daytona.policy.chat import SUBMIT_TEXT
from rl_daytona.renderers import pick_renderer

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc"), include_characters="\n\t"), max_size=24)
WORDS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zs", "Zl", "Zp")), min_size=1, max_size=12)
STEP = st.one_of(
    st.tuples(st.just("user"), TEXT),
    st.tuples(st.just("call"), WORDS, TEXT, st.lists(WORDS, min_size=1, max_size=3).map("\n".join), st.booleans()),
    st.tuples(st.just("answer"), WORDS, TEXT, st.booleans()),
)
THINKS = {"qwen3", "qwen3_thinking", "qwen3_5"}
RENDERERS = ["builtin", "qwen3", "qwen3_instruct", "qwen3_disable_thinking", "qwen3_thinking", "qwen3_5",
             "qwen3_5_disable_thinking", "llama3", "hf", "hf@llama3"]
JSON_ONLY_CALLS: set[int] = set()  # renderers whose tool-call turns carry no text (Llama 3's template drops it)


@pytest.fixture(scope="module", params=RENDERERS)
def renderer(request: pytest.FixtureRequest, tokenizers: dict[str, Any]) -> Any:
    name, _, family = request.param.partition("@")
    tok = None if name == "builtin" else tokenizers[family or ("llama3" if name == "llama3" else "qwen3")]
    renderer = pick_renderer(name, "m", tok)[0]
    if "llama3" in request.param:
        JSON_ONLY_CALLS.add(id(renderer))
    return renderer


def _reply(renderer: Any, step: tuple) -> dict[str, Any]:
    kind, reasoning, text = step[0], step[1], step[2]
    if renderer.name == "builtin":
        command = "cat calc.py" if kind == "call" else None
        return ({"role": "assistant", "content": None, "tool_calls": [_call(command)]} if command
                else {"role": "assistant", "content": SUBMIT_TEXT})
    content = f"<think>\n{reasoning}\n</think>\n\n{text}" if renderer.name in THINKS else text
    if id(renderer) in JSON_ONLY_CALLS and kind == "call":
        content = ""
    return {"role": "assistant", "content": content, **({"tool_calls": [_call(step[3])]} if kind == "call" else {})}


def _call(command: str) -> dict[str, Any]:
    return {"id": "c", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command}, ensure_ascii=False)}}


def _resplit(renderer: Any, ids: list[int]) -> list[int]:
    """The same text sampled as a different split: each multi-character ASCII token as single characters."""
    if renderer.name == "builtin":
        return ids
    out: list[int] = []
    for token in ids:
        piece = renderer.decode([token])
        singles = [renderer.encode(ch) for ch in piece] if len(piece) > 1 and piece.isascii() and token not in renderer.stop else []
        out += [i for s in singles for i in s] if singles and all(len(s) == 1 for s in singles) else [token]
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEP, min_size=1, max_size=5))
def test_every_trained_token_is_a_sampled_token_with_its_logprob(renderer: Any, steps: list[tuple]) -> None:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "fix ✓"}]
    tokens, sampled = SegmentedTokens(), []
    for index, step in enumerate(steps):
        if step[0] == "user":
            messages.append({"role": "user", "content": step[1] or "?"})
            continue
        prompt, reply = renderer.prompt_ids(messages), _reply(renderer, step)
        completion = renderer.completion_ids(reply)
        completion = _resplit(renderer, completion) if step[-1] else completion
        logprobs = [-(len(sampled) + i + 1) / 16 for i in range(len(completion))]
        sampled += list(zip(completion, logprobs))
        tokens.add_turn(prompt, completion, logprobs)
        start = tokens.segment_starts[-1] if tokens.segment_starts else 0
        assert tokens.token_ids[start:] == prompt + completion  # trained under the very prompt it had
        choice = renderer.choice(completion, logprobs, "stop")
        if step[0] == "call":
            assert choice.command == (step[3] if renderer.name != "builtin" else "cat calc.py")
            calls = [{"id": f"t{index}", "type": "function", "function": {"name": "bash", "arguments": choice.arguments or json.dumps({"command": choice.command})}}]
            messages += [{"role": "assistant", "content": choice.content, "tool_calls": calls},
                         {"role": "tool", "tool_call_id": f"t{index}", "content": f"{step[2]}\n[exit code 0]"}]
        else:
            assert choice.finish_reason == "stop" and choice.command is None
            messages.append({"role": "assistant", "content": choice.content})
    datums = [Datum.from_segment(s, 1.0) for s in tokens.segments() if any(s.loss_mask[1:])]
    trained = [(t, lp) for d in datums for t, lp, a in zip(d.target_tokens, d.logprobs, d.advantages) if a]
    assert trained == sampled
    for d in datums:  # prompt tokens: advantage 0 and logprob 0
        assert all(lp == 0.0 for lp, a in zip(d.logprobs, d.advantages) if not a)
