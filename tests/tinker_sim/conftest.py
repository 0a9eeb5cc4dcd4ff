"""The real `tinker` SDK (unchanged) against tinker-sim running in this process."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
import tinker
from tinker import types

from rl_daytona.renderers.builtin import BuiltinRenderer
from rl_daytona.tinker_sim import SIM_API_KEY, RunningSim, SimConfig, run_sim_in_thread

MESSAGES = [{"role": "system", "content": "You fix bugs."},
            {"role": "user", "content": "The tests in test_calc.py fail. Fix calc.py."}]


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[RunningSim]:
    with run_sim_in_thread(SimConfig(state_dir=tmp_path / "state", log_path=tmp_path / "requests.jsonl")) as running:
        yield running


@pytest.fixture
def service(sim: RunningSim) -> Iterator[tinker.ServiceClient]:
    client = tinker.ServiceClient(base_url=sim.url, api_key=SIM_API_KEY)
    yield client
    client.close("success").result(30)


def prompt_ids() -> list[int]:
    return BuiltinRenderer().prompt_ids(MESSAGES)


def datum_of(prompt: list[int], tokens: list[int], logprobs: list[float], advantage: float) -> types.Datum:
    """One sampled completion after `prompt` as the Datum a Learner sends (tinker's shapes)."""
    seq = prompt + tokens
    n = len(seq) - 1
    context = len(prompt) - 1
    return types.Datum(model_input=types.ModelInput.from_ints(seq[:-1]), loss_fn_inputs={
        "target_tokens": types.TensorData(data=seq[1:], dtype="int64", shape=[n]),
        "logprobs": types.TensorData(data=[0.0] * context + logprobs, dtype="float32", shape=[n]),
        "advantages": types.TensorData(data=[0.0] * context + [advantage] * len(tokens), dtype="float32",
                                       shape=[n])})


def sample(client: tinker.SamplingClient, seed: int, n: int = 1) -> types.SampleResponse:
    params = types.SamplingParams(max_tokens=64, temperature=1.0, seed=seed)
    return client.sample(prompt=types.ModelInput.from_ints(prompt_ids()), num_samples=n,
                         sampling_params=params).result(60)
