"""The two types a task's grader and the task API share: the verdict and the task-authoring error.
A leaf module, so that the grader and the API both import it and neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass


class TaskError(ValueError):
    """A task, taskset, split or variant that does not exist or is malformed."""


@dataclass(frozen=True)
class GradeResult:
    """The grader's verdict. `reward` is 1.0 only when every expected test passed."""

    reward: float
    passed: int
    expected: int
    failed: int = 0
    timed_out: bool = False
    detail: str = ""
