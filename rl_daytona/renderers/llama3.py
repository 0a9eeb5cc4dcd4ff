"""Llama 3.1 / 3.2 / 3.3 instruct: header-delimited turns and JSON tool calls (Meta's documented format).

    <|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n{system}<|eot_id|>
    <|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, ... {tool json, indent 4}\n\n{task}<|eot_id|>
    <|start_header_id|>assistant<|end_header_id|>\n\n{"name": "bash", "parameters": {"command": "ls"}}<|eot_id|>
    <|start_header_id|>ipython<|end_header_id|>\n\n{output}<|eot_id|>

Invariant: `prompt_text` is what Meta's Llama 3.1 template renders with `tools` (tool definitions
in the first user message, the default): text is trimmed, a tool-call turn is its JSON only,
tool results are `ipython` turns. A turn ends with `<|eot_id|>`; the model may also end a
tool call with `<|eom_id|>` ("a tool is to be run"), so both stop sampling; history is always
re-rendered with `<|eot_id|>` as the template does (a turn that ended on `<|eom_id|>` starts a
new datum rather than being trained under a token it did not sample). "Today Date" is fixed
(`date_string`, the template's own default) so a prompt does not change at midnight.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from rl_daytona.renderers.base import (BASH_TOOL, ParsedMessage, RendererError, ToolCallText, arguments_mapping, content_text,
                                       tool_calls_of)
from rl_daytona.renderers.tokenized import TokenizerRenderer

TOOLS_PREAMBLE = ("Given the following functions, please respond with a JSON for a function call with its proper "
                  "arguments that best answers the given prompt.\n\n"
                  'Respond in the format {"name": function name, "parameters": dictionary of argument name and its '
                  'value}.Do not use variables.\n\n')


def _header(role: str) -> str:
    return f"<|start_header_id|>{role}<|end_header_id|>\n\n"


class Llama3Renderer(TokenizerRenderer):
    """Llama 3.x instruct models (meta-llama/Llama-3.1-8B-Instruct, Llama-3.2-3B-Instruct, ...)."""

    name = "llama3"
    stop_texts = ("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>")

    def __init__(self, tokenizer: Any, tools: Sequence[Mapping[str, Any]] = (BASH_TOOL,),
                 date_string: str = "26 Jul 2024") -> None:
        super().__init__(tokenizer, tools)
        self.date_string = date_string

    def prompt_text(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True) -> str:
        rest = list(messages)
        system = content_text(rest.pop(0)).strip() if rest and rest[0].get("role") == "system" else ""
        env = "Environment: ipython\n" if self.tools else ""
        out = ["<|begin_of_text|>", _header("system"), env, "Cutting Knowledge Date: December 2023\n",
               f"Today Date: {self.date_string}\n\n", system, "<|eot_id|>"]
        if self.tools:
            if not rest or rest[0].get("role") != "user":
                raise RendererError("llama3 puts the tools in the first user message, and there is none")
            tools = "".join(json.dumps(t, indent=4, ensure_ascii=False) + "\n\n" for t in self.tools)
            out += [_header("user"), TOOLS_PREAMBLE, tools, content_text(rest.pop(0)).strip(), "<|eot_id|>"]
        out += [self.message_text(m) for m in rest]
        if add_generation_prompt:
            out.append(_header("assistant"))
        return "".join(out)

    def message_text(self, message: Mapping[str, Any]) -> str:
        role = message.get("role")
        if role in ("tool", "ipython"):
            content = message.get("content")
            body = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
            return _header("ipython") + body + "<|eot_id|>"
        if role == "assistant" and message.get("tool_calls"):
            return _header("assistant") + self.call_text(message) + "<|eot_id|>"
        if role not in ("system", "user", "assistant"):
            raise RendererError(f"unknown message role {role!r} (expected system, user, assistant or tool)")
        return _header(str(role)) + content_text(message).strip() + "<|eot_id|>"

    def call_text(self, message: Mapping[str, Any]) -> str:
        calls = tool_calls_of(message)
        if len(calls) != 1:
            raise RendererError("llama3's template holds exactly one tool call per assistant turn")
        name, arguments = calls[0]
        args = arguments_mapping(arguments)
        return f'{{"name": "{name}", "parameters": {json.dumps(args, ensure_ascii=False)}}}'

    def completion_text(self, message: Mapping[str, Any]) -> str:
        body = self.call_text(message) if message.get("tool_calls") else content_text(message).strip()
        return body + "<|eot_id|>"

    def parse_text(self, text: str) -> ParsedMessage:
        return parse_json_call(text)


def parse_json_call(text: str) -> ParsedMessage:
    """A turn that is one bare JSON call `{"name": ..., "parameters": {...}}`, or plain text."""
    body = text.removeprefix("<|python_tag|>").strip()
    if not body.startswith("{"):
        return ParsedMessage(content=text.strip())
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        if '"name"' not in body:
            return ParsedMessage(content=text.strip())
        return ParsedMessage(content="", tool_calls=(ToolCallText("bash", body),),
                             error=f"tool call is not JSON ({exc.msg})")
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return ParsedMessage(content=text.strip())
    args = obj.get("parameters", obj.get("arguments", {}))
    args_text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return ParsedMessage(content="", tool_calls=(ToolCallText(obj["name"], args_text),))
