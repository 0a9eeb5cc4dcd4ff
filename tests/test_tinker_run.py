"""The run's Tinker target is checked before anything starts: key, reachability, model, renderer."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
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
    assert resolve_renderer("auto", "builtin")[0] == "builtin"
    chosen, why = resolve_renderer("auto", "Qwen/Qwen3-4B-Instruct-2507")
    assert chosen == "qwen3_instruct" and "Qwen/Qwen3-4B-Instruct-2507" in why
    assert resolve_renderer("auto", "meta-llama/Llama-3.1-8B-Instruct")[0] == "llama3"
    with pytest.raises(ValueError, match="unknown renderer 'chatml'"):
        resolve_renderer("chatml", "builtin")


def test_a_qwen_run_needs_the_hosted_key_before_anything_is_dialled(monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    monkeypatch.setenv("TINKER_BASE_URL", "http://127.0.0.1:9/hosted")  # never dialled: the key is checked first
    with pytest.raises(ValueError) as failed:
        check_target(TinkerTarget(base_model="Qwen/Qwen3-4B-Instruct-2507"))
    assert str(failed.value) == ("TINKER_API_KEY is not set: the Tinker service at http://127.0.0.1:9/hosted needs "
                                 "it (export TINKER_API_KEY=tml-...)")
    assert capsys.readouterr().err == ""  # the failure is the one line


def test_a_qwen_run_on_a_service_that_offers_it_says_which_renderer_it_picked(
        hosted: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TINKER_API_KEY", "tml-good")
    assert check_target(TinkerTarget(url=hosted, base_model="Qwen/Qwen3-8B")) == "tml-good"
    assert capsys.readouterr().err == ("rl-daytona: renderer qwen3 for Qwen/Qwen3-8B (auto: a Qwen3 hybrid model, "
                                       "thinking on as its template defaults)\n")


def test_a_train_for_qwen_without_a_key_stops_in_one_line_and_creates_nothing(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rl_daytona.cli import main

    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    monkeypatch.setenv("TINKER_BASE_URL", "http://127.0.0.1:9/hosted")
    with pytest.raises(SystemExit) as done:
        main(["train", "--trainer", "tinker", "--base-model", "Qwen/Qwen3-4B-Instruct-2507", "--renderer", "auto",
              "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert done.value.code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("rl-daytona train: error: TINKER_API_KEY is not set")
    assert not (tmp_path / "run").exists()


def test_the_local_service_serves_only_the_built_in_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from rl_daytona.tinker_sim import RunningSim, SimConfig, run_sim_in_thread

    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    sim: RunningSim
    with run_sim_in_thread(SimConfig(state_dir=tmp_path / "state")) as sim:
        with pytest.raises(ValueError) as failed:
            check_target(TinkerTarget(url=sim.url, base_model="Qwen/Qwen3-4B-Instruct-2507"))
        assert str(failed.value) == (f"base model 'Qwen/Qwen3-4B-Instruct-2507' is not offered by {sim.url} "
                                     f"(it offers: builtin)")
    monkeypatch.setenv("TINKER_API_KEY", "tml-the-users-real-key")
    assert check_target(TinkerTarget()) == "tml-tinker-sim-local", "a real key never goes to the local service"