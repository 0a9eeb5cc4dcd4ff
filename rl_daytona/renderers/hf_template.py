"""Any other model: the tokenizer's own chat template, run by transformers' `apply_chat_template`.

Invariant: the prompt is exactly `tokenizer.apply_chat_template(messages, tools=[bash schema],
add_generation_prompt=True)` (tool-call arguments handed to the template as mappings, as vLLM
does), so it is what the model's publisher wrote. Parsing tries the tool-call syntaxes models
use with such templates (`<tool_call>` JSON or `<function=...>` XML blocks, a bare JSON call);
stop tokens are the tokenizer's end-of-sequence and end-of-turn tokens.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from rl_daytona.renderers.base import BASH_TOOL, ParsedMessage, RendererError, arguments_mapping
from rl_daytona.renderers.llama3 import parse_json_call
from rl_daytona.renderers.qwen3 import CALL_OPEN, parse_json_block, parse_tool_blocks
from rl_daytona.renderers.qwen3_5 import parse_xml_block
from rl_daytona.renderers.tokenized import TokenizerRenderer

END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
               "<|end_of_text|>", "</s>", "<|return|>", "<|call|>")


class HFTemplateRenderer(TokenizerRenderer):
    """The tokenizer's `chat_template` with the `bash` tool schema."""

    name = "hf"

    def __init__(self, tokenizer: Any, tools: Sequence[Mapping[str, Any]] = (BASH_TOOL,),
                 template_kwargs: Mapping[str, Any] | None = None) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise RendererError("the tokenizer has no chat template; pick a renderer by name with --renderer")
        vocab, eos = tokenizer.get_vocab(), getattr(tokenizer, "eos_token", None)
        ends = END_OF_TURN if eos in END_OF_TURN or not isinstance(eos, str) else (eos, *END_OF_TURN)
        self.stop_texts = tuple(t for t in ends if t in vocab)
        self.template_kwargs = dict(template_kwargs or {})
        super().__init__(tokenizer, tools)

    def prompt_text(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True) -> str:
        try:
            return str(self.tokenizer.apply_chat_template(
                [_for_template(m) for m in messages], tools=self.tools or None, tokenize=False,
                add_generation_prompt=add_generation_prompt, **self.template_kwargs))
        except Exception as exc:  # noqa: BLE001 - a template's own error (raise_exception) is one line
            raise RendererError(f"the chat template failed: {type(exc).__name__}: {str(exc)[:200]}") from None

    def completion_text(self, message: Mapping[str, Any]) -> str:
        """What follows the generation prompt when `message` is the reply, through its end-of-turn token."""
        context = [{"role": "user", "content": "."}]
        prompt = self.prompt_text(context)
        full = self.prompt_text([*context, message], add_generation_prompt=False)
        if not full.startswith(prompt):
            raise RendererError("this chat template does not render a reply as a continuation of its prompt")
        rest = full[len(prompt):]
        ends = [rest.rfind(t) + len(t) for t in self.stop_texts if t in rest]
        return rest[:max(ends)] if ends else rest

    def parse_text(self, text: str) -> ParsedMessage:
        if CALL_OPEN in text:
            xml = "<function=" in text[text.find(CALL_OPEN):]
            return parse_tool_blocks(text, "\n\n" if xml else "\n", parse_xml_block if xml else parse_json_block)
        return parse_json_call(text)


def _for_template(message: Mapping[str, Any]) -> dict[str, Any]:
    calls = message.get("tool_calls")
    if not calls:
        return dict(message)
    if not isinstance(calls, list):
        raise RendererError("an assistant message's 'tool_calls' must be a list")
    fixed = []
    for call in calls:
        function = dict(call.get("function") or {}) if isinstance(call, Mapping) else {}
        function["arguments"] = arguments_mapping(function.get("arguments", ""))
        fixed.append({**call, "function": function})
    return {**message, "tool_calls": fixed}
