"""Tasksets a user might get wrong, for `--taskset tests.security.bad_tasksets:NAME`."""

from __future__ import annotations

from rl_daytona.tasks import Taskset
from rl_daytona.tasks.calc import calc_instance, calc_task


def SPLIT_NAMES_UNKNOWN_TASK() -> Taskset:  # noqa: N802 - a factory: Taskset refuses it when built
    """A split naming a task the taskset does not hold (a typo in a variant number)."""
    return Taskset(name="typo", instances=(calc_instance(0),),
                   splits={"train": ("calc[variant=0]", "calc[variant=99]")})


# an instance made without `calc_instance`'s check: the unknown variant shows when a task starts
UNKNOWN_VARIANT = Taskset(name="unchecked", instances=(calc_task(variant=999),))
NOT_A_TASKSET = {"calc": "a dict, not a Taskset"}
