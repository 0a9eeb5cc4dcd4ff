"""A scripted OpenAI-compatible chat endpoint, for replies no real model gives on demand.

It speaks the real wire protocol (the `openai` client parses its answers) and replays a list
of canned choices: tool calls with broken JSON, empty content, huge answers, token ids that
break the prefix property, a message or a whole body sent verbatim. Each request's body is kept
for assertions.

`ScriptedLLM` replays one global list (one conversation at a time). `ScriptedAgents` gives
each conversation its own script, so many rollouts can run at once: the k-th conversation to
open plays `scripts[k % len(scripts)]`, one reply per turn, then answers "done"; its tool-call
ids name the script (`call_s<k>_t<turn>`), which is how a later turn finds its conversation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.threaded_chat import ThreadedChatServer


@dataclass
class Reply:
    command: str | None = None          # a bash tool call with this command
    raw_arguments: str | None = None    # tool-call arguments sent verbatim (e.g. broken JSON)
    content: str | None = None          # a plain answer (ends the loop)
    token_ids: list[int] | None = field(default=None)
    prompt_token_ids: list[int] | None = None
    status: int = 200
    message: dict[str, Any] | None = None  # the assistant message sent verbatim (malformed ones)
    raw_body: str | None = None  # the whole HTTP 200 body sent verbatim (not even JSON, maybe)


def _choice(reply: Reply, index: int, call_id: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.command is not None or reply.raw_arguments is not None:
        args = reply.raw_arguments if reply.raw_arguments is not None else json.dumps({"command": reply.command})
        message["tool_calls"] = [{"id": call_id or f"call_{index}", "type": "function",
                                  "function": {"name": "bash", "arguments": args}}]
    if reply.message is not None:
        message = reply.message
    ids = reply.token_ids if reply.token_ids is not None else [1000 + index]
    return {"index": 0, "message": message, "finish_reason": "tool_calls" if "tool_calls" in message else "stop",
            "logprobs": {"content": [{"token": str(t), "logprob": -0.5, "bytes": [], "top_logprobs": []} for t in ids]},
            "token_ids": ids}


class ScriptedLLM(ThreadedChatServer):
    """Serves `replies` in order on a background thread; `url` is the /v1 base URL."""

    def __init__(self, replies: list[Reply]) -> None:
        self.replies, self.requests = list(replies), []  # type: ignore[var-annotated]
        self.models = ("builtin", "scripted")  # GET /v1/models (the CLI's default --model is "builtin")
        self._prompt: list[int] = []
        super().__init__()

    async def _complete(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        index = len(self.requests) - 1
        reply = self.replies[min(index, len(self.replies) - 1)]
        if reply.status != 200:
            return web.json_response({"error": {"message": "scripted failure"}}, status=reply.status)
        if reply.raw_body is not None:
            return web.Response(text=reply.raw_body, content_type="application/json")
        choice = _choice(reply, index)
        prompt = reply.prompt_token_ids if reply.prompt_token_ids is not None else self._prompt + [7, 7]
        self._prompt = prompt + (choice["token_ids"] if isinstance(choice["token_ids"], list) else [])
        return web.json_response({"id": f"cmpl-{index}", "object": "chat.completion", "created": 0,
                                  "model": body.get("model", "scripted"), "choices": [choice],
                                  "prompt_token_ids": prompt, "system_fingerprint": "scripted-v3"})


class ScriptedAgents(ScriptedLLM):
    """One script (a list of replies, one per turn) per conversation; see the module docstring.

    `authorizations` keeps each request's Authorization header (what API key reached us)."""

    def __init__(self, scripts: list[list[Reply]]) -> None:
        super().__init__([Reply(content="done")])
        self.scripts = scripts
        self.opened = 0  # conversations seen
        self.authorizations: list[str] = []

    def _script_of(self, messages: list[dict[str, Any]]) -> tuple[int, int]:
        """(script index, turn) of a request, opening a conversation on its first turn."""
        assistants = [m for m in messages if m.get("role") == "assistant"]
        if not assistants:
            self.opened += 1
            return (self.opened - 1) % len(self.scripts), 0
        call_id = str(((assistants[0].get("tool_calls") or [{}])[0]).get("id", ""))
        return int(call_id.split("_")[1][1:]), len(assistants)

    def _reply(self, script: int, turn: int) -> Reply:
        replies = self.scripts[script]
        return replies[turn] if turn < len(replies) else Reply(content="done")

    async def _complete(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        self.authorizations.append(request.headers.get("Authorization", ""))
        script, turn = self._script_of(body.get("messages", []))
        reply = self._reply(script, turn)
        if reply.raw_body is not None:
            return web.Response(text=reply.raw_body, content_type="application/json")
        prompt: list[int] = []
        for earlier in range(turn):  # every earlier turn's prompt piece and completion, then two fresh tokens
            earlier_ids = self._reply(script, earlier).token_ids or [1000 + earlier]
            prompt += [7, 7, *earlier_ids]
        choice = _choice(reply, turn, call_id=f"call_s{script}_t{turn}")
        return web.json_response({"id": f"cmpl-{len(self.requests)}", "object": "chat.completion", "created": 0,
                                  "model": body.get("model", "scripted"), "choices": [choice],
                                  "prompt_token_ids": prompt + [7, 7], "system_fingerprint": "scripted-v0"})
