"""The REST routes of daytona-sim under `/api`: sandboxes, ssh access, snapshots, warm pools,
object-storage push access.

Invariant: every route answers with the JSON shapes (camelCase) the `daytona` 0.226 SDK's
generated models parse, and every failure is a `SimError` turned into Daytona's error body
(`{"statusCode", "message", "error"}`) by the server's middleware.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Callable

from aiohttp import web

from rl_daytona.daytona_sim.engine import Engine
from rl_daytona.daytona_sim.state import SimError

DEFAULT_PAGE = 100
MAX_PAGE = 200


async def body_of(request: web.Request) -> dict[str, Any]:
    """The request's JSON object ({} for an empty body); 400 for anything else."""
    if not request.can_read_body:
        return {}
    try:
        data = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SimError(400, f"request body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise SimError(400, "request body must be a JSON object")
    return data


def _int_param(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    text = request.query.get(name)
    try:
        value = default if text is None else int(text)
    except ValueError:
        raise SimError(400, f"{name} must be an integer, got {text!r}") from None
    if not low <= value <= high:
        raise SimError(400, f"{name} must be between {low} and {high}, got {value}")
    return value


def _labels_param(request: web.Request) -> dict[str, str]:
    text = request.query.get("labels")
    if not text:
        return {}
    try:
        labels = json.loads(text)
    except json.JSONDecodeError:
        raise SimError(400, f"labels must be a JSON object, got {text!r}") from None
    if not isinstance(labels, dict):
        raise SimError(400, f"labels must be a JSON object, got {text!r}")
    return {str(k): str(v) for k, v in labels.items()}


class SandboxRoutes:
    """`/api/sandbox...` handlers over one `Engine`."""

    def __init__(self, engine: Engine, toolbox_url: Callable[[], str],
                 ssh_target: Callable[[], tuple[str, int]]) -> None:
        self.engine, self.toolbox_url, self.ssh_target = engine, toolbox_url, ssh_target

    def add_to(self, app: web.Application) -> None:
        r = app.router
        r.add_post("/api/sandbox", self.create)
        r.add_get("/api/sandbox", self.list)
        r.add_get("/api/sandbox/ssh-access/validate", self.validate_ssh)
        r.add_get("/api/sandbox/{sid}", self.get)
        r.add_delete("/api/sandbox/{sid}", self.delete)
        r.add_post("/api/sandbox/{sid}/fork", self.fork)
        r.add_post("/api/sandbox/{sid}/ssh-access", self.create_ssh)
        r.add_delete("/api/sandbox/{sid}/ssh-access", self.revoke_ssh)
        r.add_get("/api/sandbox/{sid}/toolbox-proxy-url", self.toolbox_proxy_url)
        r.add_post("/api/sandbox/{sid}/autostop/{interval}", self.set_autostop)
        r.add_post("/api/sandbox/{sid}/autodelete/{interval}", self.set_autodelete)

    def _dto(self, record: Any) -> dict[str, Any]:
        return record.dto(self.toolbox_url())

    async def create(self, request: web.Request) -> web.Response:
        body = await body_of(request)
        if body.get("buildInfo"):
            raise SimError(400, "daytona-sim creates sandboxes from snapshots only; build a snapshot "
                                "(daytona.snapshot.create) and create from its name")
        return web.json_response(self._dto(self.engine.create(body)))

    async def list(self, request: web.Request) -> web.Response:
        limit = _int_param(request, "limit", DEFAULT_PAGE, 1, MAX_PAGE)
        start = _int_param(request, "cursor", 0, 0, 1 << 62)
        include_warm = request.query.get("includeWarm") == "true"
        states = request.query.getall("states", []) or None
        found = self.engine.listed(_labels_param(request), include_warm, states)
        page = found[start:start + limit]
        more = start + limit < len(found)
        return web.json_response({"items": [self._dto(r) for r in page],
                                  "nextCursor": str(start + limit) if more else None})

    async def get(self, request: web.Request) -> web.Response:
        return web.json_response(self._dto(self.engine.get(request.match_info["sid"])))

    async def delete(self, request: web.Request) -> web.Response:
        record = await self.engine.delete(request.match_info["sid"])
        return web.json_response(self._dto(record))

    async def fork(self, request: web.Request) -> web.Response:
        body = await body_of(request)
        return web.json_response(self._dto(self.engine.fork(request.match_info["sid"], body.get("name"))))

    async def create_ssh(self, request: web.Request) -> web.Response:
        minutes = _int_param(request, "expiresInMinutes", 60, 1, 60 * 24 * 30)
        grant = self.engine.grant_ssh(request.match_info["sid"], minutes)
        host, port = self.ssh_target()
        return web.json_response({
            "id": grant.id, "sandboxId": grant.sandbox_id, "token": grant.token,
            "expiresAt": grant.expires_at.isoformat(), "createdAt": grant.created_at.isoformat(),
            "updatedAt": grant.created_at.isoformat(), "sshCommand": f"ssh -p {port} {grant.token}@{host}"})

    async def validate_ssh(self, request: web.Request) -> web.Response:
        grant = self.engine.valid_token(request.query.get("token", ""))
        return web.json_response({"valid": grant is not None, "sandboxId": grant.sandbox_id if grant else ""})

    async def revoke_ssh(self, request: web.Request) -> web.Response:
        record = self.engine.revoke_ssh(request.match_info["sid"], request.query.get("token"))
        return web.json_response(self._dto(record))

    async def toolbox_proxy_url(self, request: web.Request) -> web.Response:
        self.engine.get(request.match_info["sid"])
        return web.json_response({"url": self.toolbox_url()})

    async def set_autostop(self, request: web.Request) -> web.Response:
        self.engine.get(request.match_info["sid"]).auto_stop_interval = _interval(request)
        return web.Response(status=200)

    async def set_autodelete(self, request: web.Request) -> web.Response:
        self.engine.get(request.match_info["sid"]).auto_delete_interval = _interval(request)
        return web.Response(status=200)


def _interval(request: web.Request) -> float:
    try:
        return float(request.match_info["interval"])
    except ValueError:
        raise SimError(400, f"interval must be a number, got {request.match_info['interval']!r}") from None


class CatalogRoutes:
    """`/api/snapshots...` and `/api/warm-pools...` handlers."""

    def __init__(self, engine: Engine, public_url: Callable[[], str],
                 push_access: Callable[[], dict[str, Any]]) -> None:
        self.catalog, self.public_url, self.push_access_dto = engine.catalog, public_url, push_access

    def add_to(self, app: web.Application) -> None:
        r = app.router
        r.add_post("/api/snapshots", self.create_snapshot)
        r.add_get("/api/snapshots", self.list_snapshots)
        r.add_get("/api/snapshots/{sid}", self.get_snapshot)
        r.add_delete("/api/snapshots/{sid}", self.remove_snapshot)
        r.add_get("/api/snapshots/{sid}/build-logs-url", self.build_logs_url)
        r.add_get("/api/snapshots/{sid}/build-logs", self.build_logs)
        r.add_post("/api/warm-pools", self.create_pool)
        r.add_get("/api/warm-pools", self.list_pools)
        r.add_patch("/api/warm-pools/{pid}", self.update_pool)
        r.add_delete("/api/warm-pools/{pid}", self.delete_pool)
        r.add_get("/api/object-storage/push-access", self.push_access)

    async def create_snapshot(self, request: web.Request) -> web.Response:
        return web.json_response(self.catalog.create_snapshot(await body_of(request)).dto())

    async def list_snapshots(self, request: web.Request) -> web.Response:
        page = _int_param(request, "page", 1, 1, 1 << 30)
        limit = _int_param(request, "limit", DEFAULT_PAGE, 1, MAX_PAGE)
        name = request.query.get("name", "")
        found = sorted((s for s in self.catalog.snapshots.values() if s.name.startswith(name)),
                       key=lambda s: (s.created_at, s.name))
        items = found[(page - 1) * limit:page * limit]
        return web.json_response({"items": [s.dto() for s in items], "total": len(found), "page": page,
                                  "totalPages": max(1, -(-len(found) // limit))})

    async def get_snapshot(self, request: web.Request) -> web.Response:
        return web.json_response(self.catalog.snapshot(request.match_info["sid"]).dto())

    async def remove_snapshot(self, request: web.Request) -> web.Response:
        self.catalog.remove_snapshot(request.match_info["sid"])
        return web.Response(status=200)

    async def build_logs_url(self, request: web.Request) -> web.Response:
        snap = self.catalog.snapshot(request.match_info["sid"])
        return web.json_response({"url": f"{self.public_url()}/api/snapshots/{snap.id}/build-logs"})

    async def build_logs(self, request: web.Request) -> web.StreamResponse:
        """The build log as text; with `follow=true`, streamed until the build ends."""
        snap = self.catalog.snapshot(request.match_info["sid"])
        response = web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8"})
        await response.prepare(request)
        sent, follow = 0, request.query.get("follow") == "true"
        while True:
            changed = snap.changed
            for line in snap.logs[sent:]:
                await response.write((line + "\n").encode())
            sent = len(snap.logs)
            if snap.finished or not follow:
                break
            await asyncio.wait_for(changed.wait(), timeout=None)
        await response.write_eof()
        return response

    async def create_pool(self, request: web.Request) -> web.Response:
        return web.json_response(self.catalog.create_pool(await body_of(request)).dto(), status=201)

    async def list_pools(self, request: web.Request) -> web.Response:
        return web.json_response([p.dto() for p in self.catalog.pools.values()])

    async def update_pool(self, request: web.Request) -> web.Response:
        pool = self.catalog.update_pool(request.match_info["pid"], await body_of(request))
        return web.json_response(pool.dto())

    async def delete_pool(self, request: web.Request) -> web.Response:
        await self.catalog.delete_pool(request.match_info["pid"])
        return web.Response(status=204)

    async def push_access(self, request: web.Request) -> web.Response:
        """Where and with which (dummy) credentials the SDK uploads build contexts (`objects.py`)."""
        return web.json_response(self.push_access_dto())
