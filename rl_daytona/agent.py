"""The agent loop: chat turns with one `bash` tool, executed in the sandbox.

Invariant: token-in/token-out. The sampled token ids and logprobs are kept exactly as the
server returned them (vLLM's `return_token_ids` fields); the trajectory is stored once as the
full token sequence of the last turn with a loss mask, never re-tokenised and never repeated
per turn. A server that breaks the prefix property is an `AgentError`, not a silent re-encode.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import openai

from rl_daytona.backends.base import Backend, SandboxHandle
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


class AgentError(RuntimeError):
    """The policy endpoint failed or replied with something the loop cannot use."""


@dataclass
class TokenTrajectory:
    """Accumulates one attempt's tokens turn by turn, checking the prefix property."""

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    available: bool = True

    def add_turn(self, prompt_ids: list[int] | None, completion_ids: list[int] | None,
                 logprobs: list[float]) -> None:
        if prompt_ids is None or completion_ids is None:
            self.available = False  # an endpoint without token ids: fine for eval, not for training
            return
        if len(logprobs) != len(completion_ids):
            raise AgentError(f"server returned {len(completion_ids)} token ids but {len(logprobs)} logprobs")
        if prompt_ids[: len(self.token_ids)] != self.token_ids:
            raise AgentError("server broke the token prefix property between turns; refusing to re-tokenise")
        fresh = prompt_ids[len(self.token_ids):]
        self._extend(fresh, [0.0] * len(fresh), 0)
        self._extend(completion_ids, logprobs, 1)

    def _extend(self, ids: list[int], lps: list[float], mask: int) -> None:
        self.token_ids.extend(int(i) for i in ids)
        self.logprobs.extend(float(x) for x in lps)
        self.loss_mask.extend([mask] * len(ids))


def truncate_output(text: str, limit: int) -> str:
    """Keep the head and tail of long output, saying how much was cut."""
    if len(text) <= limit:
        return text
    head, tail = text[: limit // 2], text[-(limit // 2):]
    return f"{head}\n[... {len(text) - len(head) - len(tail)} characters cut ...]\n{tail}"


def _token_fields(resp: Any) -> tuple[list[int] | None, list[int] | None, list[float]]:
    choice = resp.choices[0]
    prompt_ids = (resp.model_extra or {}).get("prompt_token_ids")
    completion_ids = (choice.model_extra or {}).get("token_ids")
    content = choice.logprobs.content if choice.logprobs and choice.logprobs.content else []
    return prompt_ids, completion_ids, [float(c.logprob) for c in content]


def _command_of(call: Any) -> tuple[str | None, str]:
    """(command, error): the bash command of a tool call, or why it cannot be run."""
    if call.function.name != "bash":
        return None, f"error: unknown tool {call.function.name!r}; the only tool is bash"
    try:
        args = json.loads(call.function.arguments or "")
    except json.JSONDecodeError as exc:
        return None, f"error: tool arguments are not valid JSON ({exc.msg}); send {{\"command\": \"...\"}}"
    command = args.get("command") if isinstance(args, dict) else None
    if not isinstance(command, str) or not command.strip():
        return None, "error: tool arguments need a non-empty string field 'command'"
    return command, ""


async def _complete(client: openai.AsyncOpenAI, messages: list[dict[str, Any]], settings: Settings) -> Any:
    try:
        resp = await client.chat.completions.create(
            model=settings.model, messages=messages, tools=[BASH_TOOL],
            temperature=settings.temperature, max_tokens=settings.max_tokens,
            logprobs=True, extra_body={"return_token_ids": True},
        )
    except openai.OpenAIError as exc:
        raise AgentError(f"policy endpoint failed: {type(exc).__name__}: {str(exc)[:200]}") from exc
    if not getattr(resp, "choices", None):
        raise AgentError("policy endpoint returned no choices")
    return resp


async def _run_tool(backend: Backend, sandbox: SandboxHandle, call: Any, settings: Settings) -> str:
    command, error = _command_of(call)
    if command is None:
        return error
    result = await backend.exec(sandbox, command, timeout=settings.exec_timeout)
    note = " (timed out)" if result.timed_out else ""
    return f"{truncate_output(result.output, settings.output_limit)}\n[exit code {result.exit_code}{note}]"


async def run_agent(client: openai.AsyncOpenAI, backend: Backend, sandbox: SandboxHandle,
                    prompt: str, settings: Settings) -> Trajectory:
    """Run chat turns until the model answers without a tool call or the turn limit is hit."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": prompt}]
    tokens, finish, version, turns = TokenTrajectory(), "max_turns", 0, 0
    for turns in range(1, settings.max_turns + 1):
        resp = await _complete(client, messages, settings)
        tokens.add_turn(*_token_fields(resp))
        version = _policy_version(resp) if version == 0 else version
        message = resp.choices[0].message
        if not message.tool_calls:
            messages.append({"role": "assistant", "content": message.content or ""})
            finish = "stop"
            break
        messages.append(_assistant_message(message))
        for call in message.tool_calls:
            output = await _run_tool(backend, sandbox, call, settings)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    return _trajectory(tokens, messages, turns, finish, version)


def _assistant_message(message: Any) -> dict[str, Any]:
    calls = [{"id": c.id, "type": "function",
              "function": {"name": c.function.name, "arguments": c.function.arguments}}
             for c in message.tool_calls]
    return {"role": "assistant", "content": message.content, "tool_calls": calls}


def _policy_version(resp: Any) -> int:
    fingerprint = getattr(resp, "system_fingerprint", None) or ""
    tail = fingerprint.rsplit("-v", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _trajectory(tokens: TokenTrajectory, messages: list[dict[str, Any]], turns: int,
                finish: str, version: int) -> Trajectory:
    keep = tokens.available
    return Trajectory(
        token_ids=tuple(tokens.token_ids) if keep else (),
        logprobs=tuple(tokens.logprobs) if keep else (),
        loss_mask=tuple(tokens.loss_mask) if keep else (),
        messages=tuple(messages), turns=turns, finish_reason=finish, policy_version=version,
    )
