"""Rollout requests (rl_daytona.source): one group per instance, train steps drawn from (seed, step)."""

from __future__ import annotations

import pytest

from rl_daytona.source import group_requests, groups_of, requests_for, step_requests
from rl_daytona.tasks import TaskError, get_taskset


def test_unknown_split_and_taskset_are_clear_errors() -> None:
    with pytest.raises(TaskError, match="no split 'nope'"):
        requests_for("calc", "nope", 1)
    with pytest.raises(TaskError):
        requests_for("no_such_taskset", None, 1)


def test_a_group_per_instance_with_unique_ids() -> None:
    instances = get_taskset("calc").split("heldout")
    requests = group_requests(instances, 3, tag="eval2")
    assert len(requests) == 3 * len(instances) == len({r.rollout_id for r in requests})
    assert set(groups_of(requests).values()) == {3}
    assert requests[0].group_id == f"eval2/{instances[0].instance_id}" and requests[0].attempt == 0


def test_a_train_step_draws_the_same_tasks_from_seed_and_step() -> None:
    instances = get_taskset("calc").split("train")
    one = step_requests(instances, 4, 2, seed=7, step=3)
    assert one == step_requests(instances, 4, 2, seed=7, step=3)  # a continued run asks for the same
    assert one != step_requests(instances, 4, 2, seed=7, step=4)
    assert groups_of(one) == {g: 2 for g in groups_of(one)} and len(groups_of(one)) == 4
    assert all(r.group_id.startswith("train3/") for r in one)
    assert len(step_requests(instances[:2], 5, 2, seed=0, step=0)) == 10  # fewer instances: drawn with replacement


def test_train_steps_read_the_split_in_epochs() -> None:
    instances = get_taskset("calc").split("train")  # 32 instances, 8 per step: an epoch every 4 steps
    assert len(instances) == 32
    drawn = [[r.task_id for r in step_requests(instances, 8, 1, seed=1, step=s)] for s in range(8)]
    ids = sorted(i.instance_id for i in instances)
    assert sorted(sum(drawn[:4], [])) == ids  # every instance once before any twice
    assert sorted(sum(drawn[4:], [])) == ids
    assert drawn[:4] != drawn[4:]  # each epoch its own order
    assert drawn[0] != [r.task_id for r in step_requests(instances, 8, 1, seed=2, step=0)]  # and each seed
    across = [r.task_id for r in step_requests(instances, 10, 1, seed=1, step=3)]  # slots 30..39 span two epochs
    assert len(set(across[:2])) == 2 and len(set(across[2:])) == 8
