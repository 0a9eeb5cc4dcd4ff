"""The training client: TinkerTrainingClient through the real `tinker` SDK against tinker-sim
(in this process), on datums sampled by the built-in chat server as the agent loop samples them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import openai
import pytest
from tinker import types

from rl_daytona.agent import BASH_TOOL, TokenTrajectory, _policy_version
from rl_daytona.learn.clients import (
    AdamParams,
    TinkerTrainingClient,
    TrainingCallError,
    TrainingClient,
    make_training_client,
    to_tinker_datum,
)
from rl_daytona.learn.datum import Datum
from rl_daytona.learn.groups import group_datums
from rl_daytona.learn.retry import Retrier, RetryPolicy
from rl_daytona.serving.launch import ServerProcess, start_builtin_server
from rl_daytona.tinker_sim import SIM_API_KEY, RunningSim, SimConfig, run_sim_in_thread
from rl_daytona.tinker_sim.routes import FAULTS
from rl_daytona.types import Trajectory
from tests.learn.builders import rollout_of
from tests.policy.transcripts import CalcShell, Chat

ADAM = AdamParams(learning_rate=0.05)


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    handle = start_builtin_server()
    yield handle
    handle.close()
    assert handle.process.poll() is not None


@pytest.fixture(scope="module")
def chat_client(server: ServerProcess) -> Iterator[openai.OpenAI]:
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
        version = version or _policy_version(resp.model_dump())  # the agent reads the reply as JSON
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


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[RunningSim]:
    with run_sim_in_thread(SimConfig(state_dir=tmp_path / "tinker")) as running:
        yield running


def _connect(sim: RunningSim, version: int = 0, resume: str | None = None) -> TinkerTrainingClient:
    return TinkerTrainingClient.connect(sim.url, SIM_API_KEY, "builtin", 8, resume, version)


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert text and "\n" not in text, repr(text)
    return text


def test_the_tinker_client_implements_the_protocol() -> None:
    assert issubclass(TinkerTrainingClient, TrainingClient)
    with pytest.raises(ValueError, match="base-model"):
        make_training_client("tinker", base_url="")
    with pytest.raises(ValueError, match="unknown training client"):
        make_training_client("local", base_url="")


def test_a_step_through_the_sdk_trains_the_model(sim: RunningSim, served_group: list[Datum]) -> None:
    async def step() -> tuple[Any, Any]:
        client = _connect(sim)
        try:
            return await client.forward_backward(served_group), await client.optim_step(ADAM)
        finally:
            await client.close()

    fb, stepped = _run(step())
    assert fb.datums == len(served_group) == 4 and fb.metrics["datums:sum"] == 4 and fb.tokens > 0
    assert stepped.version == 1 and stepped.metrics["grad_norm:mean"] > 0
    assert stepped.sampler_path.startswith("tinker://") and "/sampler_weights/step-000001" in stepped.sampler_path
    (model,) = sim.state.models.values()
    assert model.trainer.counts["datums_applied"] == 4 and model.trainer.model.version == 1


def test_the_ppo_loss_and_its_config_reach_the_trainer(sim: RunningSim, served_group: list[Datum]) -> None:
    async def step() -> Any:
        client = _connect(sim)
        try:
            return await client.forward_backward(served_group, "ppo", {"clip_low_threshold": 0.9,
                                                                      "clip_high_threshold": 1.1})
        finally:
            await client.close()

    assert "clipped:sum" in _run(step()).metrics


def test_save_and_resume_from_a_tinker_checkpoint(sim: RunningSim, served_group: list[Datum]) -> None:
    async def train_and_save() -> str:
        client = _connect(sim)
        try:
            await client.forward_backward(served_group)
            await client.optim_step(ADAM)
            return await client.save_state("/runs/x/checkpoints/step-000000")
        finally:
            await client.close()

    path = _run(train_and_save())
    assert path.startswith("tinker://") and path.endswith("/weights/step-000000")

    async def resume() -> Any:
        client = _connect(sim, version=1, resume=path)
        try:
            await client.forward_backward(served_group)
            return await client.optim_step(ADAM)
        finally:
            await client.close()

    assert _run(resume()).version == 2  # counted on from the checkpoint's version
    resumed = [m for m in sim.state.models.values() if m.trainer.model.version == 2]
    assert len(resumed) == 1 and resumed[0].trainer.model._adam_t == 2  # the Adam state came with it


def test_a_refused_datum_is_one_line_and_not_worth_repeating(sim: RunningSim, served_group: list[Datum]) -> None:
    import dataclasses

    bad = dataclasses.replace(served_group[0], target_tokens=served_group[0].target_tokens[:-1] + (10**6,))

    async def send() -> None:
        client = _connect(sim)
        try:
            await client.forward_backward([bad])
        finally:
            await client.close()

    with pytest.raises(TrainingCallError) as info:
        _run(send())
    assert "tinker forward_backward failed: BadRequestError" in _one_line(info.value)
    assert "outside the vocabulary" in str(info.value) and not info.value.retryable


def test_a_failed_future_is_worth_repeating_and_a_retry_applies_it_once(sim: RunningSim,
                                                                        served_group: list[Datum]) -> None:
    faults = sim.app[FAULTS]
    faults.routes, faults.failed_future = ("forward_backward",), 2

    async def step() -> tuple[Any, Any]:
        client, retrier = _connect(sim), Retrier(RetryPolicy(backoff=0.01))
        try:
            await retrier.call(client.forward_backward, served_group)
            return await retrier.call(client.optim_step, ADAM), retrier.stats
        finally:
            await client.close()

    stepped, stats = _run(step())
    assert (stats.failures, stats.retries) == (2, 2) and stepped.version == 1
    (model,) = sim.state.models.values()
    assert model.trainer.counts["forward_backward_applied"] == 1 and model.trainer.counts["datums_applied"] == 4


def test_a_failed_sampler_save_is_retried_without_stepping_twice(sim: RunningSim, served_group: list[Datum]) -> None:
    faults = sim.app[FAULTS]
    faults.routes, faults.failed_future = ("save_weights_for_sampler",), 1

    async def step() -> Any:
        client, retrier = _connect(sim), Retrier(RetryPolicy(backoff=0.01))
        try:
            await retrier.call(client.forward_backward, served_group)
            return await retrier.call(client.optim_step, ADAM)
        finally:
            await client.close()

    stepped = _run(step())
    (model,) = sim.state.models.values()
    assert stepped.version == 1 and model.trainer.counts["optim_steps_applied"] == 1
    assert stepped.sampler_path.endswith("/sampler_weights/step-000001")


def test_ten_failures_in_a_row_give_up_in_one_line_with_nothing_applied(sim: RunningSim,
                                                                         served_group: list[Datum]) -> None:
    faults = sim.app[FAULTS]
    faults.routes, faults.failed_future = ("forward_backward",), 100

    async def step() -> None:
        client, retrier = _connect(sim), Retrier(RetryPolicy(max_consecutive_failures=10, backoff=0.0))
        try:
            await retrier.call(client.forward_backward, served_group)
        finally:
            await client.close()

    with pytest.raises(TrainingCallError, match=r"\(10 failures in a row, giving up\)") as info:
        _run(step())
    assert "RequestFailedError" in _one_line(info.value) and faults.fired["failed_future"] == 10
    (model,) = sim.state.models.values()
    assert model.trainer.counts["forward_backward_applied"] == 0 and model.trainer.model.version == 0
