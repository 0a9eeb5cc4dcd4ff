"""The toolbox routes of daytona-sim: what `sandbox.process.exec` calls.

Invariant: the SDK reaches a sandbox's toolbox at `<toolboxProxyUrl>/<sandbox id>/<path>`;
`process/execute` runs the command with `sh -c` in that sandbox's real LocalBackend sandbox
(cwd /workspace unless given) and answers `{"exitCode", "result"}` with stdout then stderr
in `result`, as Daytona's daemon does. A missing timeout is Daytona's documented 10 s.
"""

from __future__ import annotations

from aiohttp import web

from rl_daytona.daytona_sim.engine import Engine
from rl_daytona.daytona_sim.rest import body_of
from rl_daytona.daytona_sim.state import SimError

DEFAULT_TIMEOUT = 10


class ToolboxRoutes:
    """`/toolbox/{sid}/...` handlers."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def add_to(self, app: web.Application) -> None:
        app.router.add_post("/toolbox/{sid}/process/execute", self.execute)
        app.router.add_get("/toolbox/{sid}/info/work-dir", self.work_dir)

    async def execute(self, request: web.Request) -> web.Response:
        record = self.engine.get(request.match_info["sid"])
        body = await body_of(request)
        command = body.get("command")
        if not isinstance(command, str) or not command.strip():
            raise SimError(400, "command must be a non-empty string")
        timeout = body.get("timeout") or DEFAULT_TIMEOUT
        if not isinstance(timeout, (int, float)) or timeout <= 0:
            raise SimError(400, f"timeout must be a positive number of seconds, got {timeout!r}")
        envs = body.get("envs") or {}
        result = await self.engine.exec(record, command, timeout=float(timeout), cwd=body.get("cwd"),
                                        env={str(k): str(v) for k, v in dict(envs).items()})
        return web.json_response({"exitCode": result.exit_code, "result": result.output})

    async def work_dir(self, request: web.Request) -> web.Response:
        self.engine.get(request.match_info["sid"])
        return web.json_response({"dir": "/workspace"})
