"""A vLLM-shaped OpenAI-compatible server: a renderer's real prompt ids and scripted replies.

`GET /v1/models` lists `models`; `POST /v1/chat/completions` renders the request's messages with
`renderer` (the prompt ids vLLM would compute), answers with the next scripted assistant message
as the ids a model following the template samples (logprobs -1/7, -2/7, ...), and, like vLLM
asked with `return_token_ids`, returns `prompt_token_ids`, `choices[0].token_ids` and
`logprobs.content[].logprob`; with `token_ids=False` it returns none of them (OpenAI's own API).
`served` keeps (prompt ids, sampled ids, logprobs) per completion.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from rl_daytona.policy.protocol import completion_response, parse_request
from tests.fakes.threaded_chat import ThreadedChatServer


class VLLMLike(ThreadedChatServer):
    def __init__(self, renderer: Any, replies: list[dict[str, Any]], models: tuple[str, ...] = ("m",),
                 token_ids: bool = True) -> None:
        self.renderer, self.replies, self.models, self.token_ids = renderer, replies, models, token_ids
        self.served: list[tuple[list[int], list[int], list[float]]] = []
        super().__init__()

    async def _complete(self, request: web.Request) -> web.Response:
        raw = await request.read()
        chat = parse_request(raw)
        turn = sum(1 for m in chat.messages if m.get("role") == "assistant")
        prompt = self.renderer.prompt_ids(chat.messages)
        ids = self.renderer.completion_ids(self.replies[min(turn, len(self.replies) - 1)])
        logprobs = [-(i + 1) / 7 for i in range(len(ids))]
        self.served.append((prompt, ids, logprobs))
        body = completion_response(chat, prompt, [self.renderer.choice(ids, logprobs, "stop")], 0)
        if not self.token_ids:
            body.pop("prompt_token_ids", None)
            for choice in body["choices"]:
                choice.pop("token_ids", None)
                choice["logprobs"] = None
        return web.Response(text=json.dumps(body), content_type="application/json")
