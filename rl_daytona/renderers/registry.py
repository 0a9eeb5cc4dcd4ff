"""Renderer names, `auto` by model name, and `pick_renderer` (the one entry point for the CLI).

    renderer, reason = pick_renderer("auto", "Qwen/Qwen3-4B-Instruct-2507")
    # reason: "renderer qwen3_instruct for Qwen/Qwen3-4B-Instruct-2507 (auto: a Qwen3 instruct-2507 model ...)"

Renderers are named here and loaded by name (`module:class`), so the registry imports none of
them: the built-in model's renderer sits outside the core and is reached only this way.

Invariant: `resolve_renderer` is pure (no tokenizer, no I/O): a known name resolves to itself,
`auto` to the first rule matching the model name (else `hf`, the model's own template), and an
unknown name raises ValueError in one line listing the choices. `pick_renderer` then loads the
tokenizer (`tokenizer` given, else the model name) only for renderers that need one.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

from rl_daytona.renderers.base import Renderer

RENDERERS: dict[str, str] = {
    "builtin": "the built-in model's command grammar (no tokenizer)",
    "qwen3": "Qwen3 hybrid models, thinking on",
    "qwen3_disable_thinking": "Qwen3 hybrid models, thinking off (enable_thinking=False)",
    "qwen3_instruct": "Qwen3 instruct-2507 models (no thinking)",
    "qwen3_thinking": "Qwen3 thinking-2507 models (the prompt opens <think>)",
    "qwen3_5": "Qwen3.5 / 3.6 models, thinking on",
    "qwen3_5_disable_thinking": "Qwen3.5 / 3.6 models, thinking off",
    "llama3": "Llama 3.1 / 3.2 / 3.3 instruct (JSON tool calls)",
    "hf": "any model: its tokenizer's own chat template via transformers",
}
_AUTO: tuple[tuple[str, str, str], ...] = (  # (pattern on the lower-cased name, renderer, why)
    (r"^builtin$", "builtin", "the built-in model"),
    (r"qwen3[._-]?[56]", "qwen3_5", "a Qwen3.5/3.6 model"),
    (r"qwen3.*(-vl|base|coder)", "hf", "a Qwen3 VL, base or coder model: its own chat template"),
    (r"qwen3.*instruct", "qwen3_instruct", "a Qwen3 instruct(-2507) model, which does not think"),
    (r"qwen3.*thinking", "qwen3_thinking", "a Qwen3 thinking(-2507) model"),
    (r"qwen3", "qwen3", "a Qwen3 hybrid model, thinking on as its template defaults"),
    (r"llama-?3(\.\d)?.*instruct", "llama3", "a Llama 3.x instruct model"),
)


def renderer_choices() -> str:
    return ", ".join(["auto", *RENDERERS])


def resolve_renderer(name: str, model_name: str) -> tuple[str, str]:
    """(renderer name, why) for `--renderer name` with model `model_name`."""
    if name == "auto":
        lowered = model_name.lower()
        for pattern, chosen, why in _AUTO:
            if re.search(pattern, lowered):
                return chosen, f"renderer {chosen} for {model_name} (auto: {why})"
        return "hf", f"renderer hf for {model_name} (auto: no dedicated renderer matches; using its own chat template)"
    if name not in RENDERERS:
        raise ValueError(f"unknown renderer {name!r}; choose one of: {renderer_choices()}")
    return name, f"renderer {name} for {model_name} ({RENDERERS[name]})"


_CLASSES: dict[str, str] = {  # name -> module:class; every class but builtin's takes a tokenizer
    "builtin": "rl_daytona.renderers.builtin:BuiltinChatRenderer",
    "qwen3": "rl_daytona.renderers.qwen3:Qwen3Renderer",
    "qwen3_disable_thinking": "rl_daytona.renderers.qwen3:Qwen3DisableThinkingRenderer",
    "qwen3_instruct": "rl_daytona.renderers.qwen3:Qwen3InstructRenderer",
    "qwen3_thinking": "rl_daytona.renderers.qwen3:Qwen3ThinkingRenderer",
    "qwen3_5": "rl_daytona.renderers.qwen3_5:Qwen3_5Renderer",
    "qwen3_5_disable_thinking": "rl_daytona.renderers.qwen3_5:Qwen3_5DisableThinkingRenderer",
    "llama3": "rl_daytona.renderers.llama3:Llama3Renderer",
    "hf": "rl_daytona.renderers.hf_template:HFTemplateRenderer",
}


def renderer_class(name: str) -> Any:
    """The class registered under `name` (a key of RENDERERS), imported on demand."""
    module, attribute = _CLASSES[name].split(":")
    return getattr(importlib.import_module(module), attribute)


def pick_renderer(name: str, model_name: str, tokenizer: Any = None) -> tuple[Renderer, str]:
    """The renderer `name` (or `auto`) for `model_name`, and one line saying which and why.

    `tokenizer`: a loaded tokenizer, or a hub name / local folder to load (default: `model_name`).
    Raises ValueError (unknown name, a tokenizer that cannot be loaded or lacks the renderer's tokens)."""
    chosen, reason = resolve_renderer(name, model_name)
    if chosen == "builtin":
        return renderer_class(chosen)(), reason
    if tokenizer is None or isinstance(tokenizer, str):
        from rl_daytona.renderers.tokenizer import load_tokenizer

        tokenizer = load_tokenizer(tokenizer or model_name)
    return renderer_class(chosen)(tokenizer), reason
