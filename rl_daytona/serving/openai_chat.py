"""The OpenAI chat-completions wire format, as every endpoint of rl_daytona reads and writes it.

Invariant: `parse_request` either returns a validated `ChatRequest` or raises
`RequestError` (which the server turns into an HTTP 400 with an OpenAI-style error body);
`completion_response` emits the ChatCompletion shape plus vLLM's `return_token_ids` fields
(`prompt_token_ids` at the top, `token_ids` per choice), so clients cannot tell it from vLLM.
A token's text in the logprobs is the model's own when the caller gives `token_text`, else
vLLM's "token_id:N". Knows no model: the built-in policy and the Tinker sampler both use it.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

MAX_CHOICES = 16
TokenText = Callable[[int], "tuple[str, list[int]] | None"]  # a token's (text, bytes); None: not the model's


class ChatFormatError(ValueError):
    """A message list the template cannot encode (unknown role, wrong shape)."""


def message_text(content: Any) -> str:
    """Text of a message's content: a string, None, or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    raise ChatFormatError(f"message content must be a string or a list of parts, got {type(content).__name__}")


class RequestError(ValueError):
    """A request the server refuses (HTTP 400)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class ChatRequest:
    messages: tuple[Mapping[str, Any], ...]
    model: str = "builtin"
    temperature: float = 1.0
    max_tokens: int = 256
    seed: int | None = None
    n: int = 1
    logprobs: bool = False
    top_logprobs: int = 0
    return_token_ids: bool = False


@dataclass(frozen=True)
class Choice:
    """One sampled completion, ready to be written out."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    top: tuple[tuple[tuple[int, float], ...], ...]
    command: str | None  # None for <submit> or a cut-off completion
    content: str | None
    finish_reason: str
    tool_call_id: str = ""
    tool_name: str = "bash"
    arguments: str = ""  # the tool call's JSON text as sampled (a renderer's); "" -> {"command": command}


@dataclass(frozen=True)
class Completed:
    """A served request: its prompt ids, its choices, the policy version that sampled them."""

    prompt_ids: tuple[int, ...]
    choices: tuple[Choice, ...]
    version: int


def error_body(message: str, param: str | None = None, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}


def _number(body: Mapping[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise RequestError(f"'{key}' must be a number in [{low}, {high}], got {value!r}", key)
    return float(value)


def _integer(body: Mapping[str, Any], key: str, default: int | None, low: int, high: int) -> int | None:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RequestError(f"'{key}' must be an integer in [{low}, {high}], got {value!r}", key)
    return value


def parse_request(raw: bytes) -> ChatRequest:
    """Validate a chat-completions request body."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' is required and must be a non-empty list", "messages")
    max_tokens = _integer(body, "max_completion_tokens", None, 1, 1 << 20)
    max_tokens = _integer(body, "max_tokens", max_tokens or 256, 1, 1 << 20)
    return ChatRequest(
        messages=tuple(messages), model=str(body.get("model") or "builtin"),
        temperature=_number(body, "temperature", 1.0, 0.0, 100.0), max_tokens=int(max_tokens or 256),
        seed=_integer(body, "seed", None, -(1 << 63), (1 << 64) - 1),
        n=int(_integer(body, "n", 1, 1, MAX_CHOICES) or 1), logprobs=bool(body.get("logprobs")),
        top_logprobs=int(_integer(body, "top_logprobs", 0, 0, 20) or 0),
        return_token_ids=bool(body.get("return_token_ids")),
    )


MIN_LOGPROB = -9999.0  # what vLLM reports for impossible tokens: -inf is not JSON


def _finite(logprob: float) -> float:
    return max(float(logprob), MIN_LOGPROB)


def _token(token: int, token_text: TokenText | None) -> tuple[str, list[int]]:
    """(text, bytes) of a token as `token_text` reads it; else "token_id:N" (vLLM's convention)."""
    known = token_text(token) if token_text is not None else None
    return known if known is not None else (f"token_id:{token}", [])


def _logprob_entry(token: int, logprob: float, top: Sequence[tuple[int, float]],
                   token_text: TokenText | None) -> dict[str, Any]:
    text, raw = _token(token, token_text)
    tops = [(_token(t, token_text), lp) for t, lp in top]
    return {
        "token": text, "logprob": _finite(logprob), "bytes": raw,
        "top_logprobs": [{"token": tt, "logprob": _finite(lp), "bytes": tb} for (tt, tb), lp in tops],
    }


def _message(choice: Choice) -> dict[str, Any]:
    if choice.command is None:
        return {"role": "assistant", "content": choice.content, "tool_calls": None}
    arguments = choice.arguments or json.dumps({"command": choice.command})
    call = {"id": choice.tool_call_id, "type": "function", "function": {"name": choice.tool_name, "arguments": arguments}}
    return {"role": "assistant", "content": choice.content, "tool_calls": [call]}


def _choice_json(index: int, choice: Choice, request: ChatRequest, token_text: TokenText | None) -> dict[str, Any]:
    out: dict[str, Any] = {"index": index, "message": _message(choice), "finish_reason": choice.finish_reason,
                           "logprobs": None}
    if request.logprobs:
        content = [_logprob_entry(t, lp, top[: request.top_logprobs], token_text)
                   for t, lp, top in zip(choice.token_ids, choice.logprobs, choice.top)]
        out["logprobs"] = {"content": content, "refusal": None}
    if request.return_token_ids:
        out["token_ids"] = list(choice.token_ids)
    return out


def completion_response(request: ChatRequest, prompt_ids: Sequence[int], choices: Sequence[Choice],
                        version: int, token_text: TokenText | None = None) -> dict[str, Any]:
    """A ChatCompletion JSON object (with vLLM's token-id fields when asked); `token_text`
    names the model's tokens in the logprobs."""
    completion_tokens = sum(len(c.token_ids) for c in choices)
    out: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
        "model": request.model, "system_fingerprint": f"builtin-v{version}",
        "choices": [_choice_json(i, c, request, token_text) for i, c in enumerate(choices)],
        "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": completion_tokens,
                  "total_tokens": len(prompt_ids) + completion_tokens},
    }
    if request.return_token_ids:
        out["prompt_token_ids"] = list(prompt_ids)
    return out
