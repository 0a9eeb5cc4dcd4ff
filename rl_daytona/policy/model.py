"""The built-in policy model: a log-linear autoregressive policy over command pieces.

Invariant: the logprob of a piece is a function of (params, context ids, completion prefix)
only, computed by `features.decide` for both sampling and training; so at temperature 1
`sequence_logprobs` reproduces the sampler's logprobs exactly, and `logprob_grads` is the
exact gradient of sum_i w_i * logprob_i. Params change only in `apply_adam`, which bumps
`version`.

Decisions do not depend on the params, so each turn's observation and the decisions made
after it are kept (`TurnMemo`, keyed by a digest of the context ids): the attempts of a group
that see the same context, and the trainer scoring a datum the sampler just produced (twice:
logprobs, then gradients), reuse them instead of computing every feature again. One memo
serves every model of the process (`SHARED_MEMO`): the sampler of each new weights version too.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from rl_daytona.policy import grammar as G
from rl_daytona.policy import params as P
from rl_daytona.policy.features import Decision, decide
from rl_daytona.policy.observe import Observation, observe, observe_turns

STATE_FORMAT = "rl_daytona.builtin/4"  # /2: replacement keys valued params.NEW_GAIN; /3: turn_0..turn_15; /4: progressing


@dataclass(frozen=True)
class Step:
    """One sampled or scored piece: its decision, the chosen piece and where it sits."""

    decision: Decision
    token: int
    position: int


@dataclass(frozen=True)
class Sampled:
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    top: tuple[tuple[tuple[int, float], ...], ...]
    finished: bool


class Turn:
    """One context's observation and the decisions taken after it, by completion prefix.

    At most `MAX_DECISIONS` are kept: a context every attempt of a task meets (its first turns)
    stays in the memo for the whole run, and past the cap its further prefixes are decided
    without being kept, so no turn grows without bound."""

    MAX_DECISIONS = 256
    __slots__ = ("obs", "_decisions")

    def __init__(self, obs: Observation) -> None:
        self.obs = obs
        self._decisions: dict[tuple[int, ...], Decision] = {}

    def decide(self, prefix: Sequence[int], state: G.GrammarState) -> Decision:
        key = tuple(prefix)
        found = self._decisions.get(key)
        if found is None:
            found = decide(self.obs, prefix, state)
            if len(self._decisions) < self.MAX_DECISIONS:
                self._decisions[key] = found
        return found


class TurnMemo:
    """The last `size` turns by context (LRU): exact, since a turn is a pure function of the
    context ids (`observe`) and a decision of the turn and the prefix (`decide`). A turn with
    its decisions holds ~70 KB on calc (~1.4 KB a decision, at most `Turn.MAX_DECISIONS`), so
    the default keeps ~70 MB, ~370 MB at worst: the distinct turns of a train step up to ~150
    attempts, so its datums are scored from the memo."""

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._turns: OrderedDict[bytes, Turn] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    @staticmethod
    def key(context_ids: Sequence[int]) -> bytes:
        return hashlib.blake2b(np.asarray(context_ids, dtype=np.int64).tobytes(), digest_size=16).digest()

    def get(self, key: bytes) -> Turn | None:
        with self._lock:
            turn = self._turns.get(key)
            if turn is not None:
                self._turns.move_to_end(key)
                self.hits += 1
            else:
                self.misses += 1
            return turn

    def put(self, key: bytes, obs: Observation) -> Turn:
        with self._lock:
            turn = self._turns.get(key)
            if turn is None:
                turn = self._turns[key] = Turn(obs)
                while len(self._turns) > self.size:
                    self._turns.popitem(last=False)
            return turn

    def turn(self, context_ids: Sequence[int]) -> Turn:
        key = self.key(context_ids)
        return self.get(key) or self.put(key, observe(context_ids))


SHARED_MEMO = TurnMemo()  # every model of a process: decisions are the same under any weights


def _normalised(lp: np.ndarray) -> np.ndarray:
    p = np.exp(lp)
    return p / p.sum()


def _top(decision: Decision, lp: np.ndarray, k: int) -> tuple[tuple[int, float], ...]:
    if k <= 0:
        return ()
    order = np.argsort(-lp, kind="stable")[:k]
    return tuple((decision.candidates[i], float(lp[i])) for i in order)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max()
    return shifted - np.log(np.exp(shifted).sum())


def completion_spans(loss_mask: Sequence[int]) -> list[tuple[int, int]]:
    """[start, end) of every maximal run of mask 1 (each run is one completion)."""
    spans, start = [], None
    for i, m in enumerate(list(loss_mask) + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append((start, i))
            start = None
    return spans


class PolicyModel:
    """Params, the sampler, exact logprobs and their gradients, Adam, save/load."""

    def __init__(self, params: dict[str, np.ndarray] | None = None, version: int = 0,
                 memo: TurnMemo | None = None) -> None:
        from rl_daytona.policy.prior import initial_params

        self.memo = memo if memo is not None else SHARED_MEMO
        self.params: dict[str, np.ndarray] = params if params is not None else initial_params()
        self.version = version
        self._adam_m = {k: np.zeros_like(v) for k, v in self.params.items()}
        self._adam_v = {k: np.zeros_like(v) for k, v in self.params.items()}
        self._adam_t = 0

    # -- scoring -------------------------------------------------------------------------
    def logits(self, decision: Decision, params: dict[str, np.ndarray] | None = None) -> np.ndarray:
        params = self.params if params is None else params
        out = np.zeros(len(decision.candidates))
        for block in decision.blocks:
            out += (params[block.param].reshape(-1)[block.index] * block.value).sum(axis=1)
        return out

    def sample(self, context_ids: Sequence[int], rng: np.random.Generator, temperature: float = 1.0,
               max_tokens: int = 64) -> tuple[list[int], list[float]]:
        """Sample one completion after `context_ids`; logprobs are under the sampling distribution."""
        sampled = self.sample_detailed(context_ids, rng, temperature, max_tokens)
        return list(sampled.token_ids), list(sampled.logprobs)

    def sample_detailed(self, context_ids: Sequence[int], rng: np.random.Generator, temperature: float = 1.0,
                        max_tokens: int = 64, top_k: int = 0) -> "Sampled":
        """`sample`, plus the top-k alternatives of every step and whether the command finished."""
        turn = self.memo.turn(context_ids)
        params = self.params  # one snapshot: a training step swapping weights mid-sample cannot mix them
        ids: list[int] = []
        lps: list[float] = []
        tops: list[tuple[tuple[int, float], ...]] = []
        state = G.START
        while state != G.DONE and len(ids) < max_tokens:
            decision = turn.decide(ids, state)
            lp = self._sampling_logprobs(decision, temperature, params)
            j = 0 if len(lp) == 1 else int(rng.choice(len(lp), p=_normalised(lp)))
            ids.append(decision.candidates[j])
            lps.append(float(lp[j]))
            tops.append(_top(decision, lp, top_k))
            state = G.advance(state, decision.candidates[j])
        return Sampled(tuple(ids), tuple(lps), tuple(tops), state == G.DONE)

    def _sampling_logprobs(self, decision: Decision, temperature: float,
                           params: dict[str, np.ndarray] | None = None) -> np.ndarray:
        if len(decision.candidates) == 1:
            return np.zeros(1)
        logits = self.logits(decision, params)
        if temperature <= 0:
            best = np.zeros_like(logits) - np.inf
            best[int(np.argmax(logits))] = 0.0
            return best
        return log_softmax(logits / temperature)

    def steps(self, token_ids: Sequence[int], loss_mask: Sequence[int]) -> Iterator[Step]:
        """Every masked piece with the decision it was chosen from."""
        spans = completion_spans(loss_mask)
        ids = np.asarray(token_ids, dtype=np.int64)  # once: each turn's key hashes a view of it
        keys = [self.memo.key(ids[:start]) for start, _ in spans]
        turns = [self.memo.get(key) for key in keys]
        if any(turn is None for turn in turns):
            observations = observe_turns(token_ids, [s for s, _ in spans])
            turns = [turn or self.memo.put(key, obs) for turn, key, obs in zip(turns, keys, observations)]
        for (start, end), turn in zip(spans, turns):
            yield from self._span_steps(turn, token_ids, start, end)

    def _span_steps(self, turn: Turn, token_ids: Sequence[int], start: int, end: int) -> Iterator[Step]:
        prefix: list[int] = []
        state = G.START
        for pos in range(start, end):
            token = int(token_ids[pos])
            decision = turn.decide(prefix, state)
            if token not in decision.candidates:
                raise ValueError(f"token {token} at position {pos} is not a candidate of slot {state.slot!r}")
            yield Step(decision, token, pos)
            prefix.append(token)
            state = G.advance(state, token)

    def sequence_logprobs(self, token_ids: Sequence[int], loss_mask: Sequence[int],
                          temperature: float = 1.0, params: dict[str, np.ndarray] | None = None) -> np.ndarray:
        """Logprob of every masked token given everything before it (0.0 where mask is 0)."""
        params = self.params if params is None else params
        out = np.zeros(len(token_ids))
        for step in self.steps(token_ids, loss_mask):
            lp = self._sampling_logprobs(step.decision, temperature, params)
            out[step.position] = lp[step.decision.candidates.index(step.token)]
        return out

    def logprob_grads(self, token_ids: Sequence[int], loss_mask: Sequence[int],
                      weights_per_token: Sequence[float],
                      params: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Gradient of sum_i w_i * logprob_i (temperature 1) with respect to every param."""
        params = self.params if params is None else params
        grads = {k: np.zeros_like(v) for k, v in params.items()}
        for step in self.steps(token_ids, loss_mask):
            weight = float(weights_per_token[step.position])
            if weight == 0.0 or len(step.decision.candidates) == 1:
                continue
            probs = np.exp(log_softmax(self.logits(step.decision, params)))
            coef = -weight * probs
            coef[step.decision.candidates.index(step.token)] += weight
            for block in step.decision.blocks:
                np.add.at(grads[block.param].reshape(-1), block.index, coef[:, None] * block.value)
        return grads

    # -- training ------------------------------------------------------------------------
    def apply_adam(self, grads: dict[str, np.ndarray], lr: float, beta1: float = 0.9,
                   beta2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.0) -> int:
        """One Adam step DESCENDING `grads` (gradients of a loss); returns the new version.

        For policy gradient pass the loss gradient, i.e. `-logprob_grads(...)`.
        """
        self._adam_t += 1
        t = self._adam_t
        new_params = dict(self.params)
        for name, grad in grads.items():
            g = np.asarray(grad, dtype=np.float64) + weight_decay * self.params[name]
            self._adam_m[name] = beta1 * self._adam_m[name] + (1 - beta1) * g
            self._adam_v[name] = beta2 * self._adam_v[name] + (1 - beta2) * g * g
            m_hat = self._adam_m[name] / (1 - beta1 ** t)
            v_hat = self._adam_v[name] / (1 - beta2 ** t)
            new_params[name] = self.params[name] - lr * m_hat / (np.sqrt(v_hat) + eps)
        self.params = new_params  # one assignment: samplers see old or new weights, never a mix
        self.version += 1
        return self.version

    def load_state_from(self, other: "PolicyModel") -> None:
        """Take `other`'s params, Adam state and version (resume), in place."""
        self._adam_m, self._adam_v, self._adam_t = other._adam_m, other._adam_v, other._adam_t
        self.params = other.params
        self.version = other.version

    # -- persistence ---------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write `<path>.npz` (params + Adam moments) and `<path>.json` (version, format)."""
        base = _base(path)
        arrays = {f"param/{k}": v for k, v in self.params.items()}
        arrays |= {f"adam_m/{k}": v for k, v in self._adam_m.items()}
        arrays |= {f"adam_v/{k}": v for k, v in self._adam_v.items()}
        np.savez(_with(base, ".npz"), **arrays)
        meta = {"format": STATE_FORMAT, "version": self.version, "adam_t": self._adam_t,
                "shapes": {k: list(v.shape) for k, v in self.params.items()}}
        _with(base, ".json").write_text(json.dumps(meta, indent=2))
        return base

    @classmethod
    def load(cls, path: str | Path) -> "PolicyModel":
        base = _base(path)
        meta = json.loads(_with(base, ".json").read_text())
        if meta.get("format") != STATE_FORMAT:
            raise ValueError(f"{base}.json is not a built-in policy state ({meta.get('format')!r})")
        expected = {k: list(v) for k, v in P.SHAPES.items()}
        if meta.get("shapes") != expected:
            changed = sorted(k for k in expected if (meta.get("shapes") or {}).get(k) != expected[k])
            raise ValueError(f"{base}.json was saved with a different parameter layout ({', '.join(changed)})")
        with np.load(_with(base, ".npz")) as data:
            arrays = {k: data[k] for k in data.files}
        params = {k: arrays[f"param/{k}"] for k in P.SHAPES}
        model = cls(params=params, version=int(meta["version"]))
        model._adam_m = {k: arrays[f"adam_m/{k}"] for k in P.SHAPES}
        model._adam_v = {k: arrays[f"adam_v/{k}"] for k in P.SHAPES}
        model._adam_t = int(meta.get("adam_t", 0))
        return model


def _base(path: str | Path) -> Path:
    """`path` without a trailing .npz/.json (other dots, as in `policy.step1`, are kept)."""
    p = Path(path)
    return p.with_suffix("") if p.suffix in (".npz", ".json") else p


def _with(base: Path, suffix: str) -> Path:
    return base.with_name(base.name + suffix)
