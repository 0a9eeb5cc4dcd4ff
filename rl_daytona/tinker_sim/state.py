"""What tinker-sim holds: sessions, training models, sampling sessions, futures, checkpoints.

Invariant: a training call is applied at most once. The SDK numbers every call of a training
client (`seq_id`) and repeats the number when it retries, so `(model_id, seq_id)` is the
idempotency key: a call seen before is answered with its first future and not applied again.
Samples are keyed the same way by `(sampling_session_id, seq_id)`. Checkpoints are files
under `state_dir` (`tinker://<run>/<weights|sampler_weights>/<name>` ->
`state_dir/<run>/<kind>/<name>.{npz,json}`), so a sim restarted on the same folder loads them.
Only the built-in model is served (`BASE_MODEL`); any other name is refused with one line.
"""

from __future__ import annotations

import itertools
import re
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rl_daytona.policy.model import PolicyModel
from rl_daytona.policy.training import Trainer, TrainingError

BASE_MODEL = "builtin"
KINDS = ("weights", "sampler_weights")
_MAX_FUTURES = 50_000
_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")


class NotFound(LookupError):
    """An id or path the sim does not know (HTTP 404)."""


def unknown_model_message(name: str) -> str:
    return f"base model {name!r} is not served here: tinker-sim serves only its built-in model {BASE_MODEL!r}"


@dataclass
class Future:
    """A request's answer: JSON (`body`) or protobuf (`proto`), or an error; `polls_left` try_again first."""

    body: dict[str, Any] | None = None
    proto: bytes | None = None
    error: str = ""
    category: str = "server"
    polls_left: int = 0


@dataclass
class TrainingModel:
    model_id: str
    base_model: str
    rank: int
    trainer: Trainer
    seen: dict[int, str] = field(default_factory=dict)  # seq_id -> request_id of its future
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class Sampler:
    sampler_id: str
    base_model: str
    model_path: str | None
    model: PolicyModel
    seen: dict[int, str] = field(default_factory=dict)


class SimState:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self.sessions: dict[str, dict[str, Any]] = {}
        self.models: dict[str, TrainingModel] = {}
        self.samplers: dict[str, Sampler] = {}
        self.futures: OrderedDict[str, Future] = OrderedDict()
        self.base = PolicyModel()  # the untrained weights every new model and base sampler starts from
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self._prefix, self._ids = uuid.uuid4().hex[:12], itertools.count(1)  # future ids: unique, cheap

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    # -- futures -------------------------------------------------------------------------------
    def add_future(self, future: Future) -> str:
        with self.lock:
            request_id = f"{self._prefix}-{next(self._ids)}"
            self.futures[request_id] = future
            while len(self.futures) > _MAX_FUTURES:
                self.futures.popitem(last=False)
        return request_id

    def future(self, request_id: str) -> Future:
        try:
            return self.futures[request_id]
        except KeyError:
            raise NotFound(f"no future {request_id!r}") from None

    # -- sessions, models, samplers ------------------------------------------------------------
    def new_session(self) -> str:
        session_id = f"sim-{uuid.uuid4().hex[:12]}"
        self.sessions[session_id] = {"finished": False}
        return session_id

    def check_base_model(self, name: str | None) -> None:
        if name not in (None, BASE_MODEL):
            raise TrainingError(unknown_model_message(str(name)))

    def create_model(self, session_id: str, seq: int, base_model: str, rank: int,
                     from_state: PolicyModel | None = None, with_adam: bool = True) -> TrainingModel:
        self.check_base_model(base_model)
        model_id = f"{session_id}:train:{seq}"
        with self.lock:
            if model_id not in self.models:  # a retried create returns the same model
                model = _copy(from_state if from_state is not None else self.base, with_adam)
                self.models[model_id] = TrainingModel(model_id, base_model, rank, Trainer(model))
            return self.models[model_id]

    def model(self, model_id: str) -> TrainingModel:
        try:
            return self.models[model_id]
        except KeyError:
            raise NotFound(f"no training model {model_id!r}") from None

    def create_sampler(self, session_id: str, seq: int, model_path: str | None, base_model: str | None) -> Sampler:
        sampler_id = f"{session_id}:sample:{seq}"
        with self.lock:
            if sampler_id in self.samplers:
                return self.samplers[sampler_id]
        if model_path:
            model = self.load(model_path)
        else:
            self.check_base_model(base_model)
            model = self.base
        sampler = Sampler(sampler_id, BASE_MODEL, model_path, model)
        with self.lock:
            return self.samplers.setdefault(sampler_id, sampler)

    def sampler(self, sampler_id: str) -> Sampler:
        try:
            return self.samplers[sampler_id]
        except KeyError:
            raise NotFound(f"no sampling session {sampler_id!r}") from None

    # -- checkpoints ---------------------------------------------------------------------------
    def checkpoint_file(self, path: str) -> Path:
        """The file base of a `tinker://run/kind/name` path (TrainingError when it is not one)."""
        parts = path[len("tinker://"):].split("/") if path.startswith("tinker://") else []
        if len(parts) != 3 or parts[1] not in KINDS or not all(_NAME.match(p) for p in (parts[0], parts[2])):
            raise TrainingError(f"{path!r} is not a tinker://<run>/<weights|sampler_weights>/<name> path")
        return self.state_dir / parts[0].replace(":", "_") / parts[1] / parts[2]

    def save(self, model: TrainingModel, kind: str, name: str | None) -> str:
        name = name or f"{kind}-{model.trainer.model.version:06d}"
        if not _NAME.match(name):
            raise TrainingError(f"checkpoint name {name!r} may hold only letters, digits and _.:-")
        path = f"tinker://{model.model_id}/{kind}/{name}"
        base = self.checkpoint_file(path)
        base.parent.mkdir(parents=True, exist_ok=True)
        with model.trainer.lock:
            model.trainer.model.save(base)
        return path

    def load(self, path: str) -> PolicyModel:
        base = self.checkpoint_file(path)
        if not base.with_name(base.name + ".json").exists():
            raise NotFound(f"no checkpoint at {path}")
        try:
            return PolicyModel.load(base)
        except (OSError, KeyError, ValueError) as exc:
            raise TrainingError(f"cannot load {path}: {exc}") from None


def _copy(model: PolicyModel, with_adam: bool) -> PolicyModel:
    out = PolicyModel(params=dict(model.params), version=model.version)
    if with_adam:
        out._adam_m, out._adam_v, out._adam_t = dict(model._adam_m), dict(model._adam_v), model._adam_t
    return out


def load_into(trainer: Trainer, loaded: PolicyModel, optimizer: bool) -> None:
    """A checkpoint's weights (and its Adam moments when `optimizer`) into a training model."""
    with trainer.lock:
        if optimizer:
            trainer.model.load_state_from(_copy(loaded, with_adam=True))
        else:
            trainer.model.params, trainer.model.version = dict(loaded.params), loaded.version
        trainer.grads, trainer.pending_datums = {}, 0
