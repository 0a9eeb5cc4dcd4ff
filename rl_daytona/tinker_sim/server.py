"""The tinker-sim aiohttp application, in a thread (tests, embedded runs) or as a process.

    with run_sim_in_thread(SimConfig(state_dir=tmp)) as sim:
        tinker.ServiceClient(base_url=sim.url, api_key=SIM_API_KEY)  # the SDK, unchanged

    python -m rl_daytona.tinker_sim.server --port 0 --state-dir D [--log L]   (prints LISTENING <url>)

Invariant: every request is answered and (with a log) logged as one JSON line
`{"method", "path", "status", "ms"}` — never a header, so no key reaches the log. A request
without an `X-API-Key` (or, with `api_key` set, with another one) is 401; an injected fault
answers before the call is applied (429 with Retry-After, 500, a failed future) or after it
(a lost reply: 500).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from aiohttp import web

from rl_daytona.policy.training import TrainingError
from rl_daytona.serving.launch import until_stopped
from rl_daytona.tinker_run import SIM_API_KEY  # noqa: F401 - the key the core uses for its local service
from rl_daytona.tinker_sim import routes as R
from rl_daytona.tinker_sim import sampling as S
from rl_daytona.tinker_sim.faults import Faults
from rl_daytona.tinker_sim.state import NotFound, SimState

log = logging.getLogger(__name__)
LOG_FILE = web.AppKey("log_file", object)
API_KEY = web.AppKey("api_key", str)


@dataclass
class SimConfig:
    state_dir: Path
    api_key: str | None = None  # None: any `tml-` key
    log_path: Path | None = None
    faults: Faults = field(default_factory=Faults)


def _detail(message: str, status: int, retry_after: float | None = None) -> web.Response:
    headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else None
    return web.json_response({"detail": message}, status=status, headers=headers)


async def _handle(request: web.Request, handler: R.Handler) -> web.StreamResponse:
    key, want = request.headers.get("X-API-Key", ""), request.app[API_KEY]
    if request.path != "/api/v1/healthz" and (not key.startswith("tml-") or (want and key != want)):
        return _detail("missing or wrong X-API-Key", 401)
    faults, route = request.app[R.FAULTS], R._route(request)
    if faults.take("rate_limit", route):
        return web.json_response({"detail": "rate limited (injected)"}, status=429,
                                 headers={"Retry-After": f"{faults.retry_after:g}"})
    if faults.take("server_error", route):
        return _detail("internal error (injected)", 500, faults.retry_after)
    try:
        response = await handler(request)
    except TrainingError as exc:
        return _detail(str(exc), 400)
    except NotFound as exc:
        return _detail(str(exc), 404)
    except web.HTTPException as exc:
        return _detail(exc.reason, exc.status)
    except Exception as exc:  # noqa: BLE001 - the sim answers, it does not die
        log.exception("tinker-sim: %s failed", request.path)
        return _detail(f"internal error: {type(exc).__name__}: {exc}", 500)
    if not request.get(R.NOT_APPLIED) and faults.take("lost_reply", route):  # applied, but the client never hears so
        return _detail("reply lost (injected, the call WAS applied)", 500, faults.retry_after)
    return response


@web.middleware
async def _logged(request: web.Request, handler: R.Handler) -> web.StreamResponse:
    started = time.monotonic()
    response = await _handle(request, handler)
    out = request.app[LOG_FILE]
    if out is not None:
        line = {"method": request.method, "path": request.path, "status": response.status,
                "ms": round((time.monotonic() - started) * 1000, 2)}
        out.write(json.dumps(line) + "\n")  # type: ignore[attr-defined]
        out.flush()  # type: ignore[attr-defined]
    return response


def build_app(config: SimConfig, log_file: IO[str] | None = None) -> web.Application:
    app = web.Application(middlewares=[_logged], client_max_size=256 * 1024 * 1024)
    app[R.STATE], app[R.FAULTS], app[LOG_FILE] = SimState(config.state_dir), config.faults, log_file
    app[API_KEY] = config.api_key or ""
    api = "/api/v1"
    app.router.add_get(f"{api}/healthz", R.healthz)
    app.router.add_get(f"{api}/get_server_capabilities", R.capabilities)
    for route, handler in {"client/config": R.client_config, "client/dynamic_config": R.dynamic_config,
                           "create_session": R.create_session, "session_heartbeat": R.heartbeat,
                           "sessions/{session_id}/finish": R.finish, "telemetry": R.telemetry,
                           "create_model": R.create_model, "get_info": R.get_info,
                           "forward_backward": R.forward_backward, "optim_step": R.optim_step,
                           "save_weights": R.save_weights, "save_weights_for_sampler": R.save_for_sampler,
                           "load_weights": R.load_weights, "create_sampling_session": S.create_sampling_session,
                           "asample": S.asample, "retrieve_future": S.retrieve_future}.items():
        app.router.add_post(f"{api}/{route}", handler)
    app.router.add_get(f"{api}/samplers/{{sampler_id}}", S.get_sampler)
    return app


class RunningSim:
    """The sim on its own event loop in a daemon thread; `.url` is the SDK's base_url."""

    def __init__(self, config: SimConfig, host: str = "127.0.0.1", port: int = 0) -> None:
        self.config, self.url = config, ""
        self._loop = asyncio.new_event_loop()
        self._ready, self._stop = threading.Event(), asyncio.Event()
        self._error: BaseException | None = None
        self.app: web.Application | None = None
        self._thread = threading.Thread(target=self._run, args=(host, port), name="tinker-sim", daemon=True)
        self._thread.start()
        if not self._ready.wait(30) or self._error is not None:
            raise RuntimeError(f"tinker-sim did not start: {self._error!r}")

    @property
    def state(self) -> SimState:
        assert self.app is not None
        return self.app[R.STATE]

    def _run(self, host: str, port: int) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve(host, port))
        self._loop.close()

    async def _serve(self, host: str, port: int) -> None:
        log_file = self.config.log_path.open("a", encoding="utf-8") if self.config.log_path else None
        try:
            self.app = build_app(self.config, log_file)
            runner = web.AppRunner(self.app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, host, port).start()
            self.url = f"http://{host}:{runner.addresses[0][1]}"
        except BaseException as exc:  # noqa: BLE001 - reported to the constructor
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()
            if log_file is not None:
                log_file.close()

    def close(self) -> None:
        if self._thread.is_alive() and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(10)

    def __enter__(self) -> "RunningSim":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_sim_in_thread(config: SimConfig, host: str = "127.0.0.1", port: int = 0) -> RunningSim:
    return RunningSim(config, host, port)


async def serve(config: SimConfig, host: str, port: int, on_ready: Any, stop_on_stdin_eof: bool = False) -> None:
    """Serve until SIGINT/SIGTERM (or stdin closing); `on_ready(url)` once bound."""
    log_file = config.log_path.open("a", encoding="utf-8") if config.log_path else None
    runner = web.AppRunner(build_app(config, log_file), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, backlog=1024).start()
    on_ready(f"http://{host}:{runner.addresses[0][1]}")
    try:
        await until_stopped(stop_on_stdin_eof)
    finally:
        await runner.cleanup()
        if log_file is not None:
            log_file.close()


def main(argv: list[str] | None = None) -> None:
    """The child-process form (`serving.launch.spawn_server` starts it for an embedded run)."""
    parser = argparse.ArgumentParser(description="tinker-sim child process")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--log", type=Path, default=None)
    parser.add_argument("--stop-on-stdin-eof", action="store_true")
    args = parser.parse_args(argv)
    config = SimConfig(state_dir=args.state_dir, log_path=args.log)
    asyncio.run(serve(config, args.host, args.port, lambda url: print(f"LISTENING {url}", flush=True),
                      args.stop_on_stdin_eof))


if __name__ == "__main__":
    main()
