"""Small tokenizer folders made on this machine, one per model family, loaded the Hugging Face way.

Each folder holds a `tokenizer.json` (a byte-level BPE trained here in milliseconds, carrying the
family's special tokens) and a `tokenizer_config.json` with a chat template written for these
tests from the family's documented format (templates/*.jinja). Nothing is fetched: the real
tokenizers are too large to ship, and their ids differ, but every renderer reads ids only
through its tokenizer, so the same code runs on the real one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

TEMPLATES = Path(__file__).parent / "templates"
CORPUS = [
    "You are a coding agent working in /workspace. Use the bash tool to run one shell command",
    "The tests in test_calc.py fail. Fix calc.py so that every test passes.",
    '{"name": "bash", "arguments": {"command": "python -m pytest -x -q"}}',
    '{"name": "bash", "parameters": {"command": "cat calc.py"}}',
    "def add(a, b):\n    return a + b\n\n[exit code 0]\n", "sed -i 's/-/+/' calc.py && ls -la",
    "Let me look at the failing test first. I think the operator is wrong.\n\n", "Done: every test passes.",
    "<function=bash>\n<parameter=command>\nls\n</parameter>\n</function>", "Cutting Knowledge Date: December 2023",
]


# the families' published pre-tokenizer splits (digits: one at a time for Qwen, up to three for Llama 3)
SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}%s| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def _tokenizer(special: list[str], plain: list[str], digits: str) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT % digits), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, show_progress=False, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 3, trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in plain])
    return tok


FAMILIES: dict[str, dict[str, Any]] = {
    "qwen3": {"special": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
              "plain": ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"],
              "config": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None}, "digits": ""},
    "llama3": {"special": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                           "<|eot_id|>", "<|eom_id|>", "<|python_tag|>"], "plain": [],
               "config": {"eos_token": "<|eot_id|>", "bos_token": "<|begin_of_text|>"}, "digits": "{1,3}"},
}
FAMILIES["qwen3_5"] = FAMILIES["qwen3"]


def write_tokenizer_folder(folder: Path, family: str, template: str) -> Path:
    """A tokenizer folder for `family` with `templates/<template>.jinja` as its chat template."""
    spec = FAMILIES[family]
    folder.mkdir(parents=True, exist_ok=True)
    _tokenizer(spec["special"], spec["plain"], spec["digits"]).save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 131072,
              "clean_up_tokenization_spaces": False, **spec["config"],
              "chat_template": (TEMPLATES / f"{template}.jinja").read_text()}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return folder
