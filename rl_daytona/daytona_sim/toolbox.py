"""The toolbox routes of daytona-sim: what `sandbox.process.exec` calls.

Invariant: the SDK reaches a sandbox's toolbox at `<toolboxProxyUrl>/<sandbox id>/<path>`;
`process/execute` runs the command with `sh -c` in that sandbox's real LocalBackend sandbox
(cwd /workspace unless given) and answers `{"exitCode", "result"}` with stdout then stderr
in `result`, as Daytona's daemon does. A missing timeout is the API's documented 10 s; 0 is
no limit (an hour).
`files/bulk-upload` (multipart: `files[i].path` + `files[i].file`) and `files/bulk-download`
(JSON `{"paths"}` in, multipart out: a `file` part per path, or an `error` part with a JSON
`{"message", "statusCode", "code"}`) move bytes in and out of the sandbox's /workspace through
LocalBackend.write_files/read_file, which refuse paths outside it.
"""

from __future__ import annotations

import json
import urllib.parse

from aiohttp import MultipartWriter, web

from rl_daytona.daytona_sim.engine import Engine
from rl_daytona.daytona_sim.rest import body_of
from rl_daytona.daytona_sim.state import SimError

DEFAULT_TIMEOUT = 10
UNBOUNDED = 3600.0  # timeout 0: no limit (capped at an hour)


class ToolboxRoutes:
    """`/toolbox/{sid}/...` handlers."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def add_to(self, app: web.Application) -> None:
        app.router.add_post("/toolbox/{sid}/process/execute", self.execute)
        app.router.add_get("/toolbox/{sid}/info/work-dir", self.work_dir)
        app.router.add_post("/toolbox/{sid}/files/bulk-upload", self.upload)
        app.router.add_post("/toolbox/{sid}/files/bulk-download", self.download)

    async def execute(self, request: web.Request) -> web.Response:
        record = self.engine.get(request.match_info["sid"])
        body = await body_of(request)
        command = body.get("command")
        if not isinstance(command, str) or not command.strip():
            raise SimError(400, "command must be a non-empty string")
        timeout = body.get("timeout")
        timeout = DEFAULT_TIMEOUT if timeout is None else (UNBOUNDED if timeout == 0 else timeout)
        if not isinstance(timeout, (int, float)) or timeout < 0:
            raise SimError(400, f"timeout must be a positive number of seconds, got {timeout!r}")
        envs = body.get("envs") or {}
        result = await self.engine.exec(record, command, timeout=float(timeout), cwd=body.get("cwd"),
                                        env={str(k): str(v) for k, v in dict(envs).items()})
        return web.json_response({"exitCode": result.exit_code, "result": result.output})

    async def work_dir(self, request: web.Request) -> web.Response:
        self.engine.get(request.match_info["sid"])
        return web.json_response({"dir": "/workspace"})

    def _started(self, request: web.Request) -> object:
        record = self.engine.get(request.match_info["sid"])
        if record.state != "started" or record.handle is None or record.broken:
            raise SimError(409, f"Sandbox {record.id} is {record.state}, its toolbox is not reachable")
        return record.handle

    async def upload(self, request: web.Request) -> web.Response:
        handle = self._started(request)
        paths: dict[str, str] = {}
        blobs: dict[str, tuple[str, bytes]] = {}
        reader = await request.multipart()
        async for part in reader:
            name = str(part.name or "")  # files[i].path / files[i].file
            index, _, kind = name.rpartition(".")
            data = bytes(await part.read())  # type: ignore[union-attr]
            if kind == "path":
                paths[index] = data.decode()
            elif kind == "file":
                blobs[index] = (urllib.parse.unquote(str(part.filename or "")), data)  # type: ignore[union-attr]
        files = {paths.get(i) or fallback: data for i, (fallback, data) in blobs.items()}
        if not files:
            raise SimError(400, "no files[i].file parts in the upload")
        try:
            await self.engine.backend.write_files(handle, files)  # type: ignore[arg-type]
        except (OSError, ValueError, PermissionError) as exc:
            raise SimError(400, f"upload refused: {exc}") from None
        return web.Response(status=200)

    async def download(self, request: web.Request) -> web.Response:
        handle = self._started(request)
        paths = (await body_of(request)).get("paths")
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise SimError(400, "paths must be a list of strings")
        writer = MultipartWriter("form-data")
        for path in paths:
            try:
                data = await self.engine.backend.read_file(handle, path)  # type: ignore[arg-type]
            except FileNotFoundError:
                self._error_part(writer, path, 404, "FILE_NOT_FOUND", f"file not found: {path}")
                continue
            except (OSError, ValueError) as exc:
                self._error_part(writer, path, 400, "INVALID_PATH", f"cannot read {path}: {exc}")
                continue
            writer.append(data, {"Content-Type": "application/octet-stream",
                                 "Content-Disposition": _disposition("file", path)})
        return web.Response(body=writer, headers={"Content-Type": f"multipart/form-data; boundary={writer.boundary}"})

    @staticmethod
    def _error_part(writer: MultipartWriter, path: str, status: int, code: str, message: str) -> None:
        body = json.dumps({"message": message, "statusCode": status, "code": code})
        writer.append(body, {"Content-Type": "application/json", "Content-Disposition": _disposition("error", path)})


def _disposition(name: str, path: str) -> str:
    """The part header Daytona's daemon sends: the path as a plain quoted filename."""
    quoted = path.replace("\\", "\\\\").replace('"', '\\"')
    return f'form-data; name="{name}"; filename="{quoted}"'
