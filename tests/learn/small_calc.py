"""A two-task slice of calc for the end-to-end training test.

The built-in policy only knows calc's grammar (its commands name calc.py), so on `wordcount`
every attempt fails and no group ever has differing rewards. Variant 6 is one the untrained
policy fixes in roughly half of its 4-turn attempts, so a group of 4 disagrees most of the
time; variant 0 is held out. Use it as `tests.learn.small_calc:SMALL_CALC`.
"""

from __future__ import annotations

from rl_daytona.tasks import Taskset
from rl_daytona.tasks.calc import calc_instance

TRAIN_VARIANT, HELDOUT_VARIANT = 6, 0
_TRAIN, _HELDOUT = calc_instance(TRAIN_VARIANT), calc_instance(HELDOUT_VARIANT)

SMALL_CALC = Taskset(name="calc-small", instances=(_TRAIN, _HELDOUT),
                     splits={"train": (_TRAIN.instance_id,), "heldout": (_HELDOUT.instance_id,)})
