"""Renderers against chat templates run by transformers, on tokenizers made here (nothing fetched)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rl_daytona.agent import BASH_TOOL, _command_of, ToolCall
from rl_daytona.learn.datum import Datum
from rl_daytona.learn.segments import SampledTurn, segment_turns
from rl_daytona.renderers import RENDERERS, TokenizerLoadError, load_tokenizer, pick_renderer, resolve_renderer
from rl_daytona.renderers.hf_template import HFTemplateRenderer, _for_template
from rl_daytona.renderers.llama3 import Llama3Renderer
from rl_daytona.renderers.qwen3 import Qwen3DisableThinkingRenderer, Qwen3Renderer


def _call(command: str, call_id: str = "c1") -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": command}, ensure_ascii=False)}}


HISTORY = [
    {"role": "system", "content": "You fix bugs."},
    {"role": "user", "content": "The tests fail. Fix calc.py — ünïcode ✓"},
    {"role": "assistant", "content": "<think>\nRead it first.\n</think>\n\nLooking.", "tool_calls": [_call("cat calc.py")]},
    {"role": "tool", "tool_call_id": "c1", "content": "def add(a, b):\n    return a - b\n[exit code 0]"},
    {"role": "assistant", "content": "", "tool_calls": [_call("sed -i 's/-/+/' calc.py\npytest -q", "c2")]},
    {"role": "tool", "tool_call_id": "c2", "content": "3 passed\n[exit code 0]"},
    {"role": "user", "content": "Now explain."},
    {"role": "assistant", "content": "<think>\nshort\n</think>\n\nThe operator was wrong."},
    {"role": "user", "content": "Thanks 日本"},
]


@pytest.mark.parametrize("cut", [2, 4, 6, 9])
@pytest.mark.parametrize("renderer_cls,kwargs", [(Qwen3Renderer, {}), (Qwen3DisableThinkingRenderer, {"enable_thinking": False})])
def test_qwen3_prompt_is_the_chat_template_s(tokenizers: dict[str, Any], cut: int, renderer_cls: type,
                                              kwargs: dict[str, Any]) -> None:
    tok = tokenizers["qwen3"]
    messages = HISTORY[:cut]
    want = tok.apply_chat_template(messages, tools=[BASH_TOOL], add_generation_prompt=True, tokenize=False, **kwargs)
    renderer = renderer_cls(tok)
    assert renderer.prompt_text(messages) == want
    assert renderer.prompt_ids(messages) == tok.encode(want, add_special_tokens=False)


def test_qwen3_drops_thinking_before_the_last_user_message(tokenizers: dict[str, Any]) -> None:
    text = Qwen3Renderer(tokenizers["qwen3"]).prompt_text(HISTORY)
    assert "Read it first." not in text and "short" not in text and "The operator was wrong." in text
    kept = Qwen3Renderer(tokenizers["qwen3"]).prompt_text(HISTORY[:6])
    assert "<think>\nRead it first.\n</think>\n\nLooking.\n<tool_call>" in kept


@pytest.mark.parametrize("cut", [2, 4, 6, 9])
def test_llama3_prompt_is_the_chat_template_s(tokenizers: dict[str, Any], cut: int) -> None:
    tok = tokenizers["llama3"]
    messages = HISTORY[:cut]
    as_served = [_for_template(m) for m in messages]  # arguments as mappings, as vLLM hands them to templates
    want = tok.apply_chat_template(as_served, tools=[BASH_TOOL], add_generation_prompt=True, tokenize=False)
    assert Llama3Renderer(tok).prompt_text(messages) == want
    assert HFTemplateRenderer(tok).prompt_text(messages) == want


def _sample(renderer: Any, messages: list[dict[str, Any]], reply: dict[str, Any]) -> tuple[SampledTurn, Any]:
    """What a model that follows the format samples for `reply`, and the endpoint's Choice for it."""
    prompt, completion = renderer.prompt_ids(messages), renderer.completion_ids(reply)
    logprobs = [-(i + 1) / 8 for i in range(len(completion))]
    return SampledTurn(tuple(prompt), tuple(completion), tuple(logprobs)), renderer.choice(completion, logprobs, "stop")


def _agent_loop(renderer: Any, replies: list[dict[str, Any]]) -> tuple[list[SampledTurn], list[Any]]:
    messages: list[dict[str, Any]] = [dict(m) for m in HISTORY[:2]]
    turns, choices = [], []
    for index, reply in enumerate(replies):
        turn, choice = _sample(renderer, messages, reply)
        turns.append(turn)
        choices.append(choice)
        calls = [{"id": f"t{index}", "type": "function",
                  "function": {"name": choice.tool_name, "arguments": choice.arguments}}] if choice.command is not None else []
        messages.append({"role": "assistant", "content": choice.content, **({"tool_calls": calls} if calls else {})})
        if calls:
            messages.append({"role": "tool", "tool_call_id": f"t{index}", "content": f"out {index}\n[exit code 0]"})
    return turns, choices


def _trained(turns: list[SampledTurn]) -> list[tuple[int, float]]:
    datums = [Datum.from_segment(s, 1.0) for s in segment_turns(turns) if any(s.loss_mask[1:])]
    return [(t, lp) for d in datums for t, lp, a in zip(d.target_tokens, d.logprobs, d.advantages) if a]


def _sampled(turns: list[SampledTurn]) -> list[tuple[int, float]]:
    return [(t, lp) for turn in turns for t, lp in zip(turn.completion_ids, turn.logprobs)]


def test_a_qwen3_thinking_conversation_renders_parses_and_trains_token_exact(tokenizers: dict[str, Any]) -> None:
    renderer = Qwen3Renderer(tokenizers["qwen3"])
    replies = [{"role": "assistant", "content": "<think>\nLook at calc.py.\n</think>\n\nReading.", "tool_calls": [_call("cat calc.py")]},
               {"role": "assistant", "content": "<think>\nThe minus is wrong — fix it.\n</think>\n\n", "tool_calls": [_call("sed -i 's/-/+/' calc.py")]},
               {"role": "assistant", "content": "<think>\nDone.\n</think>\n\nFixed: ✓"}]
    turns, choices = _agent_loop(renderer, replies)
    assert [c.finish_reason for c in choices] == ["tool_calls", "tool_calls", "stop"]
    assert [c.command for c in choices[:2]] == ["cat calc.py", "sed -i 's/-/+/' calc.py"]
    assert choices[0].content == "<think>\nLook at calc.py.\n</think>\n\nReading."
    assert len(segment_turns(turns)) == 1  # every history turn re-renders as it was sampled
    assert _trained(turns) == _sampled(turns)


def test_a_new_user_message_drops_qwen3_thinking_and_starts_a_new_datum(tokenizers: dict[str, Any]) -> None:
    renderer = Qwen3Renderer(tokenizers["qwen3"])
    messages = [dict(m) for m in HISTORY[:2]]
    first, choice = _sample(renderer, messages, {"role": "assistant", "content": "<think>\nhm\n</think>\n\nDone."})
    messages += [{"role": "assistant", "content": choice.content}, {"role": "user", "content": "Again?"}]
    second, _ = _sample(renderer, messages, {"role": "assistant", "content": "<think>\nyes\n</think>\n\nYes."})
    segments = segment_turns([first, second])
    assert len(segments) == 2 and _trained([first, second]) == _sampled([first, second])
    assert "hm" not in renderer.decode(second.prompt_ids)


def test_a_llama3_conversation_with_tool_calls_is_token_exact(tokenizers: dict[str, Any]) -> None:
    renderer = Llama3Renderer(tokenizers["llama3"])
    replies = [{"role": "assistant", "content": "", "tool_calls": [_call("cat calc.py")]},
               {"role": "assistant", "content": "", "tool_calls": [_call("python -m pytest -q")]},
               {"role": "assistant", "content": "All tests pass."}]
    turns, choices = _agent_loop(renderer, replies)
    assert [c.command for c in choices] == ["cat calc.py", "python -m pytest -q", None]
    assert choices[2].content == "All tests pass." and len(segment_turns(turns)) == 1
    assert _trained(turns) == _sampled(turns)


def test_a_llama3_call_ended_by_eom_id_parses_and_starts_a_new_datum(tokenizers: dict[str, Any]) -> None:
    tok = tokenizers["llama3"]
    renderer = Llama3Renderer(tok)
    eom = tok.convert_tokens_to_ids("<|eom_id|>")
    messages = [dict(m) for m in HISTORY[:2]]
    completion = renderer.completion_ids({"role": "assistant", "tool_calls": [_call("ls")]})[:-1] + [eom]
    choice = renderer.choice(completion, [-0.1] * len(completion), "stop")
    assert choice.command == "ls" and renderer.stop == [tok.convert_tokens_to_ids(t) for t in ("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>")]
    first = SampledTurn(tuple(renderer.prompt_ids(messages)), tuple(completion), (-0.1,) * len(completion))
    messages += [{"role": "assistant", "content": None, "tool_calls": [{"id": "x", "function": {"name": "bash", "arguments": choice.arguments}}]},
                 {"role": "tool", "content": "ok"}]
    second, _ = _sample(renderer, messages, {"role": "assistant", "content": "Done."})
    assert len(segment_turns([first, second])) == 2 and _trained([first, second]) == _sampled([first, second])


@pytest.mark.parametrize("name,text", [
    ("qwen3", '<think>\nx\n</think>\n\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"\n</tool_call>'),
    ("qwen3", "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}"),
    ("qwen3_5", "x\n</think>\n\n<tool_call>\n<function=bash>\n<parameter=command>\nls\n</function>\n</tool_call>"),
    ("llama3", '{"name": "bash", "parameters": {"command": "ls"'),
])
def test_a_malformed_tool_call_becomes_an_error_turn_never_a_crash(tokenizers: dict[str, Any], name: str,
                                                                   text: str) -> None:
    tok = tokenizers["llama3" if name == "llama3" else "qwen3"]
    renderer, _ = pick_renderer(name, "m", tok)
    ids = renderer.encode(text) + [renderer.stop[0]]
    parsed = renderer.parse(ids)
    assert parsed.error and parsed.tool_calls and parsed.tool_calls[0].name == "bash"
    choice = renderer.choice(ids, [0.0] * len(ids), "stop")
    assert choice.finish_reason == "tool_calls"
    command, error = _command_of(ToolCall("x", choice.tool_name, choice.arguments))
    assert command is None and error.startswith("error:")


def test_a_completion_cut_off_before_its_stop_token_is_a_length_finish(tokenizers: dict[str, Any]) -> None:
    renderer = Qwen3Renderer(tokenizers["qwen3"])
    ids = renderer.encode("<think>\nstill thinking")
    choice = renderer.choice(ids, [0.0] * len(ids), "length")
    assert choice.finish_reason == "length" and choice.command is None and choice.token_ids == tuple(ids)


def test_qwen3_5_xml_tool_calls_round_trip(tokenizers: dict[str, Any]) -> None:
    renderer, _ = pick_renderer("qwen3_5", "Qwen/Qwen3.5-4B", tokenizers["qwen3"])
    assert renderer.prompt_text(HISTORY[:2]).endswith("<|im_start|>assistant\n<think>\n")
    reply = {"role": "assistant", "content": "<think>\nplan\n</think>\n\nRunning.", "tool_calls": [_call("echo 'a\nb' ✓")]}
    text = renderer.completion_text(reply)
    assert text == ("plan\n</think>\n\nRunning.\n\n<tool_call>\n<function=bash>\n<parameter=command>\necho 'a\nb' ✓\n"
                    "</parameter>\n</function>\n</tool_call><|im_end|>")
    choice = renderer.choice(renderer.completion_ids(reply), [0.0] * len(renderer.completion_ids(reply)), "stop")
    assert choice.command == "echo 'a\nb' ✓" and choice.content == "<think>\nplan\n</think>\n\nRunning."


def test_the_generic_renderer_runs_the_tokenizer_s_template_and_reads_its_calls(tokenizers: dict[str, Any]) -> None:
    tok = tokenizers["qwen3"]
    renderer = HFTemplateRenderer(tok)
    want = tok.apply_chat_template(HISTORY[:6], tools=[BASH_TOOL], add_generation_prompt=True, tokenize=False)
    assert renderer.prompt_text(HISTORY[:6]) == want and renderer.stop == [tok.convert_tokens_to_ids("<|im_end|>"),
                                                                          tok.convert_tokens_to_ids("<|endoftext|>")]
    ids = renderer.completion_ids({"role": "assistant", "content": "", "tool_calls": [_call("ls -la")]})
    assert renderer.choice(ids, [0.0] * len(ids), "stop").command == "ls -la"


def test_auto_picks_by_model_name_and_says_which(tokenizers: dict[str, Any]) -> None:
    assert resolve_renderer("auto", "Qwen/Qwen3-4B-Instruct-2507")[0] == "qwen3_instruct"
    assert resolve_renderer("auto", "Qwen/Qwen3-8B")[0] == "qwen3"
    assert resolve_renderer("auto", "Qwen/Qwen3.5-4B")[0] == "qwen3_5"
    assert resolve_renderer("auto", "meta-llama/Llama-3.1-8B-Instruct")[0] == "llama3"
    assert resolve_renderer("auto", "mistralai/Mistral-7B-Instruct-v0.3")[0] == "hf"
    renderer, reason = pick_renderer("auto", "Qwen/Qwen3-4B-Instruct-2507", tokenizers["qwen3"])
    assert renderer.name == "qwen3_instruct" and reason.startswith("renderer qwen3_instruct for Qwen/Qwen3-4B-Instruct-2507")
    builtin, _ = pick_renderer("builtin", "builtin")
    assert builtin.stop is None and builtin.name == "builtin"


def test_an_unknown_renderer_is_one_line_listing_the_choices() -> None:
    with pytest.raises(ValueError) as info:
        resolve_renderer("qwen4", "x")
    assert "\n" not in str(info.value) and all(name in str(info.value) for name in ["auto", *RENDERERS])


def test_tokenizers_load_from_a_local_folder_and_fail_in_one_line(tokenizer_folders: dict[str, Path],
                                                                  tmp_path: Path) -> None:
    tok = load_tokenizer(tokenizer_folders["llama3"])
    assert tok.convert_tokens_to_ids("<|eot_id|>") is not None and tok.chat_template
    with pytest.raises(TokenizerLoadError, match="does not exist") as info:
        load_tokenizer(tmp_path / "missing")
    assert "\n" not in str(info.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(TokenizerLoadError, match="--tokenizer PATH"):
        load_tokenizer(tmp_path / "empty")
    with pytest.raises(ValueError, match="stop tokens"):
        Llama3Renderer(load_tokenizer(tokenizer_folders["qwen3"]))


def test_transformers_loads_tokenizers_without_torch() -> None:
    import sys

    import transformers  # noqa: F401

    assert "torch" not in sys.modules


def test_a_hub_name_loads_from_the_hugging_face_cache_offline(tokenizer_folders: dict[str, Path], tmp_path: Path) -> None:
    """The cache layout huggingface_hub writes (models--ORG--NAME/refs/main -> snapshots/REV/...)."""
    import os
    import shutil
    import subprocess
    import sys

    repo = tmp_path / "hub" / "models--test-org--tiny-qwen3"
    shutil.copytree(tokenizer_folders["qwen3"], repo / "snapshots" / "abc123")
    (repo / "snapshots" / "abc123" / "config.json").write_text('{"model_type": "qwen3"}')  # a hub repo has one
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    code = ("from rl_daytona.renderers import pick_renderer; r, why = pick_renderer('auto', 'test-org/tiny-qwen3'); "
            "print(r.name, r.stop)")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-800:]
    assert proc.stdout.startswith("qwen3 [")
    missing = subprocess.run([sys.executable, "-c", code.replace("tiny-qwen3", "absent")], env=env,
                             capture_output=True, text=True, timeout=120)
    assert "not in the Hugging Face cache" in missing.stderr
