"""The built-in policy served as an OpenAI-compatible endpoint (aiohttp).

    python -m rl_daytona.policy.server --host 127.0.0.1 --port 0 [--state PATH] [--seed N]

prints exactly one line `LISTENING http://<host>:<port>/v1` on stdout once bound, then
serves `POST /v1/chat/completions`, `GET /v1/models` and `GET /health`: the built-in policy
for `eval` (training goes through the tinker SDK to the local Tinker-compatible service,
`rl_daytona.tinker_sim`, which trains the same model).

Invariant: a request never takes the server down. Malformed JSON, missing messages or an
unknown role is an HTTP 400 with an OpenAI-style error body; anything unexpected is a 500
with the same shape. Sampling runs inline on the event loop (a request costs a few ms of
CPU), so responses come back in arrival order.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from pathlib import Path

from aiohttp import web

from rl_daytona.policy.chat import ChatFormatError
from rl_daytona.policy.model import PolicyModel
from rl_daytona.policy.protocol import RequestError, completion_response, error_body, parse_request
from rl_daytona.policy.service import PolicyService
from rl_daytona.serving.launch import until_stopped

MODEL_ID = "builtin"
SERVICE_KEY = web.AppKey("service", PolicyService)
log = logging.getLogger(__name__)


async def chat_completions(request: web.Request) -> web.Response:
    service = request.app[SERVICE_KEY]
    try:
        chat = parse_request(await request.read())
        done = service.complete(chat)
    except (RequestError, ChatFormatError) as exc:
        return web.json_response(error_body(str(exc), getattr(exc, "param", None)), status=400)
    except Exception as exc:  # noqa: BLE001 - the endpoint must answer, not die
        log.exception("chat completion failed")
        return web.json_response(error_body(f"internal error: {type(exc).__name__}: {exc}", kind="server_error"),
                                 status=500)
    return web.json_response(completion_response(chat, done.prompt_ids, done.choices, done.version))


async def models(request: web.Request) -> web.Response:
    data = [{"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "rl_daytona"}]
    return web.json_response({"object": "list", "data": data})


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok", "version": request.app[SERVICE_KEY].model.version})


async def _json_404(request: web.Request, handler):  # type: ignore[no-untyped-def]
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status >= 400:
            return web.json_response(error_body(exc.reason, kind="invalid_request_error"), status=exc.status)
        raise


def build_app(service: PolicyService) -> web.Application:
    """The aiohttp application serving `service`."""
    app = web.Application(middlewares=[web.middleware(_json_404)], client_max_size=64 * 1024 * 1024)
    app[SERVICE_KEY] = service
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    return app


async def serve(service: PolicyService, host: str, port: int, stop_on_stdin_eof: bool = False) -> None:
    runner = web.AppRunner(build_app(service), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024)
    await site.start()
    bound = runner.addresses[0][1]
    print(f"LISTENING http://{host}:{bound}/v1", flush=True)
    try:
        await until_stopped(stop_on_stdin_eof)
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve the built-in policy as an OpenAI-compatible endpoint.")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind; 0 picks a free one")
    parser.add_argument("--state", type=Path, default=None, help="saved policy state (npz+json) to serve")
    parser.add_argument("--seed", type=int, default=None, help="seed for requests that carry none")
    parser.add_argument("--stop-on-stdin-eof", action="store_true",
                        help="exit when stdin closes (used by start_builtin_server so the child dies with its parent)")
    args = parser.parse_args(argv)
    model = PolicyModel.load(args.state) if args.state else PolicyModel()
    asyncio.run(serve(PolicyService(model, seed=args.seed), args.host, args.port, args.stop_on_stdin_eof))


if __name__ == "__main__":
    main()
