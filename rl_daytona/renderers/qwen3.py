"""Qwen3's chat template (ChatML with `<think>` blocks and JSON `<tool_call>`s), rendered in Python.

    <|im_start|>system\n{system}\n\n# Tools ... <tools>\n{tool json}\n</tools> ...<|im_end|>
    <|im_start|>user\n{task}<|im_end|>
    <|im_start|>assistant\n<think>\n{reasoning}\n</think>\n\n{text}\n<tool_call>\n{"name": "bash", "arguments": {...}}\n</tool_call><|im_end|>
    <|im_start|>user\n<tool_response>\n{output}\n</tool_response><|im_end|>

Invariant: `prompt_text` is the text Qwen3's `tokenizer_config.json` template renders for the
same messages (Qwen/Qwen3-8B; the 2507 models differ only in the generation prompt): thinking
is kept only on assistant turns after the last real user message and dropped before it, a run
of tool results shares one `user` turn, and tool-call arguments given as text are written
verbatim. The variants differ in what the generation prompt ends with and whether the model's
own turn opens with a `<think>` block.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping, Sequence

from rl_daytona.renderers.base import ParsedMessage, RendererError, ToolCallText, content_text, tool_calls_of
from rl_daytona.renderers.tokenized import TokenizerRenderer

TOOLS_INTRO = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
               "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
TOOLS_OUTRO = ("\n</tools>\n\nFor each function call, return a json object with function name and arguments "
               "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
               '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"


def tojson(value: Any) -> str:
    """Jinja's `tojson` as transformers defines it for chat templates."""
    return json.dumps(value, ensure_ascii=False)


def split_thinking(message: Mapping[str, Any], content: str) -> tuple[str, str]:
    """(reasoning, content) the way Qwen's template splits an assistant message."""
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str):
        return reasoning, content
    if THINK_CLOSE in content:
        head, tail = content.split(THINK_CLOSE)[0], content.split(THINK_CLOSE)[-1]
        return head.rstrip("\n").split(THINK_OPEN)[-1].lstrip("\n"), tail.lstrip("\n")
    return "", content


def last_query_index(messages: Sequence[Mapping[str, Any]]) -> int:
    """Index of the last user message that is not a wrapped tool response (len - 1 if none)."""
    for index in range(len(messages) - 1, -1, -1):
        m = messages[index]
        text = m.get("content")
        if m.get("role") == "user" and isinstance(text, str) and not (
                text.startswith("<tool_response>") and text.endswith("</tool_response>")):
            return index
    return len(messages) - 1


class Qwen3Renderer(TokenizerRenderer):
    """Qwen3 hybrid models with thinking on (Qwen/Qwen3-8B, -4B, -32B, -30B-A3B)."""

    name = "qwen3"
    stop_texts = ("<|im_end|>",)
    generation_prefix = ""
    opens_with_thinking = True  # the model's own turn starts with a <think> block
    call_separator = "\n"  # between the text and the first tool call (when there is text)

    def prompt_text(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True) -> str:
        out = [self.system_text(messages)]
        query = last_query_index(messages)
        for index, message in enumerate(messages):
            out.append(self.message_text(messages, index, index > query))
        if add_generation_prompt:
            out.append("<|im_start|>assistant\n" + self.generation_prefix)
        return "".join(out)

    def system_text(self, messages: Sequence[Mapping[str, Any]]) -> str:
        first = messages[0]
        system = content_text(first) if first.get("role") == "system" else None
        if not self.tools:
            return "" if system is None else f"<|im_start|>system\n{system}<|im_end|>\n"
        head = "" if system is None else system + "\n\n"
        tools = "".join("\n" + tojson(t) for t in self.tools)
        return f"<|im_start|>system\n{head}{TOOLS_INTRO}{tools}{TOOLS_OUTRO}<|im_end|>\n"

    def message_text(self, messages: Sequence[Mapping[str, Any]], index: int, after_query: bool) -> str:
        message, last = messages[index], index == len(messages) - 1
        role = message.get("role")
        content = message.get("content") if isinstance(message.get("content"), str) else ""
        if role == "user" or (role == "system" and index > 0):
            return f"<|im_start|>{role}\n{content}<|im_end|>\n"
        if role == "system":
            return ""
        if role == "assistant":
            return self.assistant_text(message, content, after_query, last) + "<|im_end|>\n"
        if role == "tool":
            opens = index == 0 or messages[index - 1].get("role") != "tool"
            closes = last or messages[index + 1].get("role") != "tool"
            return (("<|im_start|>user" if opens else "") + f"\n<tool_response>\n{content}\n</tool_response>"
                    + ("<|im_end|>\n" if closes else ""))
        raise RendererError(f"unknown message role {role!r} (expected system, user, assistant or tool)")

    def assistant_text(self, message: Mapping[str, Any], content: str, after_query: bool, last: bool) -> str:
        reasoning, content = split_thinking(message, content)
        if after_query and (last or reasoning):
            body = f"{THINK_OPEN}\n{reasoning.strip(chr(10))}\n{THINK_CLOSE}\n\n{content.lstrip(chr(10))}"
        else:
            body = content
        return "<|im_start|>assistant\n" + body + self.calls_text(message, bool(content))

    def calls_text(self, message: Mapping[str, Any], has_content: bool) -> str:
        out = []
        for index, (name, arguments) in enumerate(tool_calls_of(message)):
            if index > 0 or has_content:
                out.append("\n")
            args = arguments if isinstance(arguments, str) else tojson(arguments)
            out.append(f'{CALL_OPEN}\n{{"name": "{name}", "arguments": {args}}}\n{CALL_CLOSE}')
        return "".join(out)

    def completion_text(self, message: Mapping[str, Any]) -> str:
        content = content_text(message)
        if self.opens_with_thinking:
            text = self.assistant_text(message, content, after_query=True, last=True)
        else:
            text = "<|im_start|>assistant\n" + content + self.calls_text(message, bool(content))
        head = "<|im_start|>assistant\n" + self.generation_prefix
        if not text.startswith(head):
            raise RendererError(f"{self.name}: this assistant message does not continue the generation prompt")
        return text[len(head):] + "<|im_end|>"

    def parse_text(self, text: str) -> ParsedMessage:
        return parse_tool_blocks(text, self.call_separator, self.parse_call)

    def parse_call(self, body: str) -> tuple[ToolCallText, str]:
        return parse_json_block(body)


def parse_tool_blocks(text: str, separator: str, parse_call: Callable[[str], tuple[ToolCallText, str]]) -> ParsedMessage:
    """Text, then `<tool_call>...</tool_call>` blocks (one newline apart); content keeps any think block."""
    close = text.find(THINK_CLOSE)
    start = text.find(CALL_OPEN, close + len(THINK_CLOSE) if close >= 0 else 0)
    if start < 0:
        return ParsedMessage(content=text)
    content = text[:start]
    content = content[:-len(separator)] if content.endswith(separator) else content
    calls, errors, rest = [], [], text[start:]
    while rest.startswith(CALL_OPEN):
        end = rest.find(CALL_CLOSE)
        if end < 0:
            calls.append(ToolCallText("bash", rest[len(CALL_OPEN):].strip()))
            errors.append("a <tool_call> block is not closed")
            rest = ""
            break
        call, error = parse_call(rest[len(CALL_OPEN):end])
        calls.append(call)
        errors += [error] if error else []
        rest = rest[end + len(CALL_CLOSE):]
        rest = rest[1:] if rest.startswith("\n" + CALL_OPEN) else rest
    if rest.strip():
        errors.append(f"text after the tool calls: {rest.strip()[:80]!r}")
    return ParsedMessage(content=content, tool_calls=tuple(calls), error="; ".join(errors))


def parse_json_block(body: str) -> tuple[ToolCallText, str]:
    """One `<tool_call>` JSON body: exact arguments text when it has the template's own shape."""
    head, tail = '\n{"name": "', "}\n"
    if body.startswith(head) and body.endswith(tail) and '", "arguments": ' in body:
        name, _, args = body[len(head):-len(tail)].partition('", "arguments": ')
        if _is_object(args) and '"' not in name:
            return ToolCallText(name, args), ""
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        return ToolCallText("bash", body.strip()), f"tool call is not JSON ({exc.msg})"
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return ToolCallText("bash", body.strip()), "tool call needs a 'name' and 'arguments'"
    args = obj.get("arguments", {})
    return ToolCallText(obj["name"], args if isinstance(args, str) else tojson(args)), ""


def _is_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except json.JSONDecodeError:
        return False


class Qwen3InstructRenderer(Qwen3Renderer):
    """Qwen3 instruct-2507 models (Qwen/Qwen3-4B-Instruct-2507): no thinking at all."""

    name = "qwen3_instruct"
    opens_with_thinking = False


class Qwen3DisableThinkingRenderer(Qwen3Renderer):
    """Qwen3 hybrid models with `enable_thinking=False`: the prompt ends in an empty think block."""

    name = "qwen3_disable_thinking"
    generation_prefix = "<think>\n\n</think>\n\n"


class Qwen3ThinkingRenderer(Qwen3Renderer):
    """Qwen3 thinking-2507 models (Qwen/Qwen3-4B-Thinking-2507): the prompt opens the think block."""

    name = "qwen3_thinking"
    generation_prefix = "<think>\n"
