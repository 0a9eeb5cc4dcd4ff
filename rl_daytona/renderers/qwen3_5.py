"""Qwen3.5's chat format: Qwen3's ChatML and `<think>` blocks with XML tool calls.

    <|im_start|>assistant\n<think>\n{reasoning}\n</think>\n\n{text}\n\n<tool_call>\n<function=bash>\n<parameter=command>\n{command}\n</parameter>\n</function>\n</tool_call><|im_end|>

How the format was decided: Qwen3.5's template (Qwen/Qwen3.5-4B `tokenizer_config.json`) is not
available offline here; this follows its published description (Qwen's model card and the
tinker-cookbook notes on it): the tools are declared in the system turn with an XML calling
convention, a call is `<function=NAME>` with one `<parameter=NAME>` block per argument (strings
as written, other values as JSON), message text is trimmed, every assistant turn after the
last user message carries a think block (empty when it did not reason), thinking is dropped
before it, and the generation prompt opens the think block (`<think>\n`) or, with thinking
off, closes an empty one. Check a real tokenizer with `--renderer hf` if in doubt: the
generic renderer runs the model's own template.

Invariant: as for Qwen3, a history turn renders as its sampled text when the model followed
the format, and a call that does not parse reaches the agent as an error turn.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping, Sequence

from rl_daytona.renderers.base import ToolCallText, arguments_mapping, content_text, tool_calls_of
from rl_daytona.renderers.qwen3 import THINK_CLOSE, THINK_OPEN, Qwen3Renderer, split_thinking, tojson

TOOLS_HEAD = "# Tools\n\nYou have access to the following functions:\n\n<tools>"
TOOLS_TAIL = ("\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
              "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
              "</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\n"
              "that can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n"
              "- Function calls MUST follow the specified format: an inner <function=...></function> block must "
              "be nested within <tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n"
              "- You may provide optional reasoning for your function call in natural language BEFORE the "
              "function call, but NOT after\n- If there is no function call available, answer the question like "
              "normal with your current knowledge and do not tell the user about function calls\n</IMPORTANT>")
_CALL = re.compile(r"\A\n<function=([^>\n]+)>\n(.*)</function>\n\Z", re.DOTALL)
_PARAM = re.compile(r"<parameter=([^>\n]+)>\n(.*?)\n</parameter>\n", re.DOTALL)


class Qwen3_5Renderer(Qwen3Renderer):
    """Qwen3.5 models (Qwen/Qwen3.5-4B, -9B, -27B, ...) with thinking on."""

    name = "qwen3_5"
    generation_prefix = "<think>\n"
    call_separator = "\n\n"

    def system_text(self, messages: Sequence[Mapping[str, Any]]) -> str:
        first = messages[0]
        system = content_text(first).strip() if first.get("role") == "system" else ""
        if self.tools:
            tools = TOOLS_HEAD + "".join("\n" + tojson(t) for t in self.tools) + TOOLS_TAIL
            system = tools + ("\n\n" + system if system else "")
        elif first.get("role") != "system":
            return ""
        return f"<|im_start|>system\n{system}<|im_end|>\n"

    def message_text(self, messages: Sequence[Mapping[str, Any]], index: int, after_query: bool) -> str:
        message = messages[index]
        if isinstance(message.get("content"), str) and message.get("role") != "assistant":
            message = {**message, "content": message["content"].strip()}
        return super().message_text([*messages[:index], message, *messages[index + 1:]], index, after_query)

    def assistant_text(self, message: Mapping[str, Any], content: str, after_query: bool, last: bool) -> str:
        reasoning, content = split_thinking(message, content)
        content = content.strip()
        think = f"{THINK_OPEN}\n{reasoning.strip()}\n{THINK_CLOSE}\n\n" if after_query else ""
        return "<|im_start|>assistant\n" + think + content + self.calls_text(message, bool(content))

    def calls_text(self, message: Mapping[str, Any], has_content: bool) -> str:
        calls = []
        for name, arguments in tool_calls_of(message):
            args = arguments_mapping(arguments)
            params = "".join(f"<parameter={key}>\n{_value(value)}\n</parameter>\n"
                             for key, value in (args.items() if isinstance(args, dict) else ()))
            calls.append(f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>")
        return (self.call_separator if calls and has_content else "") + "\n".join(calls)

    def parse_call(self, body: str) -> tuple[ToolCallText, str]:
        return parse_xml_block(body)


def parse_xml_block(body: str) -> tuple[ToolCallText, str]:
    """One `<tool_call>` body in the XML convention; parameter values are kept as text."""
    match = _CALL.match(body)
    if match is None:
        return ToolCallText("bash", body.strip()), "tool call is not <function=NAME> with <parameter=...> blocks"
    params = dict(_PARAM.findall(match.group(2)))
    if _PARAM.sub("", match.group(2)).strip():
        return ToolCallText("bash", body.strip()), "unexpected text inside <function=...>"
    return ToolCallText(match.group(1), json.dumps(params, ensure_ascii=False)), ""


def _value(value: Any) -> str:
    return value if isinstance(value, str) else tojson(value)


class Qwen3_5DisableThinkingRenderer(Qwen3_5Renderer):
    """Qwen3.5 with thinking off: the generation prompt closes an empty think block."""

    name = "qwen3_5_disable_thinking"
    generation_prefix = "<think>\n\n</think>\n\n"
