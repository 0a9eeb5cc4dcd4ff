"""The socket.io event gateway of daytona-sim at `/api/socket.io/`: what the SDK waits on.

Invariant: a socket.io client is connected only if its `auth.token` is the sim's API key;
every sandbox state change is emitted to every connected client as `sandbox.state.updated`
with `{"sandbox": <Sandbox DTO>, "oldState", "newState"}` (the payload shape the SDK's
dispatcher reads). Clients that cannot connect still work: the SDK polls `GET /api/sandbox/{id}`.
"""

from __future__ import annotations

import asyncio
import hmac
from typing import Any, Callable

import socketio
from aiohttp import web

from rl_daytona.daytona_sim.state import SandboxRecord

PATH = "/api/socket.io/"


class EventGateway:
    """A python-socketio AsyncServer attached to the sim's aiohttp app."""

    def __init__(self, api_key: str, toolbox_url: Callable[[], str]) -> None:
        self.api_key, self.toolbox_url = api_key, toolbox_url
        self.sio = socketio.AsyncServer(async_mode="aiohttp", cors_allowed_origins="*",
                                        logger=False, engineio_logger=False)
        self.sio.on("connect", self._connect)
        self._tasks: set[asyncio.Task[Any]] = set()

    def attach(self, app: web.Application) -> None:
        self.sio.attach(app, socketio_path=PATH)

    async def _connect(self, sid: str, environ: dict[str, Any], auth: Any = None) -> bool:
        token = auth.get("token", "") if isinstance(auth, dict) else ""
        return hmac.compare_digest(str(token).encode(), self.api_key.encode())

    def state_changed(self, record: SandboxRecord, old_state: str) -> None:
        """Emit one `sandbox.state.updated` (scheduled on the running loop)."""
        payload = {"sandbox": record.dto(self.toolbox_url()), "oldState": old_state, "newState": record.state}
        try:
            task = asyncio.get_running_loop().create_task(self.sio.emit("sandbox.state.updated", payload))
        except RuntimeError:
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for sid in list(self.sio.manager.get_participants("/", None)):
            await self.sio.disconnect(sid[0] if isinstance(sid, tuple) else sid)
