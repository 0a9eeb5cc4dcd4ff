"""What a run asks for: rollout requests, one group of `group` attempts per task instance.

Invariant: requests are a pure function of their arguments (a train step's of `(seed, step)`),
so a continued run asks for exactly what one uninterrupted run would have; every attempt of a
group carries the group's id, and a rollout id names its tag, task (or step slot) and attempt.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from rl_daytona.types import RolloutRequest


def group_requests(instances: Sequence[Any], group: int, tag: str = "eval") -> list[RolloutRequest]:
    """One group of `group` attempts per task instance."""
    return [RolloutRequest(rollout_id=f"{tag}-{inst.instance_id}-{a}", task_id=inst.instance_id,
                           group_id=f"{tag}/{inst.instance_id}", attempt=a)
            for inst in instances for a in range(group)]


def requests_for(taskset: str, split: str | None, group: int, tag: str = "eval") -> list[RolloutRequest]:
    """`group_requests` over a split of a taskset named here (tools and tests; a run resolves its
    taskset once, in `rl_daytona.run`)."""
    from rl_daytona.tasks import get_taskset

    return group_requests(get_taskset(taskset).split(split), group, tag)


def step_requests(instances: Sequence[Any], tasks_per_step: int, group: int, seed: int,
                  step: int) -> list[RolloutRequest]:
    """A train step's groups: `tasks_per_step` instances drawn from `(seed, step)` (with
    replacement only when there are fewer instances than that), `group` attempts each."""
    rng = np.random.default_rng([seed, step])
    picked = rng.choice(len(instances), size=tasks_per_step, replace=tasks_per_step > len(instances))
    out = []
    for slot, index in enumerate(picked):
        inst = instances[int(index)]
        group_id = f"train{step}/{slot}/{inst.instance_id}"
        out += [RolloutRequest(rollout_id=f"{group_id}/{a}", task_id=inst.instance_id, group_id=group_id, attempt=a)
                for a in range(group)]
    return out


def groups_of(requests: Sequence[RolloutRequest]) -> dict[str, int]:
    """group id -> how many attempts of it are requested."""
    groups: dict[str, int] = {}
    for r in requests:
        groups[r.group_id] = groups.get(r.group_id, 0) + 1
    return groups
