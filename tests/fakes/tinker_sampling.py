"""A stand-in for Tinker's hosted sampler: the SDK `SamplingClient.sample` signature, answered
by the built-in model with the real `tinker.types` (ModelInput in, SampleResponse out).

The hosted service cannot be reached from here; this is the part of it the sampling adapter
touches. Futures are `concurrent.futures.Future`s (what the SDK's APIFuture offers through
`.result()`). Weights can be swapped by path (`open(path)`), as `create_sampling_client` does.
"""

from __future__ import annotations

import concurrent.futures
import uuid
from typing import Any

import numpy as np
from tinker import types

from rl_daytona.policy.model import PolicyModel


def _done(value: Any = None, error: BaseException | None = None) -> concurrent.futures.Future:
    future: concurrent.futures.Future = concurrent.futures.Future()
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
    return future


class BuiltinTinkerSamplingClient:
    """`sample(...)` over a PolicyModel; `calls` records every request's SDK arguments."""

    def __init__(self, model: PolicyModel | None = None, fail: BaseException | None = None,
                 truncate_logprobs: bool = False) -> None:
        self.model = model or PolicyModel()
        self.fail = fail
        self.truncate_logprobs = truncate_logprobs
        self.calls: list[dict[str, Any]] = []

    def sample(self, prompt: types.ModelInput, num_samples: int, sampling_params: types.SamplingParams,
               include_prompt_logprobs: bool = False, topk_prompt_logprobs: int = 0,
               topk_sample_logprobs: int = 0, target_prompt_logprobs: types.TensorData | None = None,
               prompt_alt_tokens_k: int = 0, prompt_logprobs_last_n: int | None = None) -> concurrent.futures.Future:
        self.calls.append({"prompt": prompt, "num_samples": num_samples, "sampling_params": sampling_params})
        if self.fail is not None:
            return _done(error=self.fail)
        context = prompt.to_ints()
        seed = sampling_params.seed
        sequences = []
        for index in range(num_samples):
            rng = np.random.default_rng(None if seed is None else [seed & ((1 << 64) - 1), index])
            sampled = self.model.sample_detailed(context, rng, sampling_params.temperature,
                                                 sampling_params.max_tokens or 256)
            lps = list(sampled.logprobs)[:-1] if self.truncate_logprobs else list(sampled.logprobs)
            sequences.append(types.SampledSequence(
                stop_reason="stop" if sampled.finished else "length", sequence_id=uuid.uuid4().hex,
                tokens_np=np.asarray(sampled.token_ids, dtype=np.int32),
                logprobs_np=np.asarray(lps, dtype=np.float32)))
        return _done(types.SampleResponse(sequences=sequences))


class FakeSamplerStore:
    """`create_sampling_client(model_path)`: saved sampler weights by path -> a client over them."""

    def __init__(self) -> None:
        self.weights: dict[str, PolicyModel] = {}
        self.opened: list[str] = []

    def save(self, path: str, model: PolicyModel) -> str:
        self.weights[path] = model
        return path

    def create_sampling_client(self, model_path: str) -> concurrent.futures.Future:
        self.opened.append(model_path)
        if model_path not in self.weights:
            return _done(error=FileNotFoundError(f"no sampler weights at {model_path}"))
        return _done(BuiltinTinkerSamplingClient(self.weights[model_path]))


class BuiltinTinkerTrainingClient:
    """The SDK TrainingClient's calls the adapter makes (same signatures, real types), applied to
    a built-in model by the built-in Trainer; `save_weights_for_sampler` writes the weights under
    `root`, where `SavedSamplerWeights` (in another process) opens them by their tinker path."""

    def __init__(self, root: str) -> None:
        from rl_daytona.policy.training import Trainer

        self.root = root
        self.trainer = Trainer(PolicyModel())

    def forward_backward(self, data: list[types.Datum], loss_fn: types.LossFnType,
                         loss_fn_config: Any = None) -> concurrent.futures.Future:
        from rl_daytona.policy.training import parse_datum

        raw = [{"model_input": d.model_input.to_ints(),
                "loss_fn_inputs": {k: v.tolist() for k, v in d.loss_fn_inputs.items()}} for d in data]
        out = self.trainer.forward_backward([parse_datum(r, i) for i, r in enumerate(raw)], loss_fn, loss_fn_config)
        return _done(types.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", loss_fn_outputs=[],
                                                 metrics=out["metrics"]))

    def optim_step(self, optim_params: Any = None, *, adam_params: Any = None) -> concurrent.futures.Future:
        p = optim_params or adam_params
        out = self.trainer.optim_step({"learning_rate": p.learning_rate, "beta1": p.beta1, "beta2": p.beta2,
                                       "eps": p.eps, "weight_decay": p.weight_decay})
        return _done(types.OptimStepResponse(metrics=out["metrics"]))

    def save_state(self, name: str, ttl_seconds: int | None = None, overwrite: bool = False,
                   user_metadata: dict[str, str] | None = None) -> concurrent.futures.Future:
        self.trainer.save(f"{self.root}/state-{name.replace('/', '_')}")
        return _done(types.SaveWeightsResponse(path=f"tinker://fake/weights/{name}"))

    def load_state(self, path: str, weights_access_token: str | None = None) -> concurrent.futures.Future:
        return _done(error=NotImplementedError("not used by these tests"))

    def save_weights_for_sampler(self, name: str, ttl_seconds: int | None = None,
                                 user_metadata: dict[str, str] | None = None) -> concurrent.futures.Future:
        self.trainer.save(f"{self.root}/{name}")
        return _done(types.SaveWeightsForSamplerResponse(path=f"tinker://fake/sampler_weights/{name}"))


class SavedSamplerWeights:
    """`create_sampling_client(tinker path)` over the weights `BuiltinTinkerTrainingClient` saved."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.opened: list[str] = []

    def create_sampling_client(self, model_path: str) -> concurrent.futures.Future:
        self.opened.append(model_path)
        try:
            model = PolicyModel.load(f"{self.root}/{model_path.rsplit('/', 1)[-1]}")
        except (OSError, ValueError) as exc:
            return _done(error=exc)
        return _done(BuiltinTinkerSamplingClient(model))


def tinker_training_client(root: str) -> Any:
    """A Learner-side factory (picklable through functools.partial)."""
    from rl_daytona.learn.clients import TinkerTrainingClient

    return TinkerTrainingClient(BuiltinTinkerTrainingClient(root))
