"""The built-in model's training side, shaped like Tinker's training API.

    forward_backward(datums, loss_fn) -> per-datum target logprobs + loss, gradients accumulate
    optim_step(adam_params)           -> Adam on the accumulated gradient, version + 1
    save(path) / load(path)           -> params, Adam moments, version, for resume

A datum is Tinker's `Datum`: `model_input` (the token sequence minus its last token) and
`loss_fn_inputs` with `target_tokens` (the sequence shifted by one), `logprobs` (the
sampler's logprob of every target, 0 where it did not sample) and `advantages` (per target).

Invariant: the policy's own completions are recovered from the tokens alone (every piece
after an `<|assistant|>` marker up to the next role marker), so a datum needs no mask and
the Tinker wire format is enough. Gradients are of the summed loss (Tinker's convention);
`optim_step` applies them once and clears them. Params are swapped whole, so a concurrent
sampler sees either the old or the new weights, never a mix.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from rl_daytona.policy import vocab as V
from rl_daytona.policy.model import PolicyModel

LOSS_FNS = ("importance_sampling", "ppo")
_MARKERS = frozenset(V.ROLE_MARKERS.values())


class TrainingError(ValueError):
    """A training request the service refuses (HTTP 400): bad datum, unknown loss, no grads."""


@dataclass(frozen=True)
class TrainDatum:
    """One Tinker datum, validated: `tokens` = model_input + [last target]."""

    tokens: tuple[int, ...]
    sampler_logprobs: np.ndarray  # aligned with targets (len(tokens) - 1)
    advantages: np.ndarray  # aligned with targets

    @property
    def n_targets(self) -> int:
        return len(self.tokens) - 1


def completion_mask(tokens: Sequence[int]) -> list[int]:
    """1 on every token the policy sampled: after `<|assistant|>`, until the next role marker."""
    mask, inside = [], False
    for token in tokens:
        if token in _MARKERS:
            inside = token == V.ASSISTANT
            mask.append(0)
        else:
            mask.append(1 if inside else 0)
    return mask


def _tensor(value: Any, name: str, index: int) -> list[float]:
    """Tinker's TensorData JSON (`{"data": [...], "dtype": ..., "shape": [...]}`) or a plain list."""
    if isinstance(value, Mapping):
        value = value.get("data")
    if not isinstance(value, (list, tuple)):
        raise TrainingError(f"datum {index}: loss_fn_inputs.{name} must be a list or TensorData")
    try:
        return [float(v) for v in value]
    except (TypeError, ValueError):
        raise TrainingError(f"datum {index}: loss_fn_inputs.{name} holds a non-number") from None


def _model_input_tokens(value: Any, index: int) -> list[int]:
    """Tokens of Tinker's ModelInput JSON (`{"chunks": [{"type": "encoded_text", "tokens": [...]}]}`)."""
    if isinstance(value, Mapping) and "chunks" in value:
        tokens: list[int] = []
        for chunk in value["chunks"] or ():
            if not isinstance(chunk, Mapping) or chunk.get("type", "encoded_text") != "encoded_text":
                raise TrainingError(f"datum {index}: only encoded_text chunks are supported")
            tokens.extend(chunk.get("tokens") or ())
    elif isinstance(value, (list, tuple)):
        tokens = list(value)
    else:
        raise TrainingError(f"datum {index}: model_input must be a ModelInput or a token list")
    if not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < V.VOCAB_SIZE for t in tokens):
        raise TrainingError(f"datum {index}: model_input holds a token outside the vocabulary")
    return tokens


def parse_datum(raw: Any, index: int) -> TrainDatum:
    if not isinstance(raw, Mapping):
        raise TrainingError(f"datum {index} is not an object")
    inputs = raw.get("loss_fn_inputs")
    if not isinstance(inputs, Mapping):
        raise TrainingError(f"datum {index}: loss_fn_inputs missing")
    model_input = _model_input_tokens(raw.get("model_input"), index)
    missing = [k for k in ("target_tokens", "logprobs", "advantages") if k not in inputs]
    if missing:
        raise TrainingError(f"datum {index}: loss_fn_inputs lacks {', '.join(missing)}")
    targets = [int(t) for t in _tensor(inputs["target_tokens"], "target_tokens", index)]
    if not all(0 <= t < V.VOCAB_SIZE for t in targets):
        raise TrainingError(f"datum {index}: target_tokens holds a token outside the vocabulary")
    logprobs = _tensor(inputs["logprobs"], "logprobs", index)
    advantages = _tensor(inputs["advantages"], "advantages", index)
    if not model_input or len(targets) != len(model_input):
        raise TrainingError(f"datum {index}: {len(targets)} target_tokens for {len(model_input)} input tokens")
    if model_input[1:] != targets[:-1]:
        raise TrainingError(f"datum {index}: target_tokens is not model_input shifted by one")
    if not len(logprobs) == len(advantages) == len(targets):
        raise TrainingError(f"datum {index}: logprobs/advantages must have one value per target token")
    if not (np.isfinite(logprobs).all() and np.isfinite(advantages).all()):
        raise TrainingError(f"datum {index}: logprobs/advantages must be finite")
    return TrainDatum(tuple(model_input + targets[-1:]), np.asarray(logprobs), np.asarray(advantages))


def parse_adam(raw: Any) -> dict[str, float]:
    """Tinker's AdamParams (learning_rate, beta1, beta2, eps, weight_decay)."""
    raw = raw if isinstance(raw, Mapping) else {}
    out = {"learning_rate": 1e-4, "beta1": 0.9, "beta2": 0.95, "eps": 1e-12, "weight_decay": 0.0}
    for key in out:
        if key in raw:
            try:
                out[key] = float(raw[key])
            except (TypeError, ValueError):
                raise TrainingError(f"adam_params.{key} must be a number") from None
    if out["learning_rate"] < 0 or not 0 <= out["beta1"] < 1 or not 0 <= out["beta2"] < 1 or out["eps"] <= 0:
        raise TrainingError("adam_params out of range (learning_rate >= 0, 0 <= beta < 1, eps > 0)")
    return out


@dataclass
class Trainer:
    """Gradient accumulator and optimizer around one `PolicyModel`."""

    model: PolicyModel
    grads: dict[str, np.ndarray] = field(default_factory=dict)
    pending_datums: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    accumulated: dict[str, dict[str, Any]] = field(default_factory=dict)  # request_id -> answer, this step
    last_step: tuple[str, dict[str, Any]] | None = None  # (request_id, answer) of the last optim_step
    # what the service did: a replay is a repeated request_id answered from memory
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("forward_backward_applied", "forward_backward_replayed", "datums_applied", "optim_steps_applied",
         "optim_steps_replayed"), 0))

    def forward_backward(self, datums: Sequence[TrainDatum], loss_fn: str,
                         config: Mapping[str, float] | None = None, request_id: str | None = None) -> dict[str, Any]:
        """Accumulate the datums' gradient. A `request_id` already accumulated since the last
        `optim_step` (a client retrying a call whose answer was lost) is answered from memory
        and adds nothing."""
        if loss_fn not in LOSS_FNS:
            raise TrainingError(f"unknown loss_fn {loss_fn!r} (choose from {', '.join(LOSS_FNS)})")
        config = dict(config or {})
        low, high = float(config.get("clip_low_threshold", 0.8)), float(config.get("clip_high_threshold", 1.2))
        with self.lock:
            if request_id is not None and request_id in self.accumulated:
                self.counts["forward_backward_replayed"] += 1
                return {**self.accumulated[request_id], "replayed": True}
            params = self.model.params
            outputs, total_loss, tokens, clipped = [], 0.0, 0, 0
            batch: dict[str, np.ndarray] = {}  # merged only once every datum scored: all or nothing
            for index, datum in enumerate(datums):
                try:
                    out = self._one(params, datum, loss_fn, low, high, batch)
                except ValueError as exc:  # a sequence the policy's grammar cannot have produced
                    raise TrainingError(f"datum {index}: {exc}") from None
                outputs.append({"logprobs": {"data": out["logprobs"], "dtype": "float32",
                                             "shape": [datum.n_targets]},
                                "loss": out["loss"]})
                total_loss += out["loss"]
                tokens += out["tokens"]
                clipped += out["clipped"]
            for name, grad in batch.items():
                self.grads[name] = self.grads[name] + grad if name in self.grads else grad
            self.pending_datums += len(datums)
            self.counts["forward_backward_applied"] += 1
            self.counts["datums_applied"] += len(datums)
            metrics = {"loss:sum": total_loss, "tokens:sum": float(tokens), "clipped:sum": float(clipped),
                       "datums:sum": float(len(datums))}
            result = {"loss_fn_output_type": "TensorData", "loss_fn_outputs": outputs, "metrics": metrics}
            if request_id is not None:
                self.accumulated[request_id] = result
        return result

    def _one(self, params: dict[str, np.ndarray], datum: TrainDatum, loss_fn: str,
             low: float, high: float, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        tokens = datum.tokens
        mask = completion_mask(tokens)
        new_lp = self.model.sequence_logprobs(tokens, mask, params=params)[1:]  # aligned with targets
        sampled = np.asarray(mask[1:], dtype=bool)
        ratio = np.where(sampled, np.exp(new_lp - datum.sampler_logprobs), 0.0)
        adv = np.where(sampled, datum.advantages, 0.0)
        if loss_fn == "importance_sampling":
            loss = -float((ratio * adv).sum())
            weights = ratio * adv
            clipped = 0
        else:  # ppo: the clipped surrogate; a clipped token carries no gradient
            clipped_ratio = np.clip(ratio, low, high)
            unclipped_term, clipped_term = ratio * adv, clipped_ratio * adv
            use_unclipped = unclipped_term <= clipped_term
            loss = -float(np.minimum(unclipped_term, clipped_term).sum())
            weights = np.where(use_unclipped, ratio * adv, 0.0)
            clipped = int((sampled & ~use_unclipped).sum())
        # d(-sum w_i * logp_i)/dθ with w_i = ratio_i * A_i is the gradient of the loss above.
        full_weights = np.concatenate([[0.0], weights])
        grads = self.model.logprob_grads(tokens, mask, full_weights, params=params)
        for name, grad in grads.items():
            batch[name] = batch[name] - grad if name in batch else -grad
        return {"logprobs": [float(x) for x in np.where(sampled, new_lp, 0.0)], "loss": loss,
                "tokens": int(sampled.sum()), "clipped": clipped}

    def optim_step(self, adam: Mapping[str, float], request_id: str | None = None) -> dict[str, Any]:
        """Apply the accumulated gradient; repeating the last step's `request_id` returns that
        step's answer instead of stepping again."""
        with self.lock:
            if request_id is not None and self.last_step is not None and self.last_step[0] == request_id:
                self.counts["optim_steps_replayed"] += 1
                return {**self.last_step[1], "replayed": True}
            if not self.grads:
                raise TrainingError("optim_step without forward_backward: no accumulated gradient")
            norm = float(np.sqrt(sum(float((g * g).sum()) for g in self.grads.values())))
            version = self.model.apply_adam(self.grads, lr=adam["learning_rate"], beta1=adam["beta1"],
                                            beta2=adam["beta2"], eps=adam["eps"],
                                            weight_decay=adam["weight_decay"])
            datums, self.grads, self.pending_datums = self.pending_datums, {}, 0
            self.accumulated = {}
            self.counts["optim_steps_applied"] += 1
            result = {"version": version, "metrics": {"grad_norm": norm, "datums": float(datums)}}
            if request_id is not None:
                self.last_step = (request_id, result)
        return result

    def save(self, path: str) -> dict[str, Any]:
        with self.lock:
            base = self.model.save(path)
        return {"path": str(base), "version": self.model.version}

    def load(self, path: str) -> dict[str, Any]:
        try:
            loaded = PolicyModel.load(path)
        except (OSError, KeyError, ValueError) as exc:
            raise TrainingError(f"cannot load policy state {path!r}: {exc}") from None
        with self.lock:
            self.model.load_state_from(loaded)
            self.grads, self.pending_datums, self.accumulated, self.last_step = {}, 0, {}, None
        return {"path": path, "version": self.model.version}
