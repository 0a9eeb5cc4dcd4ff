"""The Learner actor: complete groups in, one optimizer step out.

    begin_step(step, {group_id: size})   the groups this step dispatched
    add(rollout)                         through Ray, as each attempt finishes -> retries to dispatch
    train_step()                         chunks of whole groups -> forward_backward per chunk, one optim_step

Invariant: the Learner never trains on an incomplete group, never puts an infrastructure
failure into a baseline, and a step with nothing to learn from is skipped and says why. A
training call is retried a few times; if it still fails the step fails with one line and no
optim_step is sent, so the service never applies half a step. Training calls are repeated
under one `RetryPolicy` (same arguments, so the same idempotency key) until one succeeds or
too many fail in a row; each step reports how many calls it sent and how many failed.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from rl_daytona.learn.clients import AdamParams, TrainingClient
from rl_daytona.learn.datum import Datum, DatumError
from rl_daytona.learn.groups import DEFAULT_CHUNK_BYTES, GroupCollector, InfraPolicy, group_datums, pack_groups
from rl_daytona.learn.retry import CallStats, Retrier, RetryPolicy
from rl_daytona.types import Rollout, RolloutRequest


@dataclass(frozen=True)
class LearnerConfig:
    loss_fn: str = "importance_sampling"
    adam: AdamParams = field(default_factory=lambda: AdamParams(learning_rate=0.2))
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    normalize_std: bool = False
    max_retries_infra: int = 1
    max_staleness: int | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    def __post_init__(self) -> None:
        if self.chunk_bytes < 1:
            raise ValueError(f"--chunk-bytes must be positive, got {self.chunk_bytes}")
        if self.adam.learning_rate < 0:
            raise ValueError(f"--lr must be >= 0, got {self.adam.learning_rate}")
        if self.loss_fn not in ("importance_sampling", "ppo"):
            raise ValueError(f"--loss must be importance_sampling or ppo, got {self.loss_fn!r}")


@dataclass(frozen=True)
class StepReport:
    step: int
    trained: bool
    skipped_reason: str
    version: int
    datums: int
    chunks: int
    bytes_sent: int
    chunk_bytes: tuple[int, ...]
    loss: float
    train_seconds: float
    counts: dict[str, int]
    rollouts_ok: int
    train_pass_rate: float
    mean_turns: float
    rollout_bytes: tuple[tuple[int, int], ...]  # (turns, datum bytes) per trained rollout
    sampler_path: str = ""  # the new weights for a separate sampling service (Tinker), when there is one
    calls: CallStats = CallStats()  # training calls this step sent (retries included) and how many failed
    checkpoint: str = ""  # where the state after this step was saved, when it trained and was asked to


@dataclass
class _StepState:
    collector: GroupCollector
    groups: list[list[Datum]] = field(default_factory=list)
    scored: list[Rollout] = field(default_factory=list)
    datum_errors: int = 0


class Learner:
    """Plain class; `runtime.start_learner` makes it a Ray actor.

    Steps are kept apart, so with `--off-policy` the rollouts of step t+1 can arrive while
    step t is still training.
    """

    def __init__(self, client: TrainingClient | Any, config: LearnerConfig, version: int = 0) -> None:
        self.client = client  # a TrainingClient, or a zero-arg factory (built inside the actor)
        self.config = config
        self.version = version
        self._steps: dict[int, _StepState] = {}
        self._group_step: dict[str, int] = {}
        self._retrier = Retrier(config.retry)

    def _client(self) -> TrainingClient:
        if callable(self.client) and not hasattr(self.client, "forward_backward"):
            self.client = self.client()
        return self.client

    async def begin_step(self, step: int, groups: dict[str, int]) -> None:
        if step in self._steps:
            raise ValueError(f"step {step} already begun")
        collector = GroupCollector(InfraPolicy(self.config.max_retries_infra), self.config.max_staleness)
        for group_id, size in groups.items():
            if group_id in self._group_step:
                raise ValueError(f"group {group_id!r} already belongs to step {self._group_step[group_id]}")
            collector.expect(group_id, size)
            self._group_step[group_id] = step
        self._steps[step] = _StepState(collector)

    async def add(self, rollout: Rollout) -> list[RolloutRequest]:
        """Take one finished attempt; returns the attempts to dispatch again (infra retries)."""
        step = self._group_step.get(rollout.group_id)
        if step is None or step not in self._steps:
            raise ValueError(f"rollout {rollout.rollout_id}: group {rollout.group_id!r} is not part of an open step")
        state = self._steps[step]
        outcome = state.collector.add(rollout, self.version)
        for members in outcome.complete:
            state.scored.extend(members)
            try:
                datums = group_datums(members, self.config.normalize_std)
            except DatumError:
                state.datum_errors += 1
                continue
            if datums:
                state.groups.append(datums)
        return [RolloutRequest(rollout_id=f"{r.rollout_id}-retry{state.collector.counts.retried}",
                               task_id=r.task_id, group_id=r.group_id, attempt=r.attempt)
                for r in outcome.retry]

    async def counts(self, step: int) -> dict[str, int]:
        return self._counts(self._steps[step])

    @staticmethod
    def _counts(state: _StepState) -> dict[str, int]:
        c = state.collector.counts
        out = asdict(c)
        out["dropped"] = c.dropped
        out["pending"] = state.collector.pending()
        out["groups_without_tokens"] = state.datum_errors
        return out

    async def train_step(self, step: int, checkpoint: str = "") -> StepReport:
        """One optimizer step on every complete group of `step` (or a skip that says why); with
        `checkpoint`, a step that trained then saves the training state under that name."""
        state = self._steps.pop(step, None)
        if state is None:
            raise ValueError(f"train_step({step}) for a step that was never begun (or already trained)")
        started = time.monotonic()
        state.collector.abandon_pending()
        chunks = pack_groups(state.groups, self.config.chunk_bytes)
        datums = sum(len(c) for c in chunks)
        turns = {r.rollout_id: r.trajectory.turns for r in state.scored}
        scored = state.scored
        base = dict(step=step, datums=datums, chunks=len(chunks),
                    chunk_bytes=tuple(sum(d.nbytes for d in c) for c in chunks),
                    counts=self._counts(state), rollouts_ok=len(scored),
                    train_pass_rate=sum(r.reward >= 1.0 for r in scored) / len(scored) if scored else 0.0,
                    mean_turns=sum(r.trajectory.turns for r in scored) / len(scored) if scored else 0.0,
                    rollout_bytes=tuple((turns[d.rollout_id], d.nbytes) for g in state.groups for d in g))
        if not chunks:
            reason = ("no complete group had differing rewards" if scored
                      else "no complete group (every group was dropped)")
            return StepReport(trained=False, skipped_reason=reason, version=self.version, bytes_sent=0,
                              loss=0.0, train_seconds=time.monotonic() - started, **base)
        client, calls_before = self._client(), self._retrier.stats
        loss, sent = 0.0, 0
        for chunk in chunks:
            result = await self._retrier.call(client.forward_backward, chunk, self.config.loss_fn)
            loss += result.loss
            sent += result.bytes_sent
        stepped = await self._retrier.call(client.optim_step, self.config.adam)
        self.version = stepped.version
        saved = await self._retrier.call(client.save_state, checkpoint) if checkpoint else ""
        return StepReport(trained=True, skipped_reason="", version=self.version, bytes_sent=sent, loss=loss,
                          train_seconds=time.monotonic() - started,
                          sampler_path=getattr(stepped, "sampler_path", "") or "",
                          calls=self._retrier.stats.minus(calls_before), checkpoint=saved, **base)

    async def save(self, name: str) -> str:
        """Save the training state under `name` (retried like every training call); its path."""
        return await self._retrier.call(self._client().save_state, name)

    async def publish(self, name: str) -> str:
        """Save the current weights for a separate sampler (a run resumed from a checkpoint
        samples them from its first rollout); their path, "" when the client has no sampler."""
        client = self._client()
        save = getattr(client, "save_for_sampler", None)
        return await self._retrier.call(save, name) if save is not None else ""

    async def call_stats(self) -> CallStats:
        """Every training call so far: attempts, failures, retries."""
        return self._retrier.stats

    async def get_version(self) -> int:
        return self.version

    async def close(self) -> None:
        client = self.client
        if hasattr(client, "close") and hasattr(client, "forward_backward"):
            await client.close()
