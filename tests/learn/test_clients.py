"""Training clients: LocalTrainingClient against the real built-in server (a child process),
TinkerTrainingClient against a fake SDK training client that returns the real `tinker.types`."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import inspect
import json
import socket
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import httpx
import numpy as np
import openai
import pytest
import tinker
from tinker import types

from rl_daytona.agent import BASH_TOOL, TokenTrajectory, _policy_version
from rl_daytona.learn.clients import (
    AdamParams,
    LocalTrainingClient,
    TinkerTrainingClient,
    TrainingCallError,
    TrainingClient,
    make_training_client,
    to_tinker_datum,
)
from rl_daytona.learn.datum import Datum
from rl_daytona.learn.groups import group_datums, request_bytes
from rl_daytona.policy import vocab as V
from rl_daytona.policy.launch import BuiltinServer, start_builtin_server
from rl_daytona.policy.model import PolicyModel
from rl_daytona.policy.training import Trainer, parse_adam, parse_datum
from rl_daytona.types import Trajectory
from tests.fakes.tinker_sampling import _done
from tests.learn.builders import rollout_of
from tests.policy.transcripts import CalcShell, Chat

ADAM = AdamParams(learning_rate=0.05)


@pytest.fixture(scope="module")
def server() -> Iterator[BuiltinServer]:
    handle = start_builtin_server()
    yield handle
    handle.close()
    assert handle.process.poll() is not None


@pytest.fixture(scope="module")
def chat_client(server: BuiltinServer) -> Iterator[openai.OpenAI]:
    c = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0)
    yield c
    c.close()


def _create(client: openai.OpenAI, messages: list[dict[str, Any]], seed: int) -> Any:
    return client.chat.completions.create(model="builtin", messages=messages, tools=[BASH_TOOL], logprobs=True,
                                          seed=seed, extra_body={"return_token_ids": True})


def _attempt(client: openai.OpenAI, shell: CalcShell | None, turns: int, seed: int) -> Trajectory:
    """One attempt driven through the server exactly as the agent loop drives it."""
    messages = Chat().messages
    tokens, version, finish = TokenTrajectory(), 0, "max_turns"
    for turn in range(turns):
        resp = _create(client, messages, seed * 100 + turn)
        choice = resp.choices[0]
        tokens.add_turn(resp.model_extra["prompt_token_ids"], choice.model_extra["token_ids"],
                        [c.logprob for c in choice.logprobs.content])
        version = version or _policy_version(resp)
        if not choice.message.tool_calls or shell is None:
            messages.append({"role": "assistant", "content": choice.message.content or ""})
            finish = "stop"
            break
        call = choice.message.tool_calls[0]
        messages.append({"role": "assistant", "content": choice.message.content, "tool_calls": [
            {"id": call.id, "type": "function",
             "function": {"name": call.function.name, "arguments": call.function.arguments}}]})
        output = shell.run(json.loads(call.function.arguments)["command"])
        messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    return Trajectory(token_ids=tuple(tokens.token_ids), logprobs=tuple(tokens.logprobs),
                      loss_mask=tuple(tokens.loss_mask), messages=tuple(messages), turns=turn + 1,
                      finish_reason=finish, policy_version=version)


@pytest.fixture(scope="module")
def served_group(chat_client: openai.OpenAI, tmp_path_factory: pytest.TempPathFactory) -> list[Datum]:
    """A mixed group of four attempts sampled by the server's untrained weights (two multi-turn)."""
    root = tmp_path_factory.mktemp("served")
    trajectories = [_attempt(chat_client, CalcShell(root / "a", 8), 2, 1),
                    _attempt(chat_client, CalcShell(root / "b", 19), 2, 2),
                    _attempt(chat_client, None, 1, 3), _attempt(chat_client, None, 1, 4)]
    assert all(t.policy_version == 0 for t in trajectories) and trajectories[0].turns == 2
    members = [rollout_of(t, "served", i, r) for i, (t, r) in enumerate(zip(trajectories, [1.0, 0.0, 0.0, 1.0]))]
    return group_datums(members)


def _info(server: BuiltinServer) -> dict[str, Any]:
    with urllib.request.urlopen(server.url + "/train/info", timeout=30) as resp:
        return json.loads(resp.read())


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert text and "\n" not in text, repr(text)
    return text


def test_the_local_client_implements_the_protocol() -> None:
    assert isinstance(LocalTrainingClient("http://127.0.0.1:1"), TrainingClient)
    assert LocalTrainingClient("http://127.0.0.1:1/").base_url == "http://127.0.0.1:1/v1"
    assert isinstance(make_training_client("local", base_url="http://x/v1"), LocalTrainingClient)
    with pytest.raises(ValueError, match="base-model"):
        make_training_client("tinker", base_url="")
    with pytest.raises(ValueError, match="unknown training client"):
        make_training_client("remote", base_url="")


def test_a_step_over_http_trains_the_served_weights(server: BuiltinServer, chat_client: openai.OpenAI,
                                                    served_group: list[Datum]) -> None:
    assert _info(server)["version"] == 0

    async def step() -> tuple[Any, Any]:
        client = LocalTrainingClient(server.url)
        try:
            fb = await client.forward_backward(served_group)
            pending = _info(server)["pending_datums"]
            stepped = await client.optim_step(ADAM)
            return fb, (pending, stepped)
        finally:
            await client.close()

    fb, (pending, stepped) = asyncio.run(step())
    # the same datums on a local copy of the untrained weights: the same loss, then the same step
    local = Trainer(PolicyModel())
    parsed = [parse_datum(d.to_wire(), i) for i, d in enumerate(served_group)]
    expected = local.forward_backward(parsed, "importance_sampling")["metrics"]
    assert fb.loss == pytest.approx(expected["loss:sum"], rel=1e-9, abs=1e-9)
    assert fb.tokens == int(expected["tokens:sum"]) == sum(1 for d in served_group for a in d.advantages if a)
    assert fb.datums == len(served_group) == pending == 4
    assert sum(d.nbytes for d in served_group) < fb.bytes_sent <= request_bytes(served_group)
    assert stepped.version == 1 and stepped.metrics["grad_norm"] > 0
    local.optim_step(parse_adam(ADAM.to_wire()))

    # the next completion reports the new version the way the agent reads it, and samples the new weights
    resp = _create(chat_client, Chat().messages, seed=77)
    assert resp.system_fingerprint == "builtin-v1" and _policy_version(resp) == 1
    prompt, ids = resp.model_extra["prompt_token_ids"], resp.choices[0].model_extra["token_ids"]
    served = [c.logprob for c in resp.choices[0].logprobs.content]
    seq, mask = prompt + ids, [0] * len(prompt) + [1] * len(ids)
    np.testing.assert_allclose(local.model.sequence_logprobs(seq, mask)[len(prompt):], served, rtol=0, atol=1e-9)
    info = _info(server)
    assert info == {"version": 1, "pending_datums": 0, "loss_fns": ["importance_sampling", "ppo"],
                    "calls": {"forward_backward_applied": 1, "forward_backward_replayed": 0, "datums_applied": 4,
                              "optim_steps_applied": 1, "optim_steps_replayed": 0}}


def _call(server_url: str, what: str, *args: Any) -> Any:
    async def go() -> Any:
        client = LocalTrainingClient(server_url)
        try:
            return await getattr(client, what)(*args)
        finally:
            await client.close()
    return asyncio.run(go())


def test_a_refused_request_is_a_one_line_training_call_error(server: BuiltinServer,
                                                             served_group: list[Datum]) -> None:
    before = _info(server)
    d = served_group[0]
    shifted = dataclasses.replace(d, target_tokens=d.target_tokens[1:] + d.target_tokens[:1])
    with pytest.raises(TrainingCallError) as info:
        _call(server.url, "forward_backward", [shifted])
    assert _one_line(info.value).startswith("forward_backward: HTTP 400: datum 0: target_tokens is not")
    with pytest.raises(TrainingCallError, match="HTTP 400: unknown loss_fn 'cross_entropy'"):
        _call(server.url, "forward_backward", [d], "cross_entropy")
    with pytest.raises(TrainingCallError, match="optim_step: HTTP 400: .*no accumulated gradient") as info:
        _call(server.url, "optim_step", ADAM)
    _one_line(info.value)
    with pytest.raises(TrainingCallError, match="optim_step: HTTP 400: adam_params"):
        _call(server.url, "optim_step", AdamParams(learning_rate=-1.0))
    with pytest.raises(TrainingCallError, match="load: HTTP 400: cannot load policy state"):
        _call(server.url, "load_state", "/nonexistent/policy")
    assert _info(server) == before, "a refused call changes nothing on the service"


def test_a_datum_the_model_cannot_score_is_a_400_not_a_server_error(server: BuiltinServer,
                                                                    served_group: list[Datum]) -> None:
    """BUG (training.Trainer.forward_backward, seen over HTTP): a datum whose sampled span holds
    a token the grammar cannot produce there raises a plain ValueError inside the model, which
    the server's `_train_call` does not map to TrainingError, so the answer is HTTP 500
    "internal error: ValueError: ..." (a server fault clients retry) instead of the 400 a bad
    datum gets; the datums before it have already been added to the gradient."""
    d = served_group[2]
    first_sampled = next(i for i, a in enumerate(d.advantages) if a)
    targets = list(d.target_tokens)
    targets[first_sampled] = V.BYTE_OFFSET + ord("x")
    inputs = list(d.model_input)
    inputs[first_sampled + 1] = targets[first_sampled]
    bad = dataclasses.replace(d, model_input=tuple(inputs), target_tokens=tuple(targets))
    before = _info(server)
    with pytest.raises(TrainingCallError) as info:
        _call(server.url, "forward_backward", [served_group[0], bad])
    assert "HTTP 400" in _one_line(info.value), str(info.value)
    assert _info(server) == before


def test_an_unreachable_service_is_a_training_call_error(served_group: list[Datum]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    with pytest.raises(TrainingCallError, match="forward_backward: cannot reach") as info:
        _call(url, "forward_backward", served_group)
    _one_line(info.value)
    with pytest.raises(TrainingCallError, match="optim_step: cannot reach"):
        _call(url, "optim_step", ADAM)


def test_save_and_load_over_http(server: BuiltinServer, chat_client: openai.OpenAI, tmp_path: Path,
                                 served_group: list[Datum]) -> None:
    version = _info(server)["version"]
    path = _call(server.url, "save_state", str(tmp_path / "ckpt"))
    assert path == str(tmp_path / "ckpt") and (tmp_path / "ckpt.npz").exists()
    assert json.loads((tmp_path / "ckpt.json").read_text())["version"] == version

    async def step() -> int:
        client = LocalTrainingClient(server.url)
        try:
            await client.forward_backward(served_group)
            return (await client.optim_step(ADAM)).version
        finally:
            await client.close()

    assert asyncio.run(step()) == version + 1
    assert _policy_version(_create(chat_client, Chat().messages, seed=5)) == version + 1
    assert _call(server.url, "load_state", str(tmp_path / "ckpt")) == version
    assert _info(server)["version"] == version
    assert _create(chat_client, Chat().messages, seed=5).system_fingerprint == f"builtin-v{version}"


# -- Tinker --------------------------------------------------------------------------------

class FakeSdkTrainingClient:
    """The SDK TrainingClient's four calls (same signatures), recorded; futures give real types."""

    def __init__(self, fail: dict[str, BaseException] | None = None, raise_on_call: bool = False) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail = fail or {}
        self.raise_on_call = raise_on_call

    def _reply(self, what: str, value: Any) -> concurrent.futures.Future:
        if what in self.fail:
            if self.raise_on_call:
                raise self.fail[what]
            return _done(error=self.fail[what])
        return _done(value)

    def forward_backward(self, data: list[types.Datum], loss_fn: types.LossFnType,
                         loss_fn_config: Any = None) -> concurrent.futures.Future:
        self.calls.append(("forward_backward", {"data": data, "loss_fn": loss_fn, "loss_fn_config": loss_fn_config}))
        outputs = [{"logprobs": types.TensorData(data=[-0.5] * d.model_input.length, dtype="float32",
                                                 shape=[d.model_input.length])} for d in data]
        return self._reply("forward_backward", types.ForwardBackwardOutput(
            loss_fn_output_type="ArrayRecord", loss_fn_outputs=outputs,
            metrics={"loss:sum": -2.5, "clipped:sum": 0.0}))

    def optim_step(self, optim_params: Any = None, *, adam_params: Any = None) -> concurrent.futures.Future:
        self.calls.append(("optim_step", {"optim_params": optim_params, "adam_params": adam_params}))
        return self._reply("optim_step", types.OptimStepResponse(metrics={"grad_norm": 0.25}))

    def save_state(self, name: str, ttl_seconds: int | None = None, overwrite: bool = False,
                   user_metadata: dict[str, str] | None = None) -> concurrent.futures.Future:
        self.calls.append(("save_state", {"name": name}))
        return self._reply("save_state", types.SaveWeightsResponse(path=f"tinker://run-1/weights/{name}"))

    def load_state(self, path: str, weights_access_token: str | None = None) -> concurrent.futures.Future:
        self.calls.append(("load_state", {"path": path}))
        return self._reply("load_state", types.LoadWeightsResponse(path=path))

    def save_weights_for_sampler(self, name: str, ttl_seconds: int | None = None,
                                 user_metadata: dict[str, str] | None = None) -> concurrent.futures.Future:
        self.calls.append(("save_weights_for_sampler", {"name": name}))
        return self._reply("save_weights_for_sampler",
                           types.SaveWeightsForSamplerResponse(path=f"tinker://run-1/sampler_weights/{name}"))


def test_the_fake_has_the_real_sdk_signatures() -> None:
    for name in ("forward_backward", "optim_step", "save_state", "load_state", "save_weights_for_sampler"):
        real = list(inspect.signature(getattr(tinker.TrainingClient, name)).parameters)
        assert list(inspect.signature(getattr(FakeSdkTrainingClient, name)).parameters) == real, name


def test_to_tinker_datum_is_a_real_sdk_datum(trajectories: list[Trajectory]) -> None:
    members = [rollout_of(t, "g", i, float(i % 2)) for i, t in enumerate(trajectories)]
    for d in group_datums(members):
        t = to_tinker_datum(d)
        assert isinstance(t, types.Datum) and isinstance(t.model_input, types.ModelInput)
        assert t.model_input.to_ints() == list(d.model_input) and t.model_input.length == len(d.model_input)
        assert set(t.loss_fn_inputs) == {"target_tokens", "logprobs", "advantages"}
        n = len(d.target_tokens)
        for key, expected, dtype in (("target_tokens", d.target_tokens, "int64"), ("logprobs", d.logprobs, "float32"),
                                     ("advantages", d.advantages, "float32")):
            tensor = t.loss_fn_inputs[key]
            assert isinstance(tensor, types.TensorData)
            # the SDK holds float inputs as float32 (its wire dtype); token ids stay exact int64
            assert tensor.tolist() == np.asarray(expected, dtype=dtype).tolist()
            assert tensor.dtype == dtype and tensor.shape == [n]
        assert t.loss_fn_inputs["target_tokens"].tolist() == list(d.target_tokens)


def test_the_tinker_adapter_sends_sdk_types(trajectories: list[Trajectory]) -> None:
    members = [rollout_of(t, "g", i, r) for i, (t, r) in enumerate(zip(trajectories, [1.0, 0.0, 0.0]))]
    datums = group_datums(members)
    fake = FakeSdkTrainingClient()
    client = TinkerTrainingClient(fake)
    assert isinstance(client, TrainingClient)

    async def go() -> tuple[Any, ...]:
        fb = await client.forward_backward(datums)
        first = await client.optim_step(AdamParams(learning_rate=0.2, beta1=0.8, beta2=0.9, eps=1e-8,
                                                   weight_decay=0.01))
        second = await client.optim_step(AdamParams())
        saved = await client.save_state("step2")
        loaded = await client.load_state(saved)
        await client.close()
        return fb, first, second, saved, loaded

    fb, first, second, saved, loaded = asyncio.run(go())
    (name, call), *rest = fake.calls
    assert name == "forward_backward" and call["loss_fn"] == "importance_sampling" and call["loss_fn_config"] is None
    assert isinstance(call["data"], list) and all(isinstance(x, types.Datum) for x in call["data"])
    assert [x.model_input.to_ints() for x in call["data"]] == [list(d.model_input) for d in datums]
    assert [x.loss_fn_inputs["advantages"].tolist() for x in call["data"]] == [
        np.asarray(d.advantages, dtype=np.float32).tolist() for d in datums]
    assert [x.loss_fn_inputs["target_tokens"].tolist() for x in call["data"]] == [list(d.target_tokens) for d in datums]
    assert fb.loss == -2.5 and fb.datums == 3 and fb.bytes_sent == sum(d.nbytes for d in datums)
    assert fb.tokens == sum(1 for d in datums for a in d.advantages if a != 0.0)
    assert [n for n, _ in rest] == ["optim_step", "save_weights_for_sampler", "optim_step", "save_weights_for_sampler",
                                    "save_state", "load_state"]
    params = rest[0][1]["optim_params"] or rest[0][1]["adam_params"]
    assert isinstance(params, types.AdamParams)
    assert (params.learning_rate, params.beta1, params.beta2, params.eps, params.weight_decay) == (0.2, 0.8, 0.9,
                                                                                                 1e-8, 0.01)
    assert (first.version, second.version) == (1, 2) and first.metrics == {"grad_norm": 0.25}
    assert (first.sampler_path, second.sampler_path) == ("tinker://run-1/sampler_weights/step-000001",
                                                         "tinker://run-1/sampler_weights/step-000002")
    assert saved == "tinker://run-1/weights/step2" and loaded == 2
    assert rest[5][1] == {"path": saved}


def test_a_failed_sampler_save_is_retried_without_stepping_twice() -> None:
    """The step landed but its weights were not saved for sampling: the retry only saves."""
    fake = FakeSdkTrainingClient(fail={"save_weights_for_sampler": tinker.APIConnectionError(request=_request())})
    client = TinkerTrainingClient(fake)
    with pytest.raises(TrainingCallError, match="tinker save_weights_for_sampler failed"):
        asyncio.run(client.optim_step(ADAM))
    fake.fail.clear()
    result = asyncio.run(client.optim_step(ADAM))
    assert [n for n, _ in fake.calls] == ["optim_step", "save_weights_for_sampler", "save_weights_for_sampler"]
    assert result.version == 1 and result.metrics == {"grad_norm": 0.25}
    assert result.sampler_path.endswith("step-000001")
    assert asyncio.run(client.optim_step(ADAM)).version == 2


def test_the_tinker_adapter_passes_the_ppo_loss_and_its_config(trajectories: list[Trajectory]) -> None:
    datums = group_datums([rollout_of(trajectories[0], "g", 0, 1.0), rollout_of(trajectories[1], "g", 1, 0.0)])
    fake = FakeSdkTrainingClient()
    config = {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}
    asyncio.run(TinkerTrainingClient(fake).forward_backward(datums, "ppo", config))
    assert fake.calls[0][1]["loss_fn"] == "ppo" and fake.calls[0][1]["loss_fn_config"] == config


def _request() -> httpx.Request:
    return httpx.Request("POST", "https://tinker.example/api/v1/forward_backward")


@pytest.mark.parametrize("error, raise_on_call", [
    (tinker.RequestFailedError("datum 3 has 10 target tokens for 9 inputs", "req-17",
                               types.RequestErrorCategory.User), False),
    (tinker.APIConnectionError(request=_request()), True),
    (tinker.APITimeoutError(request=_request()), False),
    (RuntimeError("event loop closed"), False),
])
def test_sdk_failures_become_one_line_training_call_errors(trajectories: list[Trajectory], error: BaseException,
                                                           raise_on_call: bool) -> None:
    datums = group_datums([rollout_of(trajectories[0], "g", 0, 1.0), rollout_of(trajectories[1], "g", 1, 0.0)])
    fake = FakeSdkTrainingClient(fail={"forward_backward": error, "optim_step": error}, raise_on_call=raise_on_call)
    client = TinkerTrainingClient(fake)
    with pytest.raises(TrainingCallError, match=f"tinker forward_backward failed: {type(error).__name__}") as info:
        asyncio.run(client.forward_backward(datums))
    _one_line(info.value)
    with pytest.raises(TrainingCallError, match="tinker optim_step failed"):
        asyncio.run(client.optim_step(ADAM))
    assert client._version == 0, "a failed optim_step does not count as a step"
    assert asyncio.run(client.save_state("x")) == "tinker://run-1/weights/x"


def test_an_sdk_error_with_a_multi_line_message_is_still_one_line(trajectories: list[Trajectory]) -> None:
    """BUG (clients.TinkerTrainingClient._call): the message is `str(exc)[:200]` verbatim. The SDK
    builds a status error from a non-JSON response body as the raw body text (tinker/_base_client.py:
    `err_msg = err_text`), so a gateway's HTML error page gives a multi-line TrainingCallError, and
    the CLI's "one line saying what failed" becomes several. Fix: collapse whitespace, e.g.
    `" ".join(str(exc).split())[:200]`."""
    html = "<html>\n<head><title>502 Bad Gateway</title></head>\n<body>nginx</body>\n</html>"
    response = httpx.Response(502, text=html, request=_request())
    error = tinker.InternalServerError(html, response=response, body=html)
    datums = group_datums([rollout_of(trajectories[0], "g", 0, 1.0), rollout_of(trajectories[1], "g", 1, 0.0)])
    client = TinkerTrainingClient(FakeSdkTrainingClient(fail={"forward_backward": error}))
    with pytest.raises(TrainingCallError, match="InternalServerError") as info:
        asyncio.run(client.forward_backward(datums))
    _one_line(info.value)


# -- a retried call is applied once ---------------------------------------------------------

async def _lossy_proxy(upstream: str, lose: dict[str, int]) -> tuple[Any, str]:
    """A proxy to the service's training routes that forwards each call and then, `lose[route]`
    times, drops the connection instead of answering: the service did the work, the answer is lost."""
    import aiohttp
    from aiohttp import web

    async def handle(request: web.Request) -> web.StreamResponse:
        route = request.match_info["route"]
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{upstream}/train/{route}", data=await request.read(),
                                    headers={"Content-Type": "application/json"}) as resp:
                body, status = await resp.read(), resp.status
        if lose.get(route, 0) > 0:
            lose[route] -= 1
            assert request.transport is not None
            request.transport.abort()
            return web.Response(status=204)
        return web.Response(body=body, status=status, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/train/{route}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/v1"


def test_a_call_whose_answer_was_lost_is_applied_once_when_retried(served_group: list[Datum]) -> None:
    fresh = start_builtin_server()
    try:
        async def go() -> tuple[Any, ...]:
            runner, url = await _lossy_proxy(fresh.url, {"forward_backward": 1, "optim_step": 1})
            client = LocalTrainingClient(url, timeout=30)
            try:
                with pytest.raises(TrainingCallError, match="forward_backward: cannot reach"):
                    await client.forward_backward(served_group)
                after_lost = _info(fresh)["pending_datums"]
                retried = await client.forward_backward(served_group)  # what the Learner's retry sends
                after_retry = _info(fresh)["pending_datums"]
                with pytest.raises(TrainingCallError, match="optim_step: cannot reach"):
                    await client.optim_step(ADAM)
                version_after_lost = _info(fresh)["version"]
                stepped = await client.optim_step(ADAM)
                version_after_retry = _info(fresh)["version"]
                # the next step's calls are new calls, applied as usual
                await client.forward_backward(served_group)
                second = await client.optim_step(ADAM)
                return after_lost, retried, after_retry, version_after_lost, stepped, version_after_retry, second
            finally:
                await client.close()
                await runner.cleanup()

        after_lost, retried, after_retry, version_lost, stepped, version_retry, second = asyncio.run(go())
    finally:
        fresh.close()
    n = len(served_group)
    assert after_lost == n, "the lost call was applied by the service"
    assert after_retry == n, "its retry added nothing"
    assert retried.loss != 0.0 and retried.datums == n
    assert version_lost == 1 and stepped.version == 1 and version_retry == 1, "one step, not two"
    assert second.version == 2


def test_a_request_id_repeated_at_the_trainer_is_answered_from_memory(served_group: list[Datum]) -> None:
    trainer = Trainer(PolicyModel())
    parsed = [parse_datum(d.to_wire(), i) for i, d in enumerate(served_group)]
    first = trainer.forward_backward(parsed, "importance_sampling", None, "c:0:abc")
    grads = {k: v.copy() for k, v in trainer.grads.items()}
    again = trainer.forward_backward(parsed, "importance_sampling", None, "c:0:abc")
    assert again["replayed"] and again["metrics"] == first["metrics"]
    assert trainer.pending_datums == len(parsed)
    assert all((trainer.grads[k] == grads[k]).all() for k in grads)
    trainer.forward_backward(parsed, "importance_sampling", None, None)  # no id: always applied
    assert trainer.pending_datums == 2 * len(parsed)
    step = trainer.optim_step(parse_adam({"learning_rate": 0.05}), "c:step:0")
    assert trainer.optim_step(parse_adam({"learning_rate": 0.05}), "c:step:0") == {**step, "replayed": True}
    assert trainer.model.version == 1
    with pytest.raises(Exception, match="without forward_backward"):
        trainer.optim_step(parse_adam({"learning_rate": 0.05}), "c:step:1")


def test_two_chunks_holding_the_same_datums_are_both_applied(served_group: list[Datum]) -> None:
    """BUG (clients.LocalTrainingClient): a chunk's idempotency key was the hash of its content
    within the step, so a second chunk that happened to hold the same datums (two groups of one
    task whose attempts came out alike) was taken for a retry of the first: the service
    answered it from memory and its gradient was never added. The key now also carries the
    chunk's ordinal among the step's answered chunks."""
    fresh = start_builtin_server()
    try:
        async def go() -> None:
            client = LocalTrainingClient(fresh.url)
            try:
                await client.forward_backward(served_group)
                await client.forward_backward(served_group)
            finally:
                await client.close()

        asyncio.run(go())
        info = _info(fresh)
    finally:
        fresh.close()
    assert info["pending_datums"] == 2 * len(served_group)
    assert info["calls"]["forward_backward_applied"] == 2 and info["calls"]["forward_backward_replayed"] == 0


def test_a_refused_request_is_not_worth_repeating_but_a_server_fault_is() -> None:
    async def status(code: int) -> TrainingCallError:
        from aiohttp import web

        async def refuse(request: web.Request) -> web.Response:
            return web.json_response({"error": {"message": "no"}}, status=code)

        app = web.Application()
        app.router.add_post("/v1/train/{route}", refuse)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        client = LocalTrainingClient(f"http://127.0.0.1:{runner.addresses[0][1]}/v1")
        try:
            await client.optim_step(ADAM)
        except TrainingCallError as exc:
            return exc
        finally:
            await client.close()
            await runner.cleanup()
        raise AssertionError("no error")

    assert {code: asyncio.run(status(code)).retryable for code in (400, 404, 408, 429, 500, 503)} == {
        400: False, 404: False, 408: True, 429: True, 500: True, 503: True}
