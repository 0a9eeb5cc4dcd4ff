"""`tinker.ServiceClient(base_url=...)`, unchanged, against tinker-sim: the whole training loop."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tinker
from tinker import types

from rl_daytona.tinker_sim import SIM_API_KEY, RunningSim
from tests.tinker_sim.conftest import datum_of, prompt_ids, sample


def _paths(log: Path) -> list[str]:
    return [json.loads(line)["path"] for line in log.read_text().splitlines()]


def test_train_save_for_sampler_and_sample_with_the_real_sdk(sim: RunningSim, service: tinker.ServiceClient,
                                                             tmp_path: Path) -> None:
    training = service.create_lora_training_client(base_model="builtin", rank=8).result(60)
    assert training.get_info().model_data.model_name == "builtin"
    base = service.create_sampling_client(base_model="builtin").result(60)
    drawn = sample(base, seed=1, n=4)
    assert len(drawn.sequences) == 4
    for seq in drawn.sequences:  # tokens and their logprobs, one each, every logprob a real one
        assert seq.tokens and seq.logprobs is not None and len(seq.logprobs) == len(seq.tokens)
        assert all(np.isfinite(seq.logprobs)) and all(lp <= 0 for lp in seq.logprobs)
    assert sample(base, seed=1, n=4).sequences[0].tokens == drawn.sequences[0].tokens  # seeded: the same draw

    first = drawn.sequences[0]
    data = [datum_of(prompt_ids(), list(s.tokens), list(s.logprobs), adv)
            for s, adv in zip(drawn.sequences, (1.0, -0.5, 0.5, -0.25))]  # not summing to 0: the draws may agree
    out = training.forward_backward(data, "importance_sampling").result(60)
    assert out.metrics["datums:sum"] == 4 and len(out.loss_fn_outputs) == 4
    # the trainer scores the sampled tokens exactly as the sampler drew them (temperature 1)
    scored = out.loss_fn_outputs[0]["logprobs"].tolist()[-len(first.tokens):]
    assert scored == pytest.approx(first.logprobs, abs=1e-5)
    step = training.optim_step(types.AdamParams(learning_rate=0.2)).result(60)
    assert step.metrics["version:max"] == 1.0 and step.metrics["grad_norm:mean"] > 0

    saved = training.save_weights_for_sampler("step-1").result(60)
    assert saved.path.startswith("tinker://") and saved.path.endswith("/sampler_weights/step-1")
    trained = service.create_sampling_client(model_path=saved.path).result(60)
    after = sample(trained, seed=1, n=4)
    assert [s.tokens for s in after.sequences] != [s.tokens for s in drawn.sequences] or \
        [s.logprobs for s in after.sequences] != [s.logprobs for s in drawn.sequences], "the new weights answer"

    state = training.save_state("ckpt").result(60)
    resumed = service.create_training_client_from_state_with_optimizer(state.path).result(60)
    assert resumed.model_id != training.model_id
    paths = _paths(tmp_path / "requests.jsonl")
    for call in ("forward_backward", "optim_step", "save_weights_for_sampler", "asample", "retrieve_future",
                 "create_model", "create_session", "load_weights"):
        assert f"/api/v1/{call}" in paths, call


def test_another_base_model_is_one_clear_error(service: tinker.ServiceClient) -> None:
    with pytest.raises(Exception, match="serves only its built-in model 'builtin'"):
        service.create_lora_training_client(base_model="Qwen/Qwen3-8B", rank=8).result(60)


def test_a_wrong_key_is_refused(sim: RunningSim) -> None:
    from rl_daytona.tinker_sim import SimConfig, run_sim_in_thread

    with run_sim_in_thread(SimConfig(state_dir=sim.config.state_dir, api_key="tml-right")) as strict:
        with pytest.raises(tinker.AuthenticationError):
            tinker.ServiceClient(base_url=strict.url, api_key=SIM_API_KEY).create_lora_training_client(
                base_model="builtin").result(60)


def test_every_request_is_one_log_line_without_headers(sim: RunningSim, service: tinker.ServiceClient,
                                                       tmp_path: Path) -> None:
    service.create_sampling_client(base_model="builtin").result(60)
    lines = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert lines and all(set(line) == {"method", "path", "status", "ms"} for line in lines)
    assert SIM_API_KEY not in (tmp_path / "requests.jsonl").read_text()
