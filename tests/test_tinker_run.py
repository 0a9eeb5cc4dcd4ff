"""The run's Tinker target is checked before anything starts: key, reachability, model, renderer."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest

from rl_daytona.tinker_run import TinkerTarget, check_target, resolve_renderer


class _Hosted(BaseHTTPRequestHandler):
    """A stand-in for a hosted service's two GETs (not tinker-sim: its health names no service)."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.endswith("/healthz"):
            body, status = {"status": "ok"}, 200
        elif self.headers.get("X-API-Key") != "tml-good":
            body, status = {"detail": "bad key"}, 401
        else:
            body, status = {"supported_models": [{"model_name": "Qwen/Qwen3-8B"}]}, 200
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hosted() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hosted)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_hosted_url_needs_the_key_and_the_model(hosted: str, monkeypatch: pytest.MonkeyPatch) -> None:
    target = TinkerTarget(url=hosted, base_model="Qwen/Qwen3-8B", renderer="builtin")
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    with pytest.raises(ValueError, match=f"TINKER_API_KEY is not set: the Tinker service at {hosted} needs it"):
        check_target(target)
    monkeypatch.setenv("TINKER_API_KEY", "tml-wrong")
    with pytest.raises(ValueError, match=r"refused the key \(HTTP 401\)"):
        check_target(target)
    monkeypatch.setenv("TINKER_API_KEY", "tml-good")
    assert check_target(target) == "tml-good"
    with pytest.raises(ValueError, match=r"base model 'Llama' is not offered by .* \(it offers: Qwen/Qwen3-8B\)"):
        check_target(TinkerTarget(url=hosted, base_model="Llama", renderer="builtin"))


def test_renderers_are_looked_up_in_one_place() -> None:
    assert type(resolve_renderer("auto", "builtin")).__name__ == "BuiltinRenderer"
    with pytest.raises(ValueError, match="no renderer is known for 'Qwen/Qwen3-8B' yet"):
        resolve_renderer("auto", "Qwen/Qwen3-8B")
    with pytest.raises(ValueError, match="unknown --renderer 'chatml'"):
        resolve_renderer("chatml", "builtin")


def test_the_local_service_serves_only_the_built_in_model(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="serves only its built-in model 'builtin'"):
        check_target(TinkerTarget(base_model="Qwen/Qwen3-8B"))
    monkeypatch.setenv("TINKER_API_KEY", "tml-the-users-real-key")
    assert check_target(TinkerTarget()) == "tml-tinker-sim-local", "a real key never goes to the local service"
