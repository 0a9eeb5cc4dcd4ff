"""daytona-sim: a local server that speaks Daytona's API, for tests and simulation (like moto for AWS).

Invariant: every request under /api and /toolbox carries `Authorization: Bearer <api_key>` or
gets a 401 JSON error; every other failure is Daytona's JSON error body with its status; the
server owns every sandbox it creates and `stop()` deletes them all. `run_sim_in_thread` runs
one on its own event loop in a background thread for synchronous callers (Ray drivers, tests).

State changes are pushed over socket.io (`events.py`), as Daytona does; the SDK also polls.
A Dockerfile's COPY sources go, as in Daytona, to S3-compatible object storage (`objects.py`,
HTTPS on a port of its own, `sim.objects.url`); push-access hands out its URL and credentials,
and a client process must trust its CA (`backends.ca_trust.trust_in_this_process(sim.objects.ca_bundle)`)
to upload. Not served: creates from an image (build a snapshot first).
Faults can be changed while serving (`set_faults`), e.g. to fail creates only for a while.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Awaitable, Callable

from aiohttp import web

from rl_daytona.backends.local import LocalBackend
from rl_daytona.daytona_sim.catalog import Catalog
from rl_daytona.daytona_sim.engine import Engine
from rl_daytona.daytona_sim.events import PATH as EVENTS_PATH, EventGateway
from rl_daytona.daytona_sim.faults import RateLimiter
from rl_daytona.daytona_sim.objects import ObjectStore, context_key
from rl_daytona.daytona_sim.rest import CatalogRoutes, SandboxRoutes
from rl_daytona.daytona_sim.ssh import SshGateway
from rl_daytona.daytona_sim.state import ORG_ID, SimError, SimStats
from rl_daytona.daytona_sim.toolbox import ToolboxRoutes
from rl_daytona.types import SandboxLimits

__all__ = ["SimConfig", "DaytonaSim", "RunningSim", "run_sim_in_thread"]

OUTPUT_CAP = 64 << 20  # bytes of stdout + stderr one command may return
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class SimConfig:
    """How the simulated Daytona behaves; see the package docstring for each fault."""

    root: str
    api_key: str = "sim-key"
    time_scale: float = 1.0
    create_fail_rate: float = 0.0
    create_hang_rate: float = 0.0
    probe_fail_rate: float = 0.0
    rate_limit_per_min: int | None = None
    isolation: str = "bwrap"
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("create_fail_rate", "create_hang_rate", "probe_fail_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {value}")
        if self.create_fail_rate + self.create_hang_rate > 1.0:
            raise ValueError("create_fail_rate + create_hang_rate must not exceed 1")
        if self.time_scale < 0:
            raise ValueError(f"time_scale must not be negative, got {self.time_scale}")
        if not self.api_key:
            raise ValueError("api_key must not be empty")
        if self.rate_limit_per_min is not None and self.rate_limit_per_min < 1:
            raise ValueError(f"rate_limit_per_min must be at least 1, got {self.rate_limit_per_min}")


_REASONS = {400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 409: "Conflict",
            429: "Too Many Requests", 501: "Not Implemented"}


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    body = {"statusCode": status, "message": message, "error": _REASONS.get(status, "Error")}
    return web.Response(status=status, text=json.dumps(body), content_type="application/json",
                        headers=headers)


class DaytonaSim:
    """The server: REST + toolbox over aiohttp, SSH over asyncssh, sandboxes in LocalBackend."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.root = Path(config.root)
        self.root.mkdir(parents=True, exist_ok=True)
        # Daytona's SSH and toolbox do not cut a command's output at 64 KiB, so neither does the sim
        backend = LocalBackend(self.root / "sandboxes", isolation=config.isolation,
                               limits=SandboxLimits(max_output_bytes=OUTPUT_CAP))
        self.objects = ObjectStore(self.root / "object-storage")
        uploaded = lambda context_hash: self.objects.has(context_key(ORG_ID, context_hash))  # noqa: E731
        self.engine = Engine(config, backend, Catalog(config.time_scale, uploaded))
        self.ssh = SshGateway(self.engine, self.root)
        self.events = EventGateway(config.api_key, lambda: f"{self.base_url}/toolbox")
        self.engine.listener = self.events.state_changed
        self._runner: web.AppRunner | None = None
        self.host, self.port, self.ssh_host, self.ssh_port = "127.0.0.1", 0, "127.0.0.1", 0

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def api_url(self) -> str:
        """What DAYTONA_API_URL must be set to."""
        return f"{self.base_url}/api"

    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._errors, self._auth], client_max_size=64 << 20)
        SandboxRoutes(self.engine, lambda: f"{self.base_url}/toolbox",
                      lambda: (self.ssh_host, self.ssh_port)).add_to(app)
        CatalogRoutes(self.engine, lambda: self.base_url, lambda: self.objects.push_access(ORG_ID)).add_to(app)
        ToolboxRoutes(self.engine).add_to(app)
        app.router.add_get("/health", self._health)
        self.events.attach(app)
        return app

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except SimError as exc:
            return _error(exc.status, exc.message, exc.headers)
        except web.HTTPException as exc:
            if exc.status >= 400:
                return _error(exc.status, exc.reason)
            raise

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path != "/health" and not request.path.startswith(EVENTS_PATH):  # socket.io: auth.token
            given = request.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {self.config.api_key}".encode()):
                raise SimError(401, "Unauthorized: invalid or missing API key")
        return await handler(request)

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "simulator": "daytona-sim"})

    async def start(self, host: str = "127.0.0.1", port: int = 0, ssh_port: int = 0,
                    storage_port: int = 0) -> None:
        """Listen on host:port (0: any free port) for HTTP, host:ssh_port for SSH and
        host:storage_port for the object storage (HTTPS)."""
        self._runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        self.host = host
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        await self.ssh.start(host, ssh_port)
        self.ssh_host, self.ssh_port = host, self.ssh.port
        await self.objects.start(host, storage_port)

    async def stop(self) -> None:
        """Delete every sandbox, then stop listening."""
        await self.engine.close()
        await self.events.close()
        await self.ssh.stop()
        await self.objects.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def stats(self) -> SimStats:
        return self.engine.stats()

    def set_faults(self, **changes: Any) -> SimConfig:
        """Change fault fields of the config while serving (create_fail_rate, create_hang_rate,
        probe_fail_rate, rate_limit_per_min); they apply to requests from now on."""
        allowed = {"create_fail_rate", "create_hang_rate", "probe_fail_rate", "rate_limit_per_min"}
        unknown = set(changes) - allowed
        if unknown:
            raise ValueError(f"set_faults: unknown fields {sorted(unknown)} (choose from {sorted(allowed)})")
        self.config = self.engine.config = replace(self.config, **changes)
        if "rate_limit_per_min" in changes:
            self.engine.limiter = RateLimiter(self.config.rate_limit_per_min)
        return self.config


class RunningSim:
    """A `DaytonaSim` on its own event loop in a daemon thread; a context manager."""

    def __init__(self, config: SimConfig, port: int = 0, ssh_port: int = 0) -> None:
        self.sim = DaytonaSim(config)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="daytona-sim", daemon=True)
        self._thread.start()
        self._call(self.sim.start("127.0.0.1", port, ssh_port))

    def _call(self, coro: Awaitable[Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=120)  # type: ignore[arg-type]

    @property
    def api_url(self) -> str:
        return self.sim.api_url

    @property
    def ssh_host(self) -> str:
        return self.sim.ssh_host

    @property
    def ssh_port(self) -> int:
        return self.sim.ssh_port

    def stats(self) -> SimStats:
        async def read() -> SimStats:
            return self.sim.stats()
        return self._call(read())

    def set_faults(self, **changes: Any) -> SimConfig:
        """`DaytonaSim.set_faults`, run on the server's loop."""
        async def apply() -> SimConfig:
            return self.sim.set_faults(**changes)
        return self._call(apply())

    def stop(self) -> None:
        """Delete every sandbox, stop the server and its thread (idempotent)."""
        if not self._thread.is_alive():
            return
        try:
            self._call(self.sim.stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)

    def __enter__(self) -> RunningSim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_sim_in_thread(config: SimConfig, port: int = 0, ssh_port: int = 0) -> RunningSim:
    """Start a `DaytonaSim` in a background thread; use as a context manager or call `.stop()`."""
    return RunningSim(config, port, ssh_port)
