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
    """A train step's groups: `tasks_per_step` instances, `group` attempts each.

    The train split is read in epochs, as a dataset is: epoch e is a permutation of every
    instance drawn from `(seed, e)`, and step s (from 0) takes slots s*k .. s*k+k-1 of the
    concatenated epochs. So every instance is drawn once before any is drawn twice (with 24
    instances and 8 per step, each once in every 3 steps), where independent draws per step
    leave some instances, and the bugs only they hold, unseen for the first steps of a seed.
    """
    n = len(instances)
    if n == 0:
        raise ValueError("step_requests: the train split has no instances")
    epochs: dict[int, np.ndarray] = {}
    out = []
    for slot in range(tasks_per_step):
        epoch, position = divmod(step * tasks_per_step + slot, n)
        if epoch not in epochs:
            epochs[epoch] = np.random.default_rng([seed, epoch]).permutation(n)
        inst = instances[int(epochs[epoch][position])]
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
