"""The chat template: OpenAI messages <-> the policy's token ids.

Invariant (prefix stability): a prompt is the concatenation of one segment per message plus
the generation prompt `<|assistant|>`, and an assistant message's segment is `<|assistant|>`
followed by exactly the completion ids it was sampled as. So the prompt for turn k+1 starts
with (prompt of turn k + completion of turn k). An assistant message maps back to its ids by
the tool-call memo first, then by the grammar's canonical parse of the command, which gives
the same ids for anything this policy wrote; only foreign text falls back to bytes.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any, Mapping, Sequence

from rl_daytona.policy import grammar as G
from rl_daytona.policy import vocab as V
from rl_daytona.serving.openai_chat import ChatFormatError, message_text  # noqa: F401 - re-exported

# what the model says with <submit>: it hands the workspace in as it is (it may still fail)
SUBMIT_TEXT = "Submitted: the workspace as it is now."
ROLES = ("system", "user", "assistant", "tool")


class CompletionMemo:
    """A bounded map tool_call_id -> completion ids, filled when a completion is served."""

    def __init__(self, capacity: int = 200_000) -> None:
        self._ids: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._capacity = capacity

    def remember(self, tool_call_id: str, ids: Sequence[int]) -> None:
        self._ids[tool_call_id] = tuple(ids)
        if len(self._ids) > self._capacity:
            self._ids.popitem(last=False)

    def get(self, tool_call_id: str) -> tuple[int, ...] | None:
        return self._ids.get(tool_call_id)


def command_of_tool_call(call: Mapping[str, Any]) -> str:
    """The shell command carried by one `bash` tool call (raw arguments when not JSON)."""
    function = call.get("function") or {}
    arguments = function.get("arguments", "") if isinstance(function, Mapping) else ""
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
    except json.JSONDecodeError:
        return str(arguments)
    if isinstance(parsed, Mapping):
        return str(parsed.get("command", ""))
    return str(parsed)


def assistant_ids(message: Mapping[str, Any], memo: CompletionMemo | None = None) -> tuple[int, ...]:
    """The completion ids an assistant message stands for."""
    calls = message.get("tool_calls") or []
    if not isinstance(calls, Sequence) or isinstance(calls, (str, bytes)):
        raise ChatFormatError("an assistant message's 'tool_calls' must be a list of objects")
    if not calls:
        text = message_text(message.get("content"))
        if text == SUBMIT_TEXT:
            return (V.SUBMIT,)
        cut = G.parse_prefix(text)  # a completion cut off by max_tokens comes back as its text
        return cut if cut is not None else tuple(V.encode_bytes(text))
    call = calls[0]
    if not isinstance(call, Mapping):
        raise ChatFormatError("an assistant message's 'tool_calls' must be a list of objects")
    remembered = memo.get(str(call.get("id", ""))) if memo is not None else None
    if remembered is not None:
        return remembered
    command = command_of_tool_call(call)
    parsed = G.parse_command(command)
    return parsed if parsed is not None else tuple(V.encode_bytes(command))


def message_ids(message: Mapping[str, Any], memo: CompletionMemo | None = None) -> list[int]:
    """One message's segment: its role marker then its body."""
    if not isinstance(message, Mapping):
        raise ChatFormatError("every message must be an object")
    role = message.get("role")
    if role not in ROLES:
        raise ChatFormatError(f"unknown message role {role!r} (expected one of {', '.join(ROLES)})")
    if role == "assistant":
        return [V.ASSISTANT, *assistant_ids(message, memo)]
    return [V.ROLE_MARKERS[role], *V.encode_text(message_text(message.get("content")))]


def encode_prompt(messages: Sequence[Mapping[str, Any]], memo: CompletionMemo | None = None) -> list[int]:
    """Prompt ids for a chat: every message's segment, then the generation prompt."""
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)) or not messages:
        raise ChatFormatError("'messages' must be a non-empty list")
    ids: list[int] = []
    for message in messages:
        ids.extend(message_ids(message, memo))
    ids.append(V.ASSISTANT)
    return ids
