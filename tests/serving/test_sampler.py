"""A Tinker SamplingClient as the policy: the real SDK against tinker-sim, the real openai client, a real eval."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import httpx
import numpy as np
import openai
import pytest
import tinker
from tinker import types

from rl_daytona.agent import BASH_TOOL
from rl_daytona.eval import EvalConfig, run_eval
from rl_daytona.policy.chat import encode_prompt
from rl_daytona.renderers.builtin import BuiltinRenderer
from rl_daytona.serving.sampler import SamplerError, SamplerServer, TinkerSamplingService
from rl_daytona.tinker_sim.routes import FAULTS
from rl_daytona.types import Settings
from tests.tinker_sim.conftest import datum_of, prompt_ids, service, sim  # noqa: F401 - fixtures

MESSAGES = [{"role": "system", "content": "You fix bugs."},
            {"role": "user", "content": "The tests in test_calc.py fail. Fix calc.py."}]


def _create(client: openai.OpenAI, messages=MESSAGES, **kw):  # type: ignore[no-untyped-def]
    return client.chat.completions.create(model="tinker", messages=messages, tools=[BASH_TOOL], logprobs=True,
                                          extra_body={"return_token_ids": True}, **kw)


@pytest.fixture
def served(service: tinker.ServiceClient) -> Iterator[SamplerServer]:  # noqa: F811
    base = service.create_sampling_client(base_model="builtin").result(60)
    sampling = TinkerSamplingService(base, BuiltinRenderer(),
                                     make_sampling_client=lambda path: service.create_sampling_client(model_path=path))
    with SamplerServer(sampling) as server:
        yield server


@pytest.fixture
def client(served: SamplerServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.url, api_key="none", max_retries=0)


def _direct(sampling: tinker.SamplingClient, seed: int, temperature: float = 1.0, max_tokens: int = 256) -> types.SampledSequence:
    params = types.SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed)
    return sampling.sample(types.ModelInput.from_ints(encode_prompt(MESSAGES)), 1, params).result(60).sequences[0]


def test_a_completion_carries_tinkers_tokens_and_logprobs_unchanged(client: openai.OpenAI,
                                                                   served: SamplerServer) -> None:
    resp = _create(client, seed=11, temperature=0.7, max_tokens=200)
    assert resp.model_extra["prompt_token_ids"] == encode_prompt(MESSAGES)
    # the same request straight to the SamplingClient gives the sequence the endpoint passed through
    direct = _direct(served.service.sampling_client, 11, 0.7, 200)
    choice = resp.choices[0]
    assert choice.model_extra["token_ids"] == list(direct.tokens)
    assert [e.logprob for e in choice.logprobs.content] == pytest.approx(direct.logprobs, abs=1e-6)
    assert choice.message.tool_calls and json.loads(choice.message.tool_calls[0].function.arguments)["command"]
    assert resp.system_fingerprint == "builtin-v0"


def test_several_samples_in_one_request(client: openai.OpenAI) -> None:
    resp = _create(client, seed=3, n=4)
    assert len(resp.choices) == 4 and all(c.model_extra["token_ids"] for c in resp.choices)


def test_a_tool_call_comes_back_as_the_same_prompt_tokens(client: openai.OpenAI) -> None:
    """Prefix stability through the adapter: turn 2's prompt is turn 1's prompt + completion."""
    first = _create(client, seed=5)
    call = first.choices[0].message.tool_calls[0]
    messages = [*MESSAGES, {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                {"role": "tool", "tool_call_id": call.id, "content": "1 failed\n[exit code 1]"}]
    second = _create(client, messages, seed=6)
    p1, c1 = first.model_extra["prompt_token_ids"], first.choices[0].model_extra["token_ids"]
    assert second.model_extra["prompt_token_ids"][: len(p1) + len(c1)] == p1 + c1


def test_a_failing_sample_is_a_one_line_502_and_the_endpoint_stays_up(sim, client: openai.OpenAI) -> None:  # noqa: F811
    faults = sim.app[FAULTS]
    faults.routes, faults.failed_future = ("asample",), 1
    with pytest.raises(openai.APIStatusError) as info:
        _create(client, seed=1)
    assert info.value.status_code == 502
    message = info.value.body["message"]
    assert message.startswith("tinker sample failed: RequestFailedError") and "\n" not in message
    assert _create(client, seed=1).choices[0].model_extra["token_ids"]


def test_a_malformed_sequence_is_refused_not_a_wrong_trajectory() -> None:
    with pytest.raises(SamplerError, match="1 logprobs for 2 tokens"):
        BuiltinRenderer().choice([1, 2], [-0.1], "stop")


def test_swapping_sampler_weights_by_path_changes_policy_and_version(served: SamplerServer, client: openai.OpenAI,
                                                                     service: tinker.ServiceClient) -> None:  # noqa: F811
    training = service.create_lora_training_client(base_model="builtin", rank=8).result(60)
    drawn = _direct(served.service.sampling_client, 0)
    datum = datum_of(encode_prompt(MESSAGES), list(drawn.tokens), list(drawn.logprobs), -1.0)
    training.forward_backward([datum], "importance_sampling").result(60)
    training.optim_step(types.AdamParams(learning_rate=0.5)).result(60)
    path = training.save_weights_for_sampler("step-1").result(60).path
    old = served.service.sampling_client
    r = httpx.post(f"{served.url}/sampler", json={"model_path": path, "version": 1}, timeout=60)
    assert r.status_code == 200 and r.json()["version"] == 1
    assert httpx.get(served.url.removesuffix("/v1") + "/health").json()["model_path"] == path
    new = service.create_sampling_client(model_path=path).result(60)
    served_lps = []
    for seed in range(4):
        resp = _create(client, seed=seed, temperature=1.0, max_tokens=256)
        assert resp.system_fingerprint == "builtin-v1"
        assert resp.choices[0].model_extra["token_ids"] == list(_direct(new, seed).tokens), "the new weights answer"
        served_lps.append([e.logprob for e in resp.choices[0].logprobs.content])
    assert served_lps != [list(_direct(old, s).logprobs) for s in range(4)], "not the old ones"


@pytest.mark.parametrize("body,status,fragment", [
    ({"model_path": "tinker://nowhere", "version": 2}, 502, "create_sampling_client"),
    ({"model_path": "", "version": 2}, 400, "needs"),
    ({"model_path": "tinker://x", "version": "2"}, 400, "needs"),
    ([1, 2], 400, "bad sampler swap"),
])
def test_a_bad_swap_is_refused_and_the_old_weights_keep_serving(served: SamplerServer, client: openai.OpenAI,
                                                                body: object, status: int, fragment: str) -> None:
    r = httpx.post(f"{served.url}/sampler", json=body, timeout=60)
    assert r.status_code == status and fragment in r.json()["error"]["message"]
    assert _create(client, seed=2).system_fingerprint == "builtin-v0"


@pytest.mark.usefixtures("ray_session")
def test_an_eval_runs_through_a_tinker_sampling_client(tmp_path: Path, served: SamplerServer, sim) -> None:  # noqa: F811
    """The agent loop, unchanged, drives real sandboxes with Tinker as its policy."""
    summary = run_eval(EvalConfig(out=tmp_path / "run", taskset="calc", split="heldout", group=1, max_concurrent=8,
                                  policy=served.url, settings=Settings(max_turns=3)))
    assert summary["counts_by_status"] == {"ok": summary["rollouts"]} and summary["rollouts"] >= 8
    records = [json.loads(line) for line in (tmp_path / "run" / "rollouts.jsonl").read_text().splitlines()]
    assert sim.state.counts["asample"] >= summary["rollouts"]
    for record in records:
        traj = record["trajectory"]
        sampled = [lp for lp, m in zip(traj["logprobs"], traj["loss_mask"]) if m]
        assert sampled and all(np.isfinite(sampled)) and all(lp <= 0 for lp in sampled)


def test_the_train_loop_hears_a_refused_swap_as_one_line(served: SamplerServer) -> None:
    """`use_weights` is how a step hands its weights to the sampler; a refusal (unknown
    path, dead endpoint) comes back as one line and the run stops on it."""
    import asyncio

    from rl_daytona.serving.sampler import use_weights

    refused = asyncio.run(use_weights(served.url, "tinker://nowhere/sampler_weights/step-1", 1))
    assert refused.startswith("the sampler did not take the new weights tinker://nowhere/sampler_weights/step-1: "
                              "tinker create_sampling_client") and "\n" not in refused
    dead = asyncio.run(use_weights("http://127.0.0.1:9/v1", "tinker://x", 1))
    assert "did not take" in dead and "Client" in dead and "\n" not in dead
    assert served.service.version == 0
    assert prompt_ids()  # the renderer the sim tests use is this one
