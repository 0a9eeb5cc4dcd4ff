"""A fault-injecting HTTP proxy in front of the built-in model service's training routes.

It forwards `POST /v1/train/<route>` to the real service and, as its `plan` says for each
call, answers as an overloaded or broken gateway would instead:

    ok            forward, answer with the service's answer
    503           answer 503 without forwarding (the service never saw the call)
    503_after     forward, then answer 503 (the service did the work; the answer is lost)
    hang_before   hold the call past the client's timeout without forwarding
    hang_after    forward, then hold the answer past the client's timeout

Every call's route and fault kind is recorded in `calls`, so a test can compare what the
client saw with what the service applied (`GET /v1/train/info`).
"""

from __future__ import annotations

import asyncio
import random
import threading
from typing import Callable

import aiohttp
from aiohttp import web

FAULTS = ("503", "503_after", "hang_before", "hang_after")
Plan = Callable[[str, int], str]  # (route, index of the call) -> "ok" or a fault kind


def random_faults(rate: float, seed: int, kinds: tuple[str, ...] = FAULTS) -> Plan:
    """Each call fails with probability `rate`, its kind drawn evenly from `kinds` (seeded)."""
    rng = random.Random(seed)

    def plan(route: str, index: int) -> str:
        return rng.choice(kinds) if rng.random() < rate else "ok"
    return plan


class FaultProxy:
    """Serves on a background thread; `url` is the /v1 base URL to give a training client."""

    def __init__(self, upstream: str, plan: Plan, hang_seconds: float = 3.0) -> None:
        self.upstream, self.plan, self.hang_seconds = upstream.rstrip("/"), plan, hang_seconds
        self.calls: list[tuple[str, str]] = []
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self.url = ""

    def __enter__(self) -> "FaultProxy":
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fault proxy did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(self.hang_seconds + 10)

    def count(self, kind: str, route: str | None = None) -> int:
        return sum(1 for r, k in self.calls if k == kind and route in (None, r))

    async def _forward(self, route: str, body: bytes) -> tuple[int, bytes]:
        async with self._session.post(f"{self.upstream}/train/{route}", data=body,
                                      headers={"Content-Type": "application/json"}) as resp:
            return resp.status, await resp.read()

    async def _handle(self, request: web.Request) -> web.Response:
        route = request.match_info["route"]
        body = await request.read()
        kind = self.plan(route, len(self.calls))
        self.calls.append((route, kind))
        if kind == "503":
            return web.Response(status=503, text="Service Unavailable")
        if kind == "hang_before":
            await asyncio.sleep(self.hang_seconds)
            return web.Response(status=504, text="Gateway Timeout")
        status, answer = await self._forward(route, body)
        if kind == "503_after":
            return web.Response(status=503, text="Service Unavailable")
        if kind == "hang_after":
            await asyncio.sleep(self.hang_seconds)
            return web.Response(status=504, text="Gateway Timeout")
        return web.Response(body=answer, status=status, content_type="application/json")

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120))
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/train/{route}", self._handle)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()
        await self._session.close()
