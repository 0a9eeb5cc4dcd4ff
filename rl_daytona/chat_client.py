"""The agents' chat-completions client: POST /chat/completions on any OpenAI-compatible endpoint.

    client = ChatClient(base_url, api_key, max_connections=32)   # its session opens on first use
    reply = await client.complete(body)     # the ChatCompletion JSON object, a dict
    await client.close()

Why not the openai SDK here (it stays the reference client the endpoints are tested with):
the agent posts a JSON body it already holds and reads six fields of the reply, once per turn,
tens of thousands of times a run. On the SDK's httpx stack that POST was half of a
RolloutActor's CPU: request building, a scan of every pooled connection per request, a typed
reply tree. `scripts/bench_host_path.py --http openai|aiohttp` measures both on the same chats.
vLLM's own serving benchmark posts its chat requests with aiohttp for the same reason.

Invariant: `complete` returns a dict or raises `ChatError` with one line (the HTTP status and
the server's own error message when it sent one). As the openai SDK does by default, a lost
connection, a timeout and HTTP 408/409/429/5xx are tried again (`max_retries` times, backing
off 0.5 s doubling, honouring a short `Retry-After`); any other status is final. The key is
sent as a Bearer header, and never appears in an error.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
MAX_RETRY_AFTER = 8.0  # seconds: a longer Retry-After is not waited for (the rollout deadline runs)


class ChatError(RuntimeError):
    """The endpoint did not answer with a chat completion (after the retries)."""


class ChatClient:
    def __init__(self, base_url: str, api_key: str = "none", max_connections: int = 64,
                 timeout: float = 120.0, max_retries: int = 2, backoff: float = 0.5) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self._headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
        self._limit, self._timeout = max_connections, aiohttp.ClientTimeout(total=timeout)
        self.max_retries, self.backoff = max_retries, backoff
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._limit), timeout=self._timeout,
                headers=self._headers)
        return self._session

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(body).encode()
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                async with self._open().post(self.url, data=data) as resp:
                    raw = await resp.read()
                    if resp.status == 200:
                        return _reply(raw)
                    failure = f"HTTP {resp.status}: {_error_message(raw)}"
                    if last or resp.status not in RETRY_STATUSES:
                        raise ChatError(failure)
                    wait = _retry_after(resp.headers.get("Retry-After"))
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                if last:
                    raise ChatError(f"{type(exc).__name__}: {exc}".rstrip(": ")) from None
                wait = None
            await asyncio.sleep(wait if wait is not None else self.backoff * 2 ** attempt)
        raise AssertionError("unreachable")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def _reply(raw: bytes) -> dict[str, Any]:
    try:
        reply = json.loads(raw)
    except ValueError as exc:
        raise ChatError(f"the reply is not JSON: {exc}") from None
    if not isinstance(reply, dict):
        raise ChatError(f"the reply is a JSON {type(reply).__name__}, not an object")
    return reply


def _error_message(raw: bytes) -> str:
    """The server's `{"error": {"message": ...}}` (OpenAI's, vLLM's), else the body's start."""
    try:
        error = json.loads(raw).get("error")
        message = error.get("message") if isinstance(error, dict) else error
        if message:
            return " ".join(str(message).split())[:300]
    except (ValueError, AttributeError):
        pass
    return " ".join(raw.decode("utf-8", "replace").split())[:300] or "(empty body)"


def _retry_after(value: str | None) -> float | None:
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds <= MAX_RETRY_AFTER else None
