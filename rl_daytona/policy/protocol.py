"""The OpenAI chat-completions wire format, as the built-in policy reads and writes it.

Invariant: `parse_request` either returns a validated `ChatRequest` or raises
`RequestError` (which the server turns into an HTTP 400 with an OpenAI-style error body);
`completion_response` emits the ChatCompletion shape plus vLLM's `return_token_ids` fields
(`prompt_token_ids` at the top, `token_ids` per choice), so clients cannot tell it from vLLM.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from rl_daytona.policy import vocab as V

MAX_CHOICES = 16


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


def _token(token: int) -> tuple[str, list[int]]:
    """(text, bytes) of a built-in token; another model's id reads "token_id:N" (vLLM's convention)."""
    if 0 <= token < V.VOCAB_SIZE:
        return V.token_text(token), V.token_bytes(token)
    return f"token_id:{token}", []


def _logprob_entry(token: int, logprob: float, top: Sequence[tuple[int, float]]) -> dict[str, Any]:
    text, raw = _token(token)
    return {
        "token": text, "logprob": _finite(logprob), "bytes": raw,
        "top_logprobs": [{"token": _token(t)[0], "logprob": _finite(lp), "bytes": _token(t)[1]} for t, lp in top],
    }


def _message(choice: Choice) -> dict[str, Any]:
    if choice.command is None:
        return {"role": "assistant", "content": choice.content, "tool_calls": None}
    arguments = choice.arguments or json.dumps({"command": choice.command})
    call = {"id": choice.tool_call_id, "type": "function", "function": {"name": choice.tool_name, "arguments": arguments}}
    return {"role": "assistant", "content": choice.content, "tool_calls": [call]}


def _choice_json(index: int, choice: Choice, request: ChatRequest) -> dict[str, Any]:
    out: dict[str, Any] = {"index": index, "message": _message(choice), "finish_reason": choice.finish_reason,
                           "logprobs": None}
    if request.logprobs:
        content = [_logprob_entry(t, lp, top[: request.top_logprobs])
                   for t, lp, top in zip(choice.token_ids, choice.logprobs, choice.top)]
        out["logprobs"] = {"content": content, "refusal": None}
    if request.return_token_ids:
        out["token_ids"] = list(choice.token_ids)
    return out


def completion_response(request: ChatRequest, prompt_ids: Sequence[int], choices: Sequence[Choice],
                        version: int) -> dict[str, Any]:
    """A ChatCompletion JSON object (with vLLM's token-id fields when asked)."""
    completion_tokens = sum(len(c.token_ids) for c in choices)
    out: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
        "model": request.model, "system_fingerprint": f"builtin-v{version}",
        "choices": [_choice_json(i, c, request) for i, c in enumerate(choices)],
        "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": completion_tokens,
                  "total_tokens": len(prompt_ids) + completion_tokens},
    }
    if request.return_token_ids:
        out["prompt_token_ids"] = list(prompt_ids)
    return out
