"""A vLLM-shaped OpenAI-compatible server: a renderer's real prompt ids and scripted replies.

`GET /v1/models` lists `models`; `POST /v1/chat/completions` renders the request's messages with
`renderer` (the prompt ids vLLM would compute), answers with the next scripted assistant message
as the ids a model following the template samples (logprobs -1/7, -2/7, ...), and, like vLLM
asked with `return_token_ids`, returns `prompt_token_ids`, `choices[0].token_ids` and
`logprobs.content[].logprob`; with `token_ids=False` it returns none of them (OpenAI's own API).
`served` keeps (prompt ids, sampled ids, logprobs) per completion.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from aiohttp import web

from rl_daytona.policy.protocol import completion_response, parse_request


class VLLMLike:
    def __init__(self, renderer: Any, replies: list[dict[str, Any]], models: tuple[str, ...] = ("m",),
                 token_ids: bool = True) -> None:
        self.renderer, self.replies, self.models, self.token_ids = renderer, replies, models, token_ids
        self.served: list[tuple[list[int], list[int], list[float]]] = []
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self.url = ""

    def __enter__(self) -> "VLLMLike":
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": m, "object": "model", "owned_by": "vllm"}
                                                            for m in self.models]})

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

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._complete)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1"  # type: ignore[union-attr]
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()
