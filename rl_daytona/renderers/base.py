"""The renderer protocol: one model's chat template on both sides of a sampling call.

    renderer.prompt_ids(messages)        # conversation + the `bash` tool schema -> prompt token ids
    renderer.parse(sampled_ids)          # -> ParsedMessage: a `bash` tool call or a final message
    renderer.choice(ids, logprobs, why)  # -> the endpoint's Choice (ids and logprobs passed through)
    renderer.stop                        # stop token ids for the sampler

Invariant: `parse` never raises on sampled tokens. A tool call the template's syntax cannot
read comes back as a `bash` call whose arguments are the raw text, so the agent answers it
with an error turn ("tool arguments are not valid JSON ...") and the rollout goes on; a
completion cut off before its stop token is a final message with finish_reason "length".
The content handed back keeps any thinking block exactly as the template expects to see it
again in history, and a tool call keeps its arguments' JSON text as sampled.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

from rl_daytona.agent import BASH_TOOL  # noqa: F401 - the one tool, re-exported for renderers
from rl_daytona.serving.openai_chat import ChatFormatError, Choice, message_text


@dataclass(frozen=True)
class ToolCallText:
    """One tool call as sampled: its name and its arguments' JSON text."""

    name: str
    arguments: str


@dataclass(frozen=True)
class ParsedMessage:
    """An assistant turn read back from sampled tokens."""

    content: str
    tool_calls: tuple[ToolCallText, ...] = ()
    finished: bool = True  # the completion ended on one of the renderer's stop tokens
    error: str = ""  # why a tool call could not be read (it is still returned, for the error turn)


@runtime_checkable
class Renderer(Protocol):
    """One model's chat template (see the module docstring)."""

    name: str
    stop: Sequence[int] | None

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]]) -> list[int]: ...

    def completion_ids(self, message: Mapping[str, Any]) -> list[int]: ...

    def parse(self, tokens: Sequence[int]) -> ParsedMessage: ...

    def decode(self, tokens: Sequence[int]) -> str: ...

    def choice(self, tokens: Sequence[int], logprobs: Sequence[float], stop_reason: str) -> Choice: ...


class RendererError(ChatFormatError):
    """A conversation a renderer cannot encode (wrong shape), or sampler output of the wrong length.

    A `ChatFormatError`, so the sampling endpoint answers it with HTTP 400 and one line."""


def content_text(message: Mapping[str, Any]) -> str:
    """A message's text: a string, None, or a list of text parts."""
    try:
        return message_text(message.get("content"))
    except ChatFormatError as exc:
        raise RendererError(str(exc)) from None


def tool_calls_of(message: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(name, arguments) of each OpenAI-style tool call of an assistant message."""
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise RendererError("an assistant message's 'tool_calls' must be a list")
    out = []
    for call in calls:
        function = call.get("function", call) if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            raise RendererError("every tool call must be an object with a 'function'")
        out.append((str(function.get("name", "")), function.get("arguments", "")))
    return out


def arguments_mapping(arguments: Any) -> Any:
    """Arguments as a mapping when they are a JSON object's text (templates iterate them), else as given."""
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
        return parsed if isinstance(parsed, dict) else arguments
    return arguments


def to_choice(parsed: ParsedMessage, tokens: Sequence[int], logprobs: Sequence[float]) -> Choice:
    """The endpoint's Choice for a parsed completion; ids and logprobs exactly as sampled."""
    ids, lps = tuple(int(t) for t in tokens), tuple(float(x) for x in logprobs)
    if len(ids) != len(lps):
        raise RendererError(f"the sampler returned {len(lps)} logprobs for {len(ids)} tokens")
    common = dict(token_ids=ids, logprobs=lps, top=tuple(() for _ in ids))
    if not parsed.finished:
        return Choice(**common, command=None, content=parsed.content, finish_reason="length")
    if not parsed.tool_calls:
        return Choice(**common, command=None, content=parsed.content, finish_reason="stop")
    call = parsed.tool_calls[0]  # the agent runs one command per turn
    return Choice(**common, command=_command(call), content=parsed.content or None, finish_reason="tool_calls",
                  tool_call_id=f"call_{uuid.uuid4().hex[:24]}", tool_name=call.name, arguments=call.arguments)


def _command(call: ToolCallText) -> str:
    try:
        args = json.loads(call.arguments)
    except json.JSONDecodeError:
        return ""
    command = args.get("command") if isinstance(args, dict) else None
    return command if isinstance(command, str) else ""
