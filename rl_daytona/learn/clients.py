"""The training client: one async protocol, one adapter — the `tinker` SDK's TrainingClient.

A run trains through `tinker` whether the service is hosted Tinker or the local
Tinker-compatible service (`rl_daytona.tinker_sim`, which serves the built-in model): they
differ only in URL, key and model name. The SDK numbers each call and repeats the number on
its own retries, so the service applies a retried call once.

Invariant: a training call either returns its typed result or raises `TrainingCallError`
with one line saying what failed; a failed call never half-applies a step on our side (the
Learner retries or reports it, and the datums it carried are not lost from the step's counts).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

from rl_daytona.learn.datum import Datum


class TrainingCallError(RuntimeError):
    """A training call that failed (transport, HTTP status, or a refused request).

    `retryable` is False for a request the service refused as such (HTTP 4xx but 408/429):
    sending it again cannot help."""

    def __init__(self, message: str, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable

    def __reduce__(self) -> tuple[Any, ...]:  # keeps `retryable` through pickling (Ray)
        return (type(self), (str(self), self.retryable))


@dataclass(frozen=True)
class AdamParams:
    learning_rate: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-12
    weight_decay: float = 0.0

    def to_wire(self) -> dict[str, float]:
        return {"learning_rate": self.learning_rate, "beta1": self.beta1, "beta2": self.beta2,
                "eps": self.eps, "weight_decay": self.weight_decay}


@dataclass(frozen=True)
class ForwardBackwardResult:
    loss: float
    datums: int
    tokens: int
    bytes_sent: int
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class OptimStepResult:
    version: int
    metrics: dict[str, float] = field(default_factory=dict)
    # where the new weights can be sampled from, when sampling is a separate service (Tinker)
    sampler_path: str = ""


@runtime_checkable
class TrainingClient(Protocol):
    """What the Learner needs from a training service."""

    async def forward_backward(self, datums: Sequence[Datum], loss_fn: str = "importance_sampling",
                               loss_fn_config: dict[str, float] | None = None) -> ForwardBackwardResult: ...

    async def optim_step(self, adam: AdamParams) -> OptimStepResult: ...

    async def save_state(self, name: str) -> str: ...

    async def load_state(self, path: str) -> int: ...

    async def close(self) -> None: ...


def to_tinker_datum(datum: Datum) -> Any:
    """Our datum as the real SDK's `tinker.types.Datum`."""
    from tinker import types

    n = len(datum.target_tokens)
    return types.Datum(
        model_input=types.ModelInput.from_ints(list(datum.model_input)),
        loss_fn_inputs={
            "target_tokens": types.TensorData(data=list(datum.target_tokens), dtype="int64", shape=[n]),
            "logprobs": types.TensorData(data=list(datum.logprobs), dtype="float32", shape=[n]),
            "advantages": types.TensorData(data=list(datum.advantages), dtype="float32", shape=[n]),
        },
    )


class TinkerTrainingClient:
    """A `tinker` LoRA TrainingClient behind our protocol.

    `training_client` is anything with the SDK's TrainingClient methods (`forward_backward`,
    `optim_step`, `save_state`, `load_state`, `save_weights_for_sampler` returning futures with
    `.result()`), normally made by `TinkerTrainingClient.connect(base_url, api_key, base_model)`.
    With `sampler_weights`, each `optim_step` also saves the new weights for sampling and returns
    their `tinker://` path, which the train loop hands to the sampling endpoint
    (`serving.sampler`).
    """

    def __init__(self, training_client: Any, sampler_weights: bool = True) -> None:
        self.training_client = training_client
        self.service: Any = None  # the ServiceClient that made it (closed with it), when `connect` did
        self._open: Any = None  # () -> the SDK training client, when `connect` deferred making it
        self.sampler_weights = sampler_weights
        self._version = 0
        self._unsaved: dict[str, float] | None = None  # metrics of a step applied but not yet saved for sampling

    @classmethod
    def connect(cls, base_url: str | None, api_key: str | None, base_model: str, rank: int = 32,
                resume: str | None = None, version: int = 0) -> "TinkerTrainingClient":
        """A LoRA training client on `base_model`, or (with `resume`, a `tinker://` checkpoint)
        one loaded from that checkpoint with its optimizer state; `version` is its policy version.
        The SDK client is made by the first call, off the event loop (its constructor blocks)."""
        made = cls(None)
        made._version = version
        made._open = lambda: made._connect(base_url, api_key, base_model, rank, resume)
        return made

    def _connect(self, base_url: str | None, api_key: str | None, base_model: str, rank: int,
                 resume: str | None) -> Any:
        import tinker

        self.service = tinker.ServiceClient(base_url=base_url, api_key=api_key)
        if resume:
            return self.service.create_training_client_from_state_with_optimizer(resume).result()
        return self.service.create_lora_training_client(base_model=base_model, rank=rank).result()

    async def _call(self, what: str, method: str, *args: Any, **kwargs: Any) -> Any:
        def run() -> Any:
            if self.training_client is None:
                self.training_client = self._open()
            future = getattr(self.training_client, method)(*args, **kwargs)
            return future.result() if hasattr(future, "result") else future

        try:
            return await asyncio.to_thread(run)
        except Exception as exc:  # noqa: BLE001 - the SDK raises many types; one line for all
            message = " ".join(str(exc).split())[:300]  # an SDK error can carry a whole HTML page
            status = getattr(exc, "status_code", None)  # a refused request (4xx but 408/429) is not worth repeating
            refused = isinstance(status, int) and 400 <= status < 500 and status not in (408, 429)
            raise TrainingCallError(f"tinker {what} failed: {type(exc).__name__}: {message}",
                                    retryable=not refused) from None

    async def forward_backward(self, datums: Sequence[Datum], loss_fn: str = "importance_sampling",
                               loss_fn_config: dict[str, float] | None = None) -> ForwardBackwardResult:
        data = [to_tinker_datum(d) for d in datums]
        out = await self._call("forward_backward", "forward_backward", data, loss_fn,
                               loss_fn_config)
        metrics = {k: float(v) for k, v in (getattr(out, "metrics", None) or {}).items()}
        nbytes = sum(d.nbytes for d in datums)
        return ForwardBackwardResult(loss=metrics.get("loss:sum", 0.0), datums=len(datums),
                                     tokens=sum(d.sampled_tokens for d in datums),
                                     bytes_sent=nbytes, metrics=metrics)

    async def optim_step(self, adam: AdamParams) -> OptimStepResult:
        from tinker import types

        params = types.AdamParams(learning_rate=adam.learning_rate, beta1=adam.beta1, beta2=adam.beta2,
                                  eps=adam.eps, weight_decay=adam.weight_decay)
        if self._unsaved is None:
            out = await self._call("optim_step", "optim_step", params)
            self._version += 1
            self._unsaved = {k: float(v) for k, v in (getattr(out, "metrics", None) or {}).items()}
        path = ""
        if self.sampler_weights:  # the sampler serves new weights only once they are saved for it
            # a failure here leaves `_unsaved` set: the Learner's retry saves again, it does not step twice
            saved = await self._call("save_weights_for_sampler", "save_weights_for_sampler",
                                     f"step-{self._version:06d}")
            path = str(getattr(saved, "path", "") or "")
        metrics, self._unsaved = self._unsaved, None
        return OptimStepResult(version=self._version, metrics=metrics, sampler_path=path)

    async def save_state(self, name: str) -> str:
        """Save under the last part of `name` made a Tinker checkpoint name (`runs/x/step-000001`
        -> `step-000001`: the service keeps each training run's checkpoints apart)."""
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", name.rstrip("/").rsplit("/", 1)[-1]).strip("_") or "policy"
        out = await self._call("save_state", "save_state", name)
        return str(getattr(out, "path", name))

    async def load_state(self, path: str) -> int:
        await self._call("load_state", "load_state", path)
        return self._version

    async def save_for_sampler(self, name: str) -> str:
        """Save the current weights for sampling; their `tinker://` path."""
        saved = await self._call("save_weights_for_sampler", "save_weights_for_sampler", name)
        return str(getattr(saved, "path", "") or "")

    async def close(self) -> None:
        if self.service is not None:
            service, self.service = self.service, None
            await asyncio.to_thread(lambda: service.close("success").result())


def make_training_client(kind: str, *, base_url: str, api_key: str | None = None,
                         base_model: str = "", rank: int = 32) -> TrainingClient:
    """`tinker` (the SDK against `base_url`; base_model required)."""
    if kind != "tinker":
        raise ValueError(f"unknown training client {kind!r} (the one there is: tinker)")
    if not base_model:
        raise ValueError("the tinker training client needs --base-model")
    return TinkerTrainingClient.connect(base_url or None, api_key, base_model, rank)
