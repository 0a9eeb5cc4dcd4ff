"""Reading pytest's terminal output: which tests failed, did everything pass, did it break.

Invariant: a pure function of the text. It reads the short summary (`FAILED file::name`),
traceback headers (`____ name ____`, which survive when the summary was cut off) and the
final counts line; it never guesses a pass from missing information.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_FAILED = re.compile(r"^(?:FAILED|ERROR) [^\s:]+::(\w+)", re.MULTILINE)
_HEADER = re.compile(r"^_{3,} (test_\w+)(?:\[[^\]]*\])? _{3,}$", re.MULTILINE)
_COUNT = re.compile(r"(\d+) (failed|passed|errors?)\b")
_COLLECTION = re.compile(r"error during collection|errors during collection|^ERROR \S+\s*$", re.MULTILINE)


@dataclass(frozen=True)
class TestResult:
    """One pytest run as the policy reads it."""

    __test__ = False  # not a pytest test class

    failing: tuple[str, ...] = ()
    passed: int = 0
    failed: int = 0
    all_passed: bool = False
    broken: bool = False


def parse(text: str) -> TestResult:
    """Failing test names (sorted, unique) and the counts of one pytest output."""
    failing = sorted(set(_FAILED.findall(text)) | set(_HEADER.findall(text)))
    counts = {"failed": 0, "passed": 0, "error": 0}
    for number, word in _COUNT.findall(text):
        counts[word.rstrip("s") if word.startswith("error") else word] = int(number)
    broken = bool(_COLLECTION.search(text))
    all_passed = counts["passed"] > 0 and not (counts["failed"] or counts["error"] or failing or broken)
    return TestResult(
        failing=tuple(failing), passed=counts["passed"], failed=max(counts["failed"], len(failing)),
        all_passed=all_passed, broken=broken,
    )
