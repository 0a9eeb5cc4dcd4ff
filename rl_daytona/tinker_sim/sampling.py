"""tinker-sim's sampling routes and future retrieval.

    create_sampling_session {session_id, sampling_session_seq_id, model_path | base_model}
    GET samplers/{id}       {sampler_id, base_model, model_path}
    asample                 {sampling_session_id, seq_id, prompt, sampling_params, num_samples}
    retrieve_future         {request_id} -> the result, try_again, or {"error": ...}

Invariant: a sample is drawn by the built-in model from the weights its sampling session was
opened on (a later optim_step never changes them), with `default_rng([seed, i])` for sample i
when the request has a seed; the same `(sampling_session_id, seq_id)` sent again (a retry)
returns the first draw's future.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from aiohttp import web

from rl_daytona.policy import vocab as V
from rl_daytona.policy.training import TrainingError
from rl_daytona.tinker_sim import wire
from rl_daytona.tinker_sim.routes import FAULTS, NOT_APPLIED, PROTO, STATE, _body, _queued
from rl_daytona.tinker_sim.state import Future, NotFound, Sampler

_SEEDS = np.random.SeedSequence()


async def create_sampling_session(request: web.Request) -> web.Response:
    body = await _body(request)
    sampler = request.app[STATE].create_sampler(str(body.get("session_id")),
                                                int(body.get("sampling_session_seq_id") or 0),
                                                body.get("model_path"), body.get("base_model"))
    return web.json_response({"type": "create_sampling_session", "sampling_session_id": sampler.sampler_id})


async def get_sampler(request: web.Request) -> web.Response:
    sampler = request.app[STATE].sampler(request.match_info["sampler_id"])
    return web.json_response({"sampler_id": sampler.sampler_id, "base_model": sampler.base_model,
                              "model_path": sampler.model_path})


def _prompt(body: dict[str, Any]) -> list[int]:
    tokens: list[int] = []
    for chunk in (body.get("prompt") or {}).get("chunks") or ():
        if not isinstance(chunk, dict) or chunk.get("type", "encoded_text") != "encoded_text":
            raise TrainingError("only encoded_text prompt chunks are supported")
        tokens += list(chunk.get("tokens") or ())
    if not tokens or not all(isinstance(t, int) and 0 <= t < V.VOCAB_SIZE for t in tokens):
        raise TrainingError(f"the prompt must be a non-empty list of built-in token ids (0..{V.VOCAB_SIZE - 1})")
    return tokens


def _draw(sampler: Sampler, prompt: list[int], params: dict[str, Any], n: int) -> list[wire.SampledSeq]:
    seed, out = params.get("seed"), []
    temperature = float(params.get("temperature", 1.0))
    max_tokens = int(params.get("max_tokens") or 64)
    for index in range(n):
        rng = np.random.default_rng([int(seed) & ((1 << 64) - 1), index] if seed is not None else _SEEDS.spawn(1)[0])
        s = sampler.model.sample_detailed(prompt, rng, temperature, max_tokens)
        out.append(wire.SampledSeq(s.token_ids, s.logprobs, "stop" if s.finished else "length"))
    return out


async def asample(request: web.Request) -> web.Response:
    body, state = await _body(request), request.app[STATE]
    if body.get("sampling_session_id"):
        sampler = state.sampler(str(body["sampling_session_id"]))
    else:
        sampler = state.create_sampler(f"direct-{body.get('model_path') or body.get('base_model')}", 0,
                                       body.get("model_path"), body.get("base_model"))
    n, seq = int(body.get("num_samples") or 1), body.get("seq_id")
    if not 1 <= n <= 64:
        raise TrainingError(f"num_samples must be 1..64, got {n}")
    if request.app[FAULTS].take("failed_future", "asample"):  # refused before drawing anything
        request[NOT_APPLIED] = True
        failed = state.add_future(Future(error="the sample failed on the service (injected)"))
        return web.json_response({"request_id": failed, "sample_sequence_ids": [f"{failed}:{i}" for i in range(n)]})
    if seq is not None and seq in sampler.seen:
        state.count("replayed")
        return web.json_response({"request_id": sampler.seen[seq],
                                  "sample_sequence_ids": [f"{sampler.seen[seq]}:{i}" for i in range(n)]})
    sequences = _draw(sampler, _prompt(body), body.get("sampling_params") or {}, n)
    answer = _queued(request, proto=wire.encode_sample_response(sequences))
    if seq is not None:
        sampler.seen[seq] = answer["request_id"]
    state.count("asample")
    return web.json_response({**answer, "sample_sequence_ids": [f"{answer['request_id']}:{i}" for i in range(n)]})


async def retrieve_future(request: web.Request) -> web.Response:
    body = await _body(request)
    try:
        future = request.app[STATE].future(str(body.get("request_id")))
    except NotFound:
        return web.json_response({"detail": f"no future {body.get('request_id')!r} (expired or never made)"},
                                 status=410)
    if future.polls_left > 0:
        future.polls_left -= 1
        return web.json_response({"type": "try_again", "queue_state": "active",
                                  "queue_state_reason": "tinker-sim: a slow future (injected)"})
    if future.error:
        return web.json_response({"error": future.error, "category": future.category})
    if future.proto is not None:
        return web.Response(body=future.proto, content_type=PROTO)
    return web.json_response(future.body)
