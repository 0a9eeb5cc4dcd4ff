"""A second task written only through the public API: a word-count module with one bug.

Invariant: variant `v` seeds `wordcount.py` with exactly the bug `BUGS[v]` next to the
pristine tests; `FIXES[v]` is a sed command that repairs it (and the task's reference solution),
so grading pays 1.0 after the fix and 0.0 before. Run it with `--taskset tests.tasks.example_task:EXAMPLE_TASKSET`.
"""

from __future__ import annotations

from typing import Any, AsyncGenerator

from rl_daytona.tasks import Solution, TaskEnv, Taskset, task

SOURCE = '''"""wordcount: count things in text."""


def count_words(text):
    return len(text.split())


def count_lines(text):
    return len(text.splitlines())


def longest_word(text):
    return max(text.split(), key=len)
'''

TESTS = {"test_wordcount.py": '''from wordcount import count_lines, count_words, longest_word


def test_count_words():
    assert count_words("the quick brown fox") == 4


def test_count_lines():
    assert count_lines("one\\ntwo\\nthree") == 3


def test_longest_word():
    assert longest_word("a bbb cc") == "bbb"
'''}

# variant -> (pristine line, buggy line)
BUGS: dict[int, tuple[str, str]] = {
    0: ("    return len(text.split())", "    return len(text.split()) - 1"),
    1: ("    return len(text.splitlines())", "    return len(text.splitlines()) + 1"),
    2: ("    return max(text.split(), key=len)", "    return min(text.split(), key=len)"),
}
FIXES: dict[int, str] = {
    0: "sed -i 's/len(text.split()) - 1/len(text.split())/' wordcount.py",
    1: "sed -i 's/len(text.splitlines()) + 1/len(text.splitlines())/' wordcount.py",
    2: "sed -i 's/return min(/return max(/' wordcount.py",
}
PROMPT = "The tests in test_wordcount.py fail. Fix wordcount.py; do not edit the tests."


def buggy_wordcount(variant: int) -> str:
    good, bad = BUGS[variant]
    return SOURCE.replace(good + "\n", bad + "\n", 1)


async def _wordcount(env: TaskEnv, *, variant: int) -> AsyncGenerator[Any, Any]:
    """Fix the off-by-one (or wrong-function) bug in wordcount.py."""
    await env.write_files({"wordcount.py": buggy_wordcount(variant), **TESTS})
    yield PROMPT
    yield await env.grade_pytest(sources=["wordcount.py"], tests=TESTS, expected_passed=3, timeout=30)


def _reference(*, variant: int) -> Solution:
    """The reference fix, as an edit: the variant's sed command (for `rl-daytona tasks check`)."""
    return Solution(commands=(FIXES[variant],))


wordcount_task = task(name="wordcount", solution=_reference)(_wordcount)

EXAMPLE_TASKSET = Taskset(
    name="wordcount",
    instances=tuple(wordcount_task(variant=v) for v in sorted(BUGS)),
    splits={"train": ("wordcount[variant=0]", "wordcount[variant=1]"), "heldout": ("wordcount[variant=2]",)},
)
