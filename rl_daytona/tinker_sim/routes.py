"""tinker-sim's HTTP routes: the `/api/v1/*` calls the pinned `tinker` SDK makes.

    service   healthz, get_server_capabilities, client/config, client/dynamic_config,
              create_session, session_heartbeat, sessions/{id}/finish, telemetry
    training  create_model, get_info, forward_backward (protobuf), optim_step,
              save_weights, save_weights_for_sampler, load_weights
    sampling  create_sampling_session, samplers/{id}, asample
    futures   retrieve_future: the call's result (JSON, or protobuf for forward_backward and
              sample), `try_again` while it is slow, or `{"error": ...}` when it failed

Invariant: every training and sampling call is applied before its future id is returned, in
arrival order per model (the SDK sends a training client's calls one turn at a time: the
client config turns its parallel chunks off), and a repeated `(model_id, seq_id)` returns
the first call's future without applying it again. A refused request (bad datum, unknown
model, bad path) is HTTP 400 with `{"detail": one line}`; an unknown id is 404.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Awaitable, Callable

from aiohttp import web

from rl_daytona.policy.training import TrainingError, parse_adam
from rl_daytona.tinker_sim import wire
from rl_daytona.tinker_sim.faults import Faults
from rl_daytona.tinker_sim.state import BASE_MODEL, Future, SimState, TrainingModel, load_into

STATE = web.AppKey("state", SimState)
FAULTS = web.AppKey("faults", Faults)
NOT_APPLIED = web.RequestKey("not_applied", bool)  # a failed future: no lost reply after it
PROTO = "application/x-protobuf"
CLIENT_CONFIG = {"pjwt_auth_enabled": False, "use_pyqwest_transport": True, "parallel_fwdbwd_chunks": False,
                 "proto_compress_fwdbwd": False, "sample_use_retrieve_futures": False,
                 "sample_join_sampling_session": False, "sample_enable_stuck_detection": False}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.read() or b"{}")
    except ValueError as exc:
        raise TrainingError(f"request body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise TrainingError("request body must be a JSON object")
    return body


def _route(request: web.Request) -> str:
    return request.path.rstrip("/").rsplit("/", 1)[-1]


def _queued(request: web.Request, body: dict[str, Any] | None = None, proto: bytes | None = None,
            extra: dict[str, Any] | None = None) -> dict[str, Any]:
    state, faults = request.app[STATE], request.app[FAULTS]
    request_id = state.add_future(Future(body=body, proto=proto, polls_left=faults.slow_polls(_route(request))))
    return {"request_id": request_id, **(extra or {})}


async def _once(request: web.Request, model: TrainingModel, seq: int | None,
                apply: Callable[[], dict[str, Any]]) -> web.Response:
    """Apply a training call once per (model, seq_id), off the event loop; its future's id."""
    def run() -> dict[str, Any]:
        with model.lock:
            if request.app[FAULTS].take("failed_future", _route(request)):  # refused before applying
                request[NOT_APPLIED] = True
                failed = Future(error="the call failed on the service (injected); it was not applied")
                return {"request_id": request.app[STATE].add_future(failed), "model_id": model.model_id}
            if seq is not None and seq in model.seen:
                request.app[STATE].count("replayed")
                return {"request_id": model.seen[seq], "model_id": model.model_id}
            answer = apply()
            if seq is not None:
                model.seen[seq] = answer["request_id"]
            request.app[STATE].count(_route(request))
            return {**answer, "model_id": model.model_id}

    return web.json_response(await asyncio.to_thread(run))


# -- service ------------------------------------------------------------------------------------
async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok", "service": "tinker-sim"})


async def capabilities(request: web.Request) -> web.Response:
    return web.json_response({"supported_models": [{"model_name": BASE_MODEL, "trainable": True,
                                                    "sampleable": True, "max_context_length": 1 << 16}]})


async def client_config(request: web.Request) -> web.Response:
    return web.json_response(CLIENT_CONFIG)


async def dynamic_config(request: web.Request) -> web.Response:
    return web.json_response({"refresh_interval_sec": 3600})


async def create_session(request: web.Request) -> web.Response:
    return web.json_response({"type": "create_session", "session_id": request.app[STATE].new_session(),
                              "info_message": "tinker-sim: a local SIMULATOR of Tinker serving the built-in model"})


async def heartbeat(request: web.Request) -> web.Response:
    return web.json_response({"type": "session_heartbeat"})


async def finish(request: web.Request) -> web.Response:
    session = request.app[STATE].sessions.get(request.match_info["session_id"])
    if session is not None:
        session["finished"] = True
    return web.json_response(None)


async def telemetry(request: web.Request) -> web.Response:
    return web.json_response({"status": "accepted"})


# -- training -----------------------------------------------------------------------------------
async def create_model(request: web.Request) -> web.Response:
    body = await _body(request)
    rank = int((body.get("lora_config") or {}).get("rank") or 0)
    model = request.app[STATE].create_model(str(body.get("session_id")), int(body.get("model_seq_id", 0)),
                                            str(body.get("base_model")), rank)
    return web.json_response(_queued(request, {"model_id": model.model_id, "type": "create_model"},
                                     extra={"model_id": model.model_id}))


async def get_info(request: web.Request) -> web.Response:
    model = request.app[STATE].model(str((await _body(request)).get("model_id")))
    return web.json_response({"type": "get_info", "model_id": model.model_id, "is_lora": True,
                              "lora_rank": model.rank, "model_name": model.base_model,
                              "model_data": {"arch": "rl_daytona.builtin", "model_name": model.base_model,
                                             "tokenizer_id": BASE_MODEL}})


async def forward_backward(request: web.Request) -> web.Response:
    call = wire.decode_forward_backward(await request.read(), request.headers.get("Content-Encoding", ""))
    if call.forward_only:
        raise TrainingError("tinker-sim does not serve forward-only calls")
    model = request.app[STATE].model(call.model_id)

    def apply() -> dict[str, Any]:
        out = model.trainer.forward_backward(call.datums, call.loss_fn, call.loss_fn_config or None)
        logprobs = [o["logprobs"]["data"] for o in out["loss_fn_outputs"]]
        return _queued(request, proto=wire.encode_forward_backward_output(logprobs, out["metrics"]))

    return await _once(request, model, call.seq_id, apply)


async def optim_step(request: web.Request) -> web.Response:
    body = await _body(request)
    model = request.app[STATE].model(str(body.get("model_id")))
    adam = parse_adam(body.get("adam_params"))

    def apply() -> dict[str, Any]:
        out = model.trainer.optim_step(adam)
        return _queued(request, {"metrics": {"grad_norm:mean": out["metrics"]["grad_norm"],
                                             "version:max": float(out["version"])}})

    return await _once(request, model, body.get("seq_id"), apply)


async def save_weights(request: web.Request) -> web.Response:
    body = await _body(request)
    state, model = request.app[STATE], request.app[STATE].model(str(body.get("model_id")))
    path = lambda: state.save(model, "weights", body.get("path"))  # noqa: E731
    return await _once(request, model, body.get("seq_id"),
                       lambda: _queued(request, {"path": path(), "type": "save_weights"}))


async def save_for_sampler(request: web.Request) -> web.Response:
    body = await _body(request)
    state, model = request.app[STATE], request.app[STATE].model(str(body.get("model_id")))

    def apply() -> dict[str, Any]:
        path = state.save(model, "sampler_weights", body.get("path"))
        answer: dict[str, Any] = {"path": path, "type": "save_weights_for_sampler"}
        if body.get("path") is None:  # the SDK asked for a sampling session on these weights
            session = model.model_id.split(":train:")[0]
            sampler = state.create_sampler(session, int(body.get("sampling_session_seq_id") or 0), path, None)
            answer["sampling_session_id"] = sampler.sampler_id
        return _queued(request, answer)

    return await _once(request, model, body.get("seq_id"), apply)


async def load_weights(request: web.Request) -> web.Response:
    body = await _body(request)
    state, path = request.app[STATE], str(body.get("path"))
    loaded = state.load(path)
    if body.get("model_id"):
        model = state.model(str(body["model_id"]))

        def apply() -> dict[str, Any]:
            load_into(model.trainer, loaded, optimizer=bool(body.get("optimizer")))
            return _queued(request, {"path": path, "model_id": model.model_id, "type": "load_weights"})

        return await _once(request, model, body.get("seq_id"), apply)
    model = state.create_model(str(body.get("session_id")), int(body.get("model_seq_id", 0)),
                               str(body.get("base_model") or BASE_MODEL), 0, from_state=loaded,
                               with_adam=bool(body.get("optimizer")))
    return web.json_response(_queued(request, {"path": path, "model_id": model.model_id, "type": "load_weights"},
                                     extra={"model_id": model.model_id}))
