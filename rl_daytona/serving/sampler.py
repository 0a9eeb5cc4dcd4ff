"""A Tinker `SamplingClient` as the agents' policy, behind the same OpenAI-compatible endpoint.

    with serve_sampler(TinkerSamplingService(sampling_client, renderer)) as server:
        ...  # Settings(policy_url=server.url): the agent loop is unchanged

The agent loop speaks chat completions with vLLM's token-id fields; Tinker samples token ids
from a `ModelInput`. A `Renderer` is the bridge for one model's chat template: messages ->
prompt ids, sampled ids -> an assistant message (a `bash` tool call or text). The sampled ids
and logprobs are passed through exactly as Tinker returned them (token-in/token-out).

`POST /v1/sampler {"model_path": "tinker://...", "version": N}` swaps the sampling client
(the train loop calls it, `use_weights`, after each `optim_step`, with the path the training
client saved for the sampler), so every later completion reports the new policy version.

Invariant: the endpoint answers every request. A Tinker call that fails is an HTTP 502 with
a one-line OpenAI-style error body; a malformed request is a 400; the server stays up.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import threading
from typing import Any, Callable, Mapping, Protocol, Sequence

from aiohttp import web

from rl_daytona.serving.openai_chat import (ChatFormatError, ChatRequest, Choice, Completed, RequestError, TokenText,
                                            completion_response, error_body, parse_request)

log = logging.getLogger(__name__)


class SamplerError(RuntimeError):
    """A Tinker sampling call failed (HTTP 502 at the endpoint)."""


class Renderer(Protocol):
    """One model's chat template on both sides of a Tinker `sample` call."""

    stop: Sequence[int] | Sequence[str] | None

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]]) -> list[int]: ...

    def choice(self, tokens: Sequence[int], logprobs: Sequence[float], stop_reason: str) -> Choice: ...

    # optional: `token_text(id) -> (text, bytes) | None` names the model's tokens in the logprobs


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


async def _resolve(value: Any) -> Any:
    """An SDK result: an awaitable (the SDK's APIFuture is one), a future with `.result()`, or a value."""
    if inspect.isawaitable(value):
        return await value
    if hasattr(value, "result"):
        return await asyncio.to_thread(value.result)
    return value


class TinkerSamplingService:
    """Chat requests answered by `sampling_client.sample(...)` (the SDK's SamplingClient or
    anything with its signature); `make_sampling_client(model_path)` builds the client for a
    swap by path (normally `ServiceClient.create_sampling_client`)."""

    def __init__(self, sampling_client: Any, renderer: Renderer, version: int = 0,
                 make_sampling_client: Callable[[str], Any] | None = None) -> None:
        self.sampling_client = sampling_client
        self.renderer = renderer
        self.version = version
        self.model_path = ""
        self._make = make_sampling_client

    def use(self, sampling_client: Any, version: int, model_path: str = "") -> None:
        """Serve `sampling_client` from now on; requests already in flight keep the old one."""
        self.sampling_client, self.version, self.model_path = sampling_client, version, model_path

    async def use_path(self, model_path: str, version: int) -> None:
        if self._make is None:
            raise SamplerError("this sampler was started without a way to open sampler weights by path")
        try:
            client = await _resolve(self._make(model_path))
        except Exception as exc:  # noqa: BLE001 - any SDK failure is one line
            raise SamplerError(f"tinker create_sampling_client({model_path!r}) failed: {_one_line(exc)}") from None
        self.use(client, version, model_path)

    async def complete(self, request: ChatRequest) -> Completed:
        from tinker import types

        client, version = self.sampling_client, self.version  # a swap mid-request stamps the older one
        prompt = self.renderer.prompt_ids(request.messages)
        params = types.SamplingParams(max_tokens=request.max_tokens, temperature=request.temperature,
                                      seed=request.seed, stop=self.renderer.stop)
        try:
            response = await _resolve(client.sample(prompt=types.ModelInput.from_ints(prompt),
                                                    num_samples=request.n, sampling_params=params))
        except Exception as exc:  # noqa: BLE001
            raise SamplerError(f"tinker sample failed: {_one_line(exc)}") from None
        sequences = list(getattr(response, "sequences", None) or [])
        if len(sequences) != request.n:
            raise SamplerError(f"tinker returned {len(sequences)} sequences for num_samples={request.n}")
        choices = []
        for seq in sequences:
            if seq.logprobs is None:
                raise SamplerError("tinker returned a sequence without logprobs")
            choices.append(self.renderer.choice(seq.tokens, seq.logprobs, seq.stop_reason))
        return Completed(tuple(prompt), tuple(choices), version)


SAMPLER_KEY = web.AppKey("sampler", TinkerSamplingService)


async def _chat(request: web.Request) -> web.Response:
    service = request.app[SAMPLER_KEY]
    try:
        chat = parse_request(await request.read())
        done = await service.complete(chat)
    except (RequestError, ChatFormatError) as exc:
        return web.json_response(error_body(str(exc), getattr(exc, "param", None)), status=400)
    except SamplerError as exc:
        return web.json_response(error_body(str(exc), kind="upstream_error"), status=502)
    except Exception as exc:  # noqa: BLE001 - the endpoint must answer, not die
        log.exception("tinker chat completion failed")
        return web.json_response(error_body(f"internal error: {_one_line(exc)}", kind="server_error"), status=500)
    token_text: TokenText | None = getattr(service.renderer, "token_text", None)
    return web.json_response(completion_response(chat, done.prompt_ids, done.choices, done.version, token_text))


async def _swap(request: web.Request) -> web.Response:
    service = request.app[SAMPLER_KEY]
    try:
        body = json.loads(await request.read())
        path, version = body.get("model_path"), body.get("version")
        if not isinstance(path, str) or not path or isinstance(version, bool) or not isinstance(version, int):
            raise RequestError("POST /v1/sampler needs {'model_path': str, 'version': int}")
        await service.use_path(path, version)
    except (ValueError, AttributeError) as exc:
        return web.json_response(error_body(f"bad sampler swap: {exc}"), status=400)
    except SamplerError as exc:
        return web.json_response(error_body(str(exc), kind="upstream_error"), status=502)
    return web.json_response({"version": service.version, "model_path": service.model_path})


async def _health(request: web.Request) -> web.Response:
    service = request.app[SAMPLER_KEY]
    return web.json_response({"status": "ok", "version": service.version, "model_path": service.model_path})


async def _models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": "tinker", "object": "model", "created": 0,
                                                          "owned_by": "tinker"}]})


def build_sampler_app(service: TinkerSamplingService) -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[SAMPLER_KEY] = service
    app.router.add_post("/v1/chat/completions", _chat)
    app.router.add_post("/v1/sampler", _swap)
    app.router.add_get("/v1/models", _models)
    app.router.add_get("/health", _health)
    return app


class SamplerServer:
    """The endpoint on its own event loop in a daemon thread; `.url` ends in `/v1`."""

    def __init__(self, service: TinkerSamplingService, host: str = "127.0.0.1", port: int = 0,
                 timeout: float = 30.0) -> None:
        self.service = service
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stopped = asyncio.Event()
        self._error: BaseException | None = None
        self.url = ""
        self._thread = threading.Thread(target=self._run, args=(host, port), name="tinker-sampler", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout) or self._error is not None:
            self.close()
            raise SamplerError(f"tinker sampler endpoint did not start: {self._error!r}")

    def _run(self, host: str, port: int) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve(host, port))
        self._loop.close()

    async def _serve(self, host: str, port: int) -> None:
        runner = web.AppRunner(build_sampler_app(self.service), access_log=None)
        try:
            await runner.setup()
            site = web.TCPSite(runner, host, port, backlog=1024)
            await site.start()
            self.url = f"http://{host}:{runner.addresses[0][1]}/v1"
        except BaseException as exc:  # noqa: BLE001 - reported to the constructor
            self._error = exc
            self._ready.set()
            await runner.cleanup()
            return
        self._ready.set()
        try:
            await self._stopped.wait()
        finally:
            await runner.cleanup()

    def close(self) -> None:
        if self._thread.is_alive() and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stopped.set)
            self._thread.join(10)

    def __enter__(self) -> "SamplerServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_sampler(service: TinkerSamplingService, host: str = "127.0.0.1", port: int = 0) -> SamplerServer:
    return SamplerServer(service, host, port)


async def use_weights(url: str, model_path: str, version: int) -> str:
    """(Client side) point the sampling endpoint at `url` to the weights a step saved; "" when it
    took them, else why not (the run stops: later rollouts would sample the old policy)."""
    import aiohttp

    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
            async with session.post(f"{url}/sampler", json={"model_path": model_path, "version": version}) as resp:
                if resp.status == 200:
                    return ""
                try:
                    reason = (await resp.json())["error"]["message"]
                except Exception:  # noqa: BLE001 - any non-JSON answer
                    reason = f"HTTP {resp.status}"
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        reason = f"{type(exc).__name__}: {exc}"
    return f"the sampler did not take the new weights {model_path}: {reason}"
