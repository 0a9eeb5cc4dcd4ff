"""Complete groups, group-relative advantages and byte-budget chunking (pure logic).

Invariant: every dispatched attempt ends in exactly one place: a complete group (trained on
or dropped as all-equal), a group dropped for infrastructure failures, a stale drop, or a
retry that is itself dispatched again, so `completed + dropped == dispatched` always holds.
An infrastructure failure or a rollout that hit its deadline (status timeout: a hung sandbox
looks the same as a hung agent from here) never enters a baseline as reward 0. Chunks hold whole groups only
and stay under the byte budget unless a single group alone exceeds it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from rl_daytona.learn.datum import Datum, DatumError, datums_from_rollout
from rl_daytona.types import Rollout, RolloutStatus

DEFAULT_CHUNK_BYTES = 5 * 1024 * 1024
REQUEST_OVERHEAD_BYTES = 256  # the forward_backward request's wrapper around its datums


@dataclass(frozen=True)
class InfraPolicy:
    """What to do with an attempt whose status is in `retry_statuses` (infrastructure errors and
    deadline timeouts): retry it up to `max_retries` times, then drop its whole group (a missing
    member would bias the baseline)."""

    max_retries: int = 1
    retry_statuses: tuple[RolloutStatus, ...] = (RolloutStatus.INFRA_ERROR, RolloutStatus.TIMEOUT)

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")


@dataclass
class GroupCounts:
    dispatched: int = 0  # attempts handed out, retries included
    completed: int = 0  # attempts that ended inside a complete group
    retried: int = 0  # infra failures sent back out (each retry is dispatched again)
    dropped_infra: int = 0  # attempts of groups dropped for infra failures (the failure included)
    dropped_stale: int = 0  # attempts sampled by a policy older than the staleness bound
    cancelled: int = 0  # attempts the step stopped waiting for
    groups_complete: int = 0
    groups_dropped_infra: int = 0
    groups_dropped_equal: int = 0  # complete, but every reward equal: nothing to learn
    groups_mixed: int = 0
    groups_all_pass: int = 0
    groups_all_fail: int = 0

    @property
    def dropped(self) -> int:
        return self.dropped_infra + self.dropped_stale + self.retried + self.cancelled


@dataclass
class _Group:
    size: int
    members: dict[int, Rollout] = field(default_factory=dict)
    retries: dict[int, int] = field(default_factory=dict)
    dead: bool = False
    reason: str = ""  # why it died: infra | stale | cancelled
    waiting: int = 0  # attempts of a dead group not yet arrived (cancelled ones are never awaited)


@dataclass(frozen=True)
class Outcome:
    """What `add` asks the caller to do: retry these attempts; these groups are complete."""

    retry: tuple[Rollout, ...] = ()
    complete: tuple[tuple[Rollout, ...], ...] = ()


class GroupCollector:
    """Collects rollouts of one step into complete groups."""

    def __init__(self, policy: InfraPolicy | None = None, max_staleness: int | None = None) -> None:
        self.policy = policy or InfraPolicy()
        self.max_staleness = max_staleness
        self.counts = GroupCounts()
        self._groups: dict[str, _Group] = {}

    def expect(self, group_id: str, size: int) -> None:
        if group_id in self._groups:
            raise ValueError(f"group {group_id!r} is already expected")
        if size < 1:
            raise ValueError(f"group {group_id!r} needs at least one attempt")
        self._groups[group_id] = _Group(size)
        self.counts.dispatched += size

    def pending(self) -> int:
        """Attempts of live groups still awaited."""
        return sum(g.size - len(g.members) for g in self._groups.values() if not g.dead)

    def add(self, rollout: Rollout, current_version: int | None = None) -> Outcome:
        group = self._groups.get(rollout.group_id)
        if group is None:
            raise ValueError(f"rollout {rollout.rollout_id} belongs to unknown group {rollout.group_id!r}")
        if group.dead:
            if group.reason == "cancelled":
                return Outcome()  # already counted as cancelled when the step gave up on it
            group.waiting -= 1
            if group.reason == "stale":
                self.counts.dropped_stale += 1
            else:
                self.counts.dropped_infra += 1
            return Outcome()
        if rollout.attempt in group.members:
            raise ValueError(f"attempt {rollout.attempt} of group {rollout.group_id!r} arrived twice")
        if rollout.status in self.policy.retry_statuses:
            used = group.retries.get(rollout.attempt, 0)
            if used < self.policy.max_retries:
                group.retries[rollout.attempt] = used + 1
                self.counts.retried += 1
                self.counts.dispatched += 1
                return Outcome(retry=(rollout,))
            return Outcome(complete=self._kill(group, counted_now=1))
        if self._stale(rollout, current_version):
            self.counts.dropped_stale += 1
            return Outcome(complete=self._kill(group, counted_now=0, stale=True))
        group.members[rollout.attempt] = rollout
        if len(group.members) < group.size:
            return Outcome()
        return Outcome(complete=(self._finish(group),))

    def _stale(self, rollout: Rollout, current_version: int | None) -> bool:
        if self.max_staleness is None or current_version is None:
            return False
        return current_version - rollout.trajectory.policy_version > self.max_staleness

    def _kill(self, group: _Group, counted_now: int, stale: bool = False) -> tuple:
        group.dead, group.reason = True, "stale" if stale else "infra"
        group.waiting = group.size - len(group.members) - 1
        self.counts.dropped_infra += counted_now + (len(group.members) if not stale else 0)
        if stale:
            self.counts.dropped_stale += len(group.members)
        else:
            self.counts.groups_dropped_infra += 1
        group.members.clear()
        return ()

    def _finish(self, group: _Group) -> tuple[Rollout, ...]:
        members = tuple(group.members[a] for a in sorted(group.members))
        self.counts.completed += len(members)
        self.counts.groups_complete += 1
        rewards = [r.reward for r in members]
        passed = sum(r >= 1.0 for r in rewards)
        if passed == len(rewards):
            self.counts.groups_all_pass += 1
        elif passed == 0:
            self.counts.groups_all_fail += 1
        if len(set(rewards)) <= 1:
            self.counts.groups_dropped_equal += 1
        else:
            self.counts.groups_mixed += 1
        return members

    def abandon_pending(self) -> int:
        """Give up on every attempt still awaited (the step is over): incomplete live groups are
        dropped with their members, and attempts not yet arrived are counted as cancelled (if they
        arrive later they are ignored). Returns the number of attempts cancelled."""
        cancelled = 0
        for group in self._groups.values():
            missing = group.waiting if group.dead else group.size - len(group.members)
            if group.dead and group.reason == "cancelled" or missing <= 0:
                continue
            if not group.dead:
                self.counts.dropped_infra += len(group.members)
                self.counts.groups_dropped_infra += 1
                group.members.clear()
            group.dead, group.reason, group.waiting = True, "cancelled", 0
            cancelled += missing
        self.counts.cancelled += cancelled
        return cancelled


def advantages(rewards: Sequence[float], normalize_std: bool = False, eps: float = 1e-6) -> np.ndarray:
    """Group-relative advantages: reward minus the group mean (optionally / group std)."""
    r = np.asarray(rewards, dtype=np.float64)
    adv = r - r.mean()
    if normalize_std:
        adv = adv / (r.std() + eps)
    return adv


def group_datums(members: Sequence[Rollout], normalize_std: bool = False) -> list[Datum]:
    """Datums of one complete group; empty when every reward is equal (nothing to learn).

    A member whose trajectory carries no tokens (an endpoint that does not return token ids)
    raises `DatumError`: training on such a group would silently drop attempts from it. A member
    stored in several segments gives one datum per segment (all with its advantage).
    """
    rewards = [r.reward for r in members]
    if len(set(rewards)) <= 1:
        return []
    adv = advantages(rewards, normalize_std)
    return [d for r, a in zip(members, adv) for d in datums_from_rollout(r, float(a))]


def request_bytes(datums: Sequence[Datum]) -> int:
    """An upper bound on the forward_backward request body carrying `datums`."""
    return REQUEST_OVERHEAD_BYTES + sum(d.nbytes + 1 for d in datums)


def pack_groups(groups: Iterable[Sequence[Datum]], budget_bytes: int = DEFAULT_CHUNK_BYTES) -> list[list[Datum]]:
    """Greedy, order-preserving packing of whole groups into chunks of at most `budget_bytes`.

    A group larger than the budget on its own becomes a chunk by itself (never split).
    Sizes are `request_bytes`: the datums' wire JSON plus the request around them.
    """
    if budget_bytes < 1:
        raise ValueError(f"chunk budget must be positive, got {budget_bytes}")
    chunks: list[list[Datum]] = []
    current: list[Datum] = []
    size = REQUEST_OVERHEAD_BYTES
    for group in groups:
        group = list(group)
        if not group:
            continue
        nbytes = sum(d.nbytes + 1 for d in group)  # + the comma between datums
        if current and size + nbytes > budget_bytes:
            chunks.append(current)
            current, size = [], REQUEST_OVERHEAD_BYTES
        current.extend(group)
        size += nbytes
    if current:
        chunks.append(current)
    return chunks
