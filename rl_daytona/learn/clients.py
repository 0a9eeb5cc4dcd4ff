"""Training clients: one async protocol, two adapters.

    local   the built-in model service over HTTP (`/v1/train/*`, Tinker's JSON shapes)
    tinker  the `tinker` SDK (a LoRA TrainingClient on a Tinker service)

Invariant: a training call either returns its typed result or raises `TrainingCallError`
with one line saying what failed; a failed call never half-applies a step on our side (the
Learner retries or reports it, and the datums it carried are not lost from the step's counts).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import uuid
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


class LocalTrainingClient:
    """The built-in model service's training routes over HTTP (aiohttp).

    Every call carries a `request_id` (an idempotency key) that a retry repeats: a chunk's is
    its ordinal among the step's answered chunks plus a hash of its content, a step's its
    ordinal, so a call whose answer was lost (timeout, reset connection, a gateway's 5xx) and
    is sent again is applied once by the service, never twice, and two chunks that happen to
    hold the same datums are still two chunks.
    """

    def __init__(self, base_url: str, timeout: float = 600.0) -> None:
        self.base_url = base_url.rstrip("/")
        if not self.base_url.endswith("/v1"):
            self.base_url += "/v1"
        self._timeout = timeout
        self._session: Any = None
        self._client_id = uuid.uuid4().hex[:12]
        self._steps = 0  # optim_steps this client has seen answered
        self._chunks = 0  # forward_backward calls answered in the current step

    async def _post(self, route: str, body: bytes) -> dict[str, Any]:
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self._timeout))
        url = f"{self.base_url}/train/{route}"
        try:
            async with self._session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
                text = await resp.text()
                status = resp.status
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise TrainingCallError(f"{route}: cannot reach {url}: {type(exc).__name__}: {exc}") from None
        try:
            payload = json.loads(text)
        except ValueError:
            raise TrainingCallError(f"{route}: HTTP {status} with a non-JSON body: {text[:200]!r}") from None
        if status != 200:
            message = (payload.get("error") or {}).get("message") if isinstance(payload, dict) else None
            raise TrainingCallError(f"{route}: HTTP {status}: {message or text[:200]}",
                                    retryable=status >= 500 or status in (408, 429))
        return payload

    async def forward_backward(self, datums: Sequence[Datum], loss_fn: str = "importance_sampling",
                               loss_fn_config: dict[str, float] | None = None) -> ForwardBackwardResult:
        inner: dict[str, Any] = {"data": [d.to_wire() for d in datums], "loss_fn": loss_fn}
        if loss_fn_config:
            inner["loss_fn_config"] = loss_fn_config
        payload = json.dumps(inner, separators=(",", ":"))
        digest = hashlib.sha1(payload.encode()).hexdigest()[:16]
        rid = f"{self._client_id}:{self._steps}:{self._chunks}:{digest}"
        body = f'{{"request_id":"{rid}","forward_backward_input":{payload}}}'.encode()
        out = await self._post("forward_backward", body)
        self._chunks += 1
        metrics = {k: float(v) for k, v in (out.get("metrics") or {}).items()}
        return ForwardBackwardResult(loss=metrics.get("loss:sum", 0.0), datums=len(datums),
                                     tokens=int(metrics.get("tokens:sum", 0)), bytes_sent=len(body),
                                     metrics=metrics)

    async def optim_step(self, adam: AdamParams) -> OptimStepResult:
        rid = f"{self._client_id}:step:{self._steps}"
        out = await self._post("optim_step", json.dumps({"request_id": rid, "adam_params": adam.to_wire()}).encode())
        self._steps, self._chunks = self._steps + 1, 0
        return OptimStepResult(version=int(out["version"]),
                               metrics={k: float(v) for k, v in (out.get("metrics") or {}).items()})

    async def save_state(self, name: str) -> str:
        return str((await self._post("save", json.dumps({"path": name}).encode()))["path"])

    async def load_state(self, path: str) -> int:
        return int((await self._post("load", json.dumps({"path": path}).encode()))["version"])

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


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
    (`policy.tinker_sampler`).
    """

    def __init__(self, training_client: Any, sampler_weights: bool = True) -> None:
        self.training_client = training_client
        self.sampler_weights = sampler_weights
        self._version = 0
        self._unsaved: dict[str, float] | None = None  # metrics of a step applied but not yet saved for sampling

    @classmethod
    def connect(cls, base_url: str | None, api_key: str | None, base_model: str, rank: int = 32) -> "TinkerTrainingClient":
        import tinker

        service = tinker.ServiceClient(base_url=base_url, api_key=api_key)
        return cls(service.create_lora_training_client(base_model=base_model, rank=rank))

    async def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        def run() -> Any:
            future = fn(*args, **kwargs)
            return future.result() if hasattr(future, "result") else future

        try:
            return await asyncio.to_thread(run)
        except Exception as exc:  # noqa: BLE001 - the SDK raises many types; one line for all
            message = " ".join(str(exc).split())[:200]  # an SDK error can carry a whole HTML page
            raise TrainingCallError(f"tinker {what} failed: {type(exc).__name__}: {message}") from None

    async def forward_backward(self, datums: Sequence[Datum], loss_fn: str = "importance_sampling",
                               loss_fn_config: dict[str, float] | None = None) -> ForwardBackwardResult:
        data = [to_tinker_datum(d) for d in datums]
        out = await self._call("forward_backward", self.training_client.forward_backward, data, loss_fn,
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
            out = await self._call("optim_step", self.training_client.optim_step, params)
            self._version += 1
            self._unsaved = {k: float(v) for k, v in (getattr(out, "metrics", None) or {}).items()}
        path = ""
        if self.sampler_weights:  # the sampler serves new weights only once they are saved for it
            # a failure here leaves `_unsaved` set: the Learner's retry saves again, it does not step twice
            saved = await self._call("save_weights_for_sampler", self.training_client.save_weights_for_sampler,
                                     f"step-{self._version:06d}")
            path = str(getattr(saved, "path", "") or "")
        metrics, self._unsaved = self._unsaved, None
        return OptimStepResult(version=self._version, metrics=metrics, sampler_path=path)

    async def save_state(self, name: str) -> str:
        """Save under `name` made a Tinker checkpoint name (`runs/x/policy` -> `runs_x_policy`)."""
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "policy"
        out = await self._call("save_state", self.training_client.save_state, name)
        return str(getattr(out, "path", name))

    async def load_state(self, path: str) -> int:
        await self._call("load_state", self.training_client.load_state, path)
        return self._version

    async def close(self) -> None:
        return None


def make_training_client(kind: str, *, base_url: str, api_key: str | None = None,
                         base_model: str = "", rank: int = 32) -> TrainingClient:
    """`local` (built-in service at base_url) or `tinker` (SDK; base_model required)."""
    if kind == "local":
        return LocalTrainingClient(base_url)
    if kind == "tinker":
        if not base_model:
            raise ValueError("the tinker training client needs --base-model")
        return TinkerTrainingClient.connect(base_url or None, api_key, base_model, rank)
    raise ValueError(f"unknown training client {kind!r} (choose local or tinker)")
