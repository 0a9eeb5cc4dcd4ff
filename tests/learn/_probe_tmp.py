from rl_daytona.tasks import Taskset
from rl_daytona.tasks.calc import calc_instance
_I = tuple(calc_instance(v) for v in (6, 0, 13, 2, 4, 5))
PROBE = Taskset(name="probe", instances=_I, splits={})
