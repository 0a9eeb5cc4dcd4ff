"""Everything that crosses an actor boundary: frozen dataclasses, never dicts.

Invariant: a `Rollout` is self-describing. Its `status` says whether the reward means
anything; an infrastructure failure is `infra_error`, never a silent reward 0.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field, fields
from typing import Any


class RolloutStatus(str, enum.Enum):
    OK = "ok"
    AGENT_ERROR = "agent_error"  # the policy endpoint failed or replied with garbage
    INFRA_ERROR = "infra_error"  # a sandbox could not be had, died, or the plumbing broke
    TIMEOUT = "timeout"  # the rollout's wall-clock deadline passed


@dataclass(frozen=True)
class Trajectory:
    """One attempt stored once as the full token sequence.

    `token_ids[i]` was sampled by the policy when `loss_mask[i]` is 1 (then `logprobs[i]` is the
    sampler's logprob), else it is prompt/observation context (logprob 0.0, mask 0).
    `messages` keeps the readable chat for humans; it is never re-tokenised.
    `segment_starts`: offsets where a new segment (a new datum) begins, because the next prompt
    did not extend the previous prompt + sample (`learn.segments`); empty: one segment.
    """

    token_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    loss_mask: tuple[int, ...] = ()
    messages: tuple[dict[str, Any], ...] = ()
    turns: int = 0
    finish_reason: str = ""
    policy_version: int = 0
    segment_starts: tuple[int, ...] = ()

    @property
    def sampled_tokens(self) -> int:
        return sum(self.loss_mask)


@dataclass(frozen=True)
class PhaseTimings:
    """Seconds spent in each phase of one rollout."""

    claim: float = 0.0
    seed: float = 0.0
    agent: float = 0.0
    grade: float = 0.0
    total: float = 0.0


@dataclass(frozen=True)
class Rollout:
    rollout_id: str
    task_id: str
    variant: str
    group_id: str
    attempt: int
    reward: float
    status: RolloutStatus
    timings: PhaseTimings
    trajectory: Trajectory
    sandbox_id: str = ""
    error: str = ""
    tests_passed: int = 0
    tests_expected: int = 0
    node_id: str = ""
    actor: str = ""
    started_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The rollout as JSON-ready data (what `asdict` gives, the status as its value), built
        field by field: `asdict` copies every token id one by one, a tenth of the driver's CPU."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["status"] = self.status.value
        data["timings"] = asdict(self.timings)
        data["trajectory"] = {f.name: getattr(self.trajectory, f.name) for f in fields(self.trajectory)}
        return data


@dataclass(frozen=True)
class RolloutRequest:
    """One attempt to run: which task instance, which group, which attempt number."""

    rollout_id: str
    task_id: str
    group_id: str
    attempt: int


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits applied to every command run in a local sandbox."""

    cpu_seconds: int = 30
    memory_mb: int = 1024
    max_processes: int = 64
    max_file_mb: int = 16
    max_output_bytes: int = 64 * 1024
    workspace_mb: int = 64


@dataclass(frozen=True)
class PoolStats:
    created: int = 0
    forked: int = 0
    claimed: int = 0
    released: int = 0
    failed: int = 0
    deleted: int = 0
    probe_failed: int = 0
    reclaimed: int = 0  # claimed by a RolloutActor that was lost, deleted when the fleet said so
    reaped: int = 0  # the run's sandboxes found at start (or at a restart) and deleted
    hedged: int = 0  # creates past their p95 that got a twin
    discarded: int = 0  # sandboxes made beyond what was claimed (stragglers, hedges), deleted unused
    claim_wait_p50: float = 0.0
    claim_wait_p95: float = 0.0
    in_use: int = 0
    ready: int = 0


@dataclass(frozen=True)
class Settings:
    """Agent-loop and rollout settings for one run."""

    policy_url: str = ""
    model: str = "builtin"
    max_turns: int = 32
    max_tokens: int = 256
    temperature: float = 1.0
    output_limit: int = 4000
    exec_timeout: float = 30.0
    rollout_deadline: float = 600.0
    extra: dict[str, Any] = field(default_factory=dict)
