"""The agent loop: chat turns with one `bash` tool, executed in the sandbox.

Invariant: token-in/token-out. The sampled token ids and logprobs are kept exactly as the
server returned them (vLLM's `return_token_ids` fields), never re-tokenised; the trajectory is
stored once with a loss mask, as one segment while each prompt extends the previous prompt and
sample, and a new segment (its own datum) where the server's template re-rendered history
differently (`learn.segments`). Logprobs that do not match the ids are an `AgentError`.

A reply the loop cannot use (not JSON, no message, a tool call without a function, token ids
that are not integers) is an `AgentError` naming what was wrong, so the rollout is marked
agent_error rather than taken for a broken sandbox. A command the shell could never run (over
`MAX_COMMAND_BYTES`, or holding a NUL byte) is answered with an error, like broken tool-call
JSON, and the loop goes on. The final answer is stored cut to `FINAL_ANSWER_LIMIT` characters
(its tokens are kept whole). A command that ran into a sandbox limit says which in its result.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

from rl_daytona.backends.base import Backend, SandboxHandle
from rl_daytona.chat_client import ChatClient, ChatError
from rl_daytona.learn.segments import SegmentedTokens, SegmentError
from rl_daytona.types import Settings, Trajectory

SYSTEM_PROMPT = (
    "You are a coding agent working in /workspace. Use the bash tool to run one shell command "
    "at a time and read its output. When the task is done, reply without calling a tool."
)
BASH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command in /workspace and return its output and exit code.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The command to run."}},
            "required": ["command"],
        },
    },
}


MAX_COMMAND_BYTES = 64 * 1024  # a command is one argv string: Linux refuses one over 128 KiB
FINAL_ANSWER_LIMIT = 64 * 1024  # characters of the final answer kept in `Trajectory.messages`


class AgentError(RuntimeError):
    """The policy endpoint failed or replied with something the loop cannot use."""


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Turn:
    """One reply, checked: the assistant's text, its tool calls, and the vLLM token fields."""

    content: str | None
    tool_calls: tuple[ToolCall, ...]
    prompt_ids: list[int] | None
    completion_ids: list[int] | None
    logprobs: list[float]


@dataclass
class TokenTrajectory(SegmentedTokens):
    """Accumulates one attempt's tokens turn by turn (a prompt that does not extend the last starts a segment)."""

    available: bool = True

    def add_turn(self, prompt_ids: list[int] | None, completion_ids: list[int] | None,  # type: ignore[override]
                 logprobs: list[float]) -> bool:
        if prompt_ids is None or completion_ids is None:
            self.available = False  # an endpoint without token ids: fine for eval, not for training
            return False
        try:
            return super().add_turn(prompt_ids, completion_ids, logprobs)
        except SegmentError as exc:
            raise AgentError(f"server returned unusable token ids: {exc}") from None


def truncate_output(text: str, limit: int) -> str:
    """Keep the head and tail of long output, saying how much was cut."""
    if len(text) <= limit:
        return text
    head, tail = text[: limit // 2], text[-(limit // 2):]
    return f"{head}\n[... {len(text) - len(head) - len(tail)} characters cut ...]\n{tail}"


def _ids(value: Any, what: str) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise AgentError(f"policy endpoint sent malformed {what}: not a list of integers")
    return value


def _parse_turn(resp: dict[str, Any]) -> Turn:
    """The reply's parts, or an AgentError saying what is missing or of the wrong type."""
    try:
        choice = resp["choices"][0]
        message = _field(choice, "message")
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise TypeError(f"message content is a {type(content).__name__}")
        raw_calls = message.get("tool_calls") or []
        if not isinstance(raw_calls, list):
            raise TypeError(f"tool_calls is a {type(raw_calls).__name__}, not a list")
        calls = tuple(ToolCall(str(c.get("id")), str(_field(c, "function").get("name")),
                               _arguments(_field(c, "function").get("arguments"))) for c in raw_calls)
        lps = (choice.get("logprobs") or {}).get("content") or []
        logprobs = [float(c["logprob"]) for c in lps]
    except (AttributeError, TypeError, ValueError, IndexError, KeyError) as exc:
        raise AgentError(f"policy endpoint sent a malformed reply: {type(exc).__name__}: {str(exc)[:200]}") from None
    return Turn(content, calls, _ids(resp.get("prompt_token_ids"), "prompt_token_ids"),
                _ids(choice.get("token_ids"), "token_ids"), logprobs)


def _field(parent: dict[str, Any], key: str) -> dict[str, Any]:
    value = parent.get(key)
    if not isinstance(value, dict):
        raise TypeError(f"{key!r} is {'missing' if value is None else 'a ' + type(value).__name__}, not an object")
    return value


def _arguments(value: Any) -> str:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"tool-call arguments are a {type(value).__name__}, not a JSON string")
    return value or ""


def _command_of(call: ToolCall) -> tuple[str | None, str]:
    """(command, error): the bash command of a tool call, or why it cannot be run."""
    if call.name != "bash":
        return None, f"error: unknown tool {call.name[:100]!r}; the only tool is bash"
    try:
        args = json.loads(call.arguments)
    except json.JSONDecodeError as exc:
        return None, f"error: tool arguments are not valid JSON ({exc.msg}); send {{\"command\": \"...\"}}"
    command = args.get("command") if isinstance(args, dict) else None
    if not isinstance(command, str) or not command.strip():
        return None, "error: tool arguments need a non-empty string field 'command'"
    if "\0" in command:
        return None, "error: the command holds a NUL byte, which no shell command can"
    size = len(command.encode("utf-8", "surrogatepass"))
    if size > MAX_COMMAND_BYTES:
        return None, f"error: the command is {size} bytes; the limit is {MAX_COMMAND_BYTES} (write long text to a file in steps)"
    return command, ""


async def _complete(client: ChatClient, messages: list[dict[str, Any]], settings: Settings) -> dict[str, Any]:
    try:
        resp = await client.complete({
            "model": settings.model, "messages": messages, "tools": [BASH_TOOL],
            "temperature": settings.temperature, "max_tokens": settings.max_tokens,
            "logprobs": True, "return_token_ids": True})
    except ChatError as exc:
        raise AgentError(f"policy endpoint failed: {' '.join(str(exc).split())[:200]}") from exc
    if not isinstance(resp.get("choices"), list) or not resp["choices"]:
        raise AgentError("policy endpoint returned no choices")
    return resp


async def _run_tool(backend: Backend, sandbox: SandboxHandle, call: ToolCall, settings: Settings) -> str:
    command, error = _command_of(call)
    if command is None:
        return error
    result = await backend.exec(sandbox, command, timeout=settings.exec_timeout)
    note = " (timed out)" if result.timed_out else ""
    if result.limit_hit:
        note += f" (stopped by the sandbox's {result.limit_hit} limit)"
    return f"{truncate_output(result.output, settings.output_limit)}\n[exit code {result.exit_code}{note}]"


async def run_agent(client: ChatClient, backend: Backend, sandbox: SandboxHandle,
                    prompt: str, settings: Settings) -> Trajectory:
    """Run chat turns until the model answers without a tool call or the turn limit is hit."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": prompt}]
    tokens, finish, version, turns = TokenTrajectory(), "max_turns", 0, 0
    for turns in range(1, settings.max_turns + 1):
        resp = await _complete(client, messages, settings)
        turn = _parse_turn(resp)
        tokens.add_turn(turn.prompt_ids, turn.completion_ids, turn.logprobs)
        version = _policy_version(resp) if version == 0 else version
        if not turn.tool_calls:
            messages.append({"role": "assistant", "content": truncate_output(turn.content or "", FINAL_ANSWER_LIMIT)})
            finish = "stop"
            break
        messages.append(_assistant_message(turn.content, turn.tool_calls))
        for call in turn.tool_calls:
            output = await _run_tool(backend, sandbox, call, settings)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    return _trajectory(tokens, messages, turns, finish, version)


def _assistant_message(content: str | None, tool_calls: Sequence[ToolCall]) -> dict[str, Any]:
    calls = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
             for c in tool_calls]
    return {"role": "assistant", "content": content, "tool_calls": calls}


def _policy_version(resp: dict[str, Any]) -> int:
    fingerprint = str(resp.get("system_fingerprint") or "")
    tail = fingerprint.rsplit("-v", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _trajectory(tokens: TokenTrajectory, messages: list[dict[str, Any]], turns: int,
                finish: str, version: int) -> Trajectory:
    keep = tokens.available
    return Trajectory(
        token_ids=tuple(tokens.token_ids) if keep else (),
        logprobs=tuple(tokens.logprobs) if keep else (),
        loss_mask=tuple(tokens.loss_mask) if keep else (),
        segment_starts=tuple(tokens.segment_starts) if keep else (),
        messages=tuple(messages), turns=turns, finish_reason=finish, policy_version=version,
    )
