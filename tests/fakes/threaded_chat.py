"""A fake OpenAI-compatible chat server on a background thread: the lifecycle the scripted fakes share.

Subclasses define `_complete` (POST /v1/chat/completions) and set `models` (GET /v1/models, what
the CLI's endpoint preflight asks first). `with Fake(...) as server:` serves on a free port of
127.0.0.1 until the block ends; `server.url` is the /v1 base URL.
"""

from __future__ import annotations

import asyncio
import threading

from aiohttp import web


class ThreadedChatServer:
    models: tuple[str, ...] = ()
    max_body_bytes = 256 * 1024 * 1024  # histories echoing huge replies

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self.url = ""

    def __enter__(self):  # type: ignore[no-untyped-def]
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    async def _complete(self, request: web.Request) -> web.Response:
        raise NotImplementedError

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": m, "object": "model", "owned_by": "fake"}
                                                            for m in self.models]})

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        app = web.Application(client_max_size=self.max_body_bytes)
        app.router.add_post("/v1/chat/completions", self._complete)
        app.router.add_get("/v1/models", self._models)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1"  # type: ignore[union-attr]
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()
