"""A second, non-calc task written only through the public API: a word counter with a bug."""

from __future__ import annotations

from typing import Any, AsyncGenerator

from rl_daytona.tasks import TaskEnv, Taskset, task

SOURCE = '''def count_words(text):
    return len(text.split()) - 1


def longest_word(text):
    words = text.split()
    return max(words, key=len) if words else ""
'''
FIXED_SOURCE = SOURCE.replace("len(text.split()) - 1", "len(text.split())")
TESTS = '''from wordcount import count_words, longest_word


def test_count_words_simple():
    assert count_words("a b c") == 3


def test_count_words_empty():
    assert count_words("") == 0


def test_longest_word():
    assert longest_word("a bbb cc") == "bbb"
'''
FIX_COMMAND = "sed -i 's/ - 1$//' wordcount.py && python -m pytest -q"
PROMPTS = ("The tests in test_wordcount.py fail. Fix wordcount.py.",
           "count_words is wrong; make every test in test_wordcount.py pass.")


@task(name="wordcount")
async def wordcount(env: TaskEnv, *, variant: int = 0) -> AsyncGenerator[Any, Any]:
    """Fix the off-by-one in count_words."""
    await env.write_files({"wordcount.py": SOURCE, "test_wordcount.py": TESTS})
    yield PROMPTS[variant % len(PROMPTS)]
    yield await env.grade_pytest(sources=["wordcount.py"], tests={"test_wordcount.py": TESTS},
                                 expected_passed=3, timeout=30)


INSTANCES = tuple(wordcount(variant=v) for v in range(2))
EXAMPLE_TASKSET = Taskset(name="wordcount", instances=INSTANCES,
                          splits={"train": (INSTANCES[0].instance_id,), "heldout": (INSTANCES[1].instance_id,)})
