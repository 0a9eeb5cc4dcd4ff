"""A Tinker SamplingClient as the policy: the real SDK's types, the real openai client, a real eval."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
import tinker

from rl_daytona.agent import BASH_TOOL
from rl_daytona.eval import EvalConfig, run_eval
from rl_daytona.policy.chat import encode_prompt
from rl_daytona.policy.model import PolicyModel
from rl_daytona.policy.prior import initial_params
from rl_daytona.policy.tinker_sampler import BuiltinRenderer, SamplerServer, TinkerSamplingService
from rl_daytona.types import Settings
from tests.fakes.tinker_sampling import BuiltinTinkerSamplingClient, FakeSamplerStore

MESSAGES = [{"role": "system", "content": "You fix bugs."},
            {"role": "user", "content": "The tests in test_calc.py fail. Fix calc.py."}]


def _create(client: openai.OpenAI, messages=MESSAGES, **kw):  # type: ignore[no-untyped-def]
    return client.chat.completions.create(model="tinker", messages=messages, tools=[BASH_TOOL], logprobs=True,
                                          extra_body={"return_token_ids": True}, **kw)


@pytest.fixture
def sampler() -> BuiltinTinkerSamplingClient:
    return BuiltinTinkerSamplingClient()


@pytest.fixture
def store() -> FakeSamplerStore:
    return FakeSamplerStore()


@pytest.fixture
def served(sampler: BuiltinTinkerSamplingClient, store: FakeSamplerStore):  # type: ignore[no-untyped-def]
    service = TinkerSamplingService(sampler, BuiltinRenderer(), make_sampling_client=store.create_sampling_client)
    with SamplerServer(service) as server:
        yield server


@pytest.fixture
def client(served: SamplerServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.url, api_key="none", max_retries=0)


def test_the_fake_has_the_real_sdk_signature() -> None:
    real = list(inspect.signature(tinker.SamplingClient.sample).parameters)
    assert list(inspect.signature(BuiltinTinkerSamplingClient.sample).parameters) == real


def test_a_completion_carries_tinkers_tokens_and_logprobs_unchanged(client: openai.OpenAI,
                                                                   sampler: BuiltinTinkerSamplingClient) -> None:
    resp = _create(client, seed=11, temperature=0.7, max_tokens=200)
    call = sampler.calls[-1]
    assert isinstance(call["prompt"], tinker.types.ModelInput)
    assert call["prompt"].to_ints() == encode_prompt(MESSAGES) == resp.model_extra["prompt_token_ids"]
    params = call["sampling_params"]
    assert isinstance(params, tinker.types.SamplingParams)
    assert (params.seed, params.temperature, params.max_tokens, call["num_samples"]) == (11, 0.7, 200, 1)
    # the same request straight to the sampler gives the sequence the endpoint passed through
    direct = sampler.sample(call["prompt"], 1, params).result().sequences[0]
    choice = resp.choices[0]
    assert choice.model_extra["token_ids"] == direct.tokens
    assert [e.logprob for e in choice.logprobs.content] == pytest.approx(direct.logprobs)
    assert choice.message.tool_calls and json.loads(choice.message.tool_calls[0].function.arguments)["command"]
    assert resp.system_fingerprint == "builtin-v0"


def test_several_samples_in_one_request(client: openai.OpenAI) -> None:
    resp = _create(client, seed=3, n=4)
    assert len(resp.choices) == 4 and all(c.model_extra["token_ids"] for c in resp.choices)


def test_a_tool_call_comes_back_as_the_same_prompt_tokens(client: openai.OpenAI,
                                                          sampler: BuiltinTinkerSamplingClient) -> None:
    """Prefix stability through the adapter: turn 2's prompt is turn 1's prompt + completion."""
    first = _create(client, seed=5)
    call = first.choices[0].message.tool_calls[0]
    messages = [*MESSAGES, {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                {"role": "tool", "tool_call_id": call.id, "content": "1 failed\n[exit code 1]"}]
    second = _create(client, messages, seed=6)
    p1, c1 = first.model_extra["prompt_token_ids"], first.choices[0].model_extra["token_ids"]
    assert second.model_extra["prompt_token_ids"][: len(p1) + len(c1)] == p1 + c1


def test_a_failing_sample_is_a_one_line_502_and_the_endpoint_stays_up(served: SamplerServer,
                                                                      client: openai.OpenAI) -> None:
    good = served.service.sampling_client
    served.service.use(BuiltinTinkerSamplingClient(fail=tinker.APIConnectionError(
        request=httpx.Request("POST", "https://tinker.example/api/v1/sample"))), 0)
    with pytest.raises(openai.APIStatusError) as info:
        _create(client, seed=1)
    assert info.value.status_code == 502
    message = info.value.body["message"]
    assert message.startswith("tinker sample failed: APIConnectionError") and "\n" not in message
    served.service.use(good, 0)
    assert _create(client, seed=1).choices[0].model_extra["token_ids"]


def test_a_malformed_sequence_is_a_502_not_a_wrong_trajectory(served: SamplerServer, client: openai.OpenAI) -> None:
    served.service.use(BuiltinTinkerSamplingClient(truncate_logprobs=True), 0)
    with pytest.raises(openai.APIStatusError, match="logprobs for") as info:
        _create(client, seed=1)
    assert info.value.status_code == 502


def _direct(client: BuiltinTinkerSamplingClient, seed: int) -> list[int]:
    params = tinker.types.SamplingParams(max_tokens=256, temperature=1.0, seed=seed)
    return client.sample(tinker.types.ModelInput.from_ints(encode_prompt(MESSAGES)), 1, params).result().sequences[0].tokens


def test_swapping_sampler_weights_by_path_changes_policy_and_version(served: SamplerServer, client: openai.OpenAI,
                                                                     store: FakeSamplerStore,
                                                                     sampler: BuiltinTinkerSamplingClient) -> None:
    params = initial_params()
    params["verb_w"] = params["verb_w"] * 0  # a different policy: verbs no longer prefer anything
    store.save("tinker://run-1/sampler_weights/step-1", PolicyModel(params))
    r = httpx.post(f"{served.url}/sampler", json={"model_path": "tinker://run-1/sampler_weights/step-1", "version": 1})
    assert r.status_code == 200 and r.json()["version"] == 1
    assert store.opened == ["tinker://run-1/sampler_weights/step-1"]
    assert httpx.get(served.url.removesuffix("/v1") + "/health").json()["model_path"].endswith("step-1")
    new = BuiltinTinkerSamplingClient(store.weights["tinker://run-1/sampler_weights/step-1"])
    seeds = range(8)
    served_ids = []
    for seed in seeds:
        resp = _create(client, seed=seed, temperature=1.0, max_tokens=256)
        assert resp.system_fingerprint == "builtin-v1"
        served_ids.append(resp.choices[0].model_extra["token_ids"])
    assert served_ids == [_direct(new, s) for s in seeds], "the new weights answer"
    assert served_ids != [_direct(sampler, s) for s in seeds], "not the old ones"


@pytest.mark.parametrize("body,status,fragment", [
    ({"model_path": "tinker://nowhere", "version": 2}, 502, "create_sampling_client"),
    ({"model_path": "", "version": 2}, 400, "needs"),
    ({"model_path": "tinker://x", "version": "2"}, 400, "needs"),
    ([1, 2], 400, "bad sampler swap"),
])
def test_a_bad_swap_is_refused_and_the_old_weights_keep_serving(served: SamplerServer, client: openai.OpenAI,
                                                                body: object, status: int, fragment: str) -> None:
    r = httpx.post(f"{served.url}/sampler", json=body)
    assert r.status_code == status and fragment in r.json()["error"]["message"]
    assert _create(client, seed=2).system_fingerprint == "builtin-v0"


@pytest.mark.usefixtures("ray_session")
def test_an_eval_runs_through_a_tinker_sampling_client(tmp_path: Path, served: SamplerServer,
                                                       sampler: BuiltinTinkerSamplingClient) -> None:
    """The agent loop, unchanged, drives real sandboxes with Tinker as its policy."""
    summary = run_eval(EvalConfig(out=tmp_path / "run", taskset="calc", split="heldout", group=1, max_concurrent=8,
                                  policy=served.url, settings=Settings(max_turns=3)))
    assert summary["counts_by_status"] == {"ok": summary["rollouts"]} and summary["rollouts"] >= 8
    records = [json.loads(line) for line in (tmp_path / "run" / "rollouts.jsonl").read_text().splitlines()]
    assert len(sampler.calls) >= summary["rollouts"]
    for record in records:
        traj = record["trajectory"]
        sampled = [lp for lp, m in zip(traj["logprobs"], traj["loss_mask"]) if m]
        assert sampled and all(np.isfinite(sampled)) and all(lp <= 0 for lp in sampled)


def test_the_train_loop_hears_a_refused_swap_as_one_line(served: SamplerServer) -> None:
    """`train._use_sampler` is how a step hands its weights to the sampler; a refusal (unknown
    path, dead endpoint) comes back as one line and the run stops on it."""
    import asyncio

    from rl_daytona.train import _use_sampler

    refused = asyncio.run(_use_sampler(served.url, "tinker://nowhere/step-1", 1))
    assert refused.startswith("the sampler did not take the new weights tinker://nowhere/step-1: tinker "
                              "create_sampling_client") and "\n" not in refused
    dead = asyncio.run(_use_sampler("http://127.0.0.1:9/v1", "tinker://x", 1))
    assert "did not take" in dead and "Client" in dead and "\n" not in dead
    assert served.service.version == 0


def test_resume_is_refused_with_a_custom_sampler(tmp_path: Path) -> None:
    from rl_daytona.train import TrainConfig, run_train

    with pytest.raises(ValueError, match="--resume restarts the built-in model service"):
        run_train(TrainConfig(out=tmp_path / "r", resume=tmp_path, policy_server=lambda: None))
