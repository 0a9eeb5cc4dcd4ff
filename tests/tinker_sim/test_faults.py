"""Injected faults against the real SDK: every retried call is applied exactly once."""

from __future__ import annotations

import pytest
import tinker
from tinker import types

from rl_daytona.tinker_sim import Faults, RunningSim
from rl_daytona.tinker_sim.routes import FAULTS
from tests.tinker_sim.conftest import datum_of, prompt_ids, sample


def _faults(sim: RunningSim, **kw: object) -> Faults:
    assert sim.app is not None
    faults = Faults(**kw)  # type: ignore[arg-type]
    sim.app[FAULTS].__dict__.update({k: v for k, v in faults.__dict__.items() if k != "lock"})
    return sim.app[FAULTS]


def _step(service: tinker.ServiceClient) -> tuple[tinker.TrainingClient, types.ForwardBackwardOutput]:
    training = service.create_lora_training_client(base_model="builtin", rank=8).result(60)
    seq = sample(service.create_sampling_client(base_model="builtin").result(60), seed=3).sequences[0]
    data = [datum_of(prompt_ids(), list(seq.tokens), list(seq.logprobs), 1.0)]
    out = training.forward_backward(data, "importance_sampling").result(60)
    training.optim_step(types.AdamParams(learning_rate=0.1)).result(60)
    return training, out


@pytest.mark.parametrize("fault", [
    {"rate_limit": 2},  # 429 + Retry-After, twice, on each training call
    {"server_error": 2},  # 500 before anything was applied
    {"lost_reply": 1},  # applied, then the reply lost: the retry must not apply it again
    {"slow_future": 3, "slow_futures": 2},  # try_again to the first retrievals
])
def test_a_retried_call_is_applied_once(sim: RunningSim, service: tinker.ServiceClient, fault: dict) -> None:
    faults = _faults(sim, routes=("forward_backward", "optim_step"), **fault)
    training, out = _step(service)
    kind = "slow_futures" if "slow_futures" in fault else next(iter(fault))
    assert faults.fired.get(kind) == fault[kind], faults.fired  # every injected fault was met
    model = sim.state.model(training.model_id)
    counts = model.trainer.counts
    assert counts["forward_backward_applied"] == 1 and counts["datums_applied"] == 1
    assert counts["optim_steps_applied"] == 1 and model.trainer.model.version == 1
    assert out.metrics["datums:sum"] == 1.0
    if kind == "lost_reply":
        assert sim.state.counts.get("replayed") == 1  # the retry was answered with the first call's future


def test_a_lost_sample_reply_is_drawn_once(sim: RunningSim, service: tinker.ServiceClient) -> None:
    faults = _faults(sim, routes=("asample",), lost_reply=1)
    drawn = sample(service.create_sampling_client(base_model="builtin").result(60), seed=4)
    assert drawn.sequences[0].tokens and faults.fired == {"lost_reply": 1}
    assert sim.state.counts["asample"] == 1 and sim.state.counts["replayed"] == 1


def test_a_failed_future_is_not_applied_and_raises(sim: RunningSim, service: tinker.ServiceClient) -> None:
    training = service.create_lora_training_client(base_model="builtin", rank=8).result(60)
    _faults(sim, routes=("optim_step",), failed_future=1)
    with pytest.raises(tinker.RequestFailedError, match="not applied"):
        training.optim_step(types.AdamParams(learning_rate=0.1)).result(60)
    assert sim.state.model(training.model_id).trainer.model.version == 0
