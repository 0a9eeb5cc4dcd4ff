"""The grading boundary through the real grader: what crosses, what cannot, and the limits.

One real grading (LocalBackend, bubblewrap) of a small library against a pristine test file that
uses every kind of value the boundary carries; one of tests that need what cannot cross; and the
codec's limits on the host.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from fractions import Fraction
from typing import Mapping

import pytest

from rl_daytona.backends.local import LocalBackend
from rl_daytona.tasks import GradeResult
from rl_daytona.tasks import grader_codec as codec
from rl_daytona.tasks.grader import grade_pytest

LIBRARY = {"shapes/__init__.py": "from shapes.core import Stack, area\n", "shapes/core.py": '''
import collections
from fractions import Fraction

PI = 3.0
NAMES = ("a", "b")
Point = collections.namedtuple("Point", "x y")


class ShapeError(ValueError):
    pass


class EmptyError(ShapeError):
    pass


def area(w, h):
    if w < 0:
        raise ShapeError(f"negative width {w}")
    return w * h


def squares(n):
    for i in range(n):
        yield i * i


def fill(xs, d):
    xs.append(len(xs))
    d["seen"] = True


def half(n):
    return Fraction(n, 2), Point(n, -n), {1: b"x", (2, 3): {4}}


def lookup(d, key):
    return d[key]


class Stack:
    kind = "lifo"

    def __init__(self, *items):
        self.items = list(items)

    def push(self, x):
        self.items.append(x)
        return self

    def pop(self):
        if not self.items:
            raise EmptyError("pop from an empty stack")
        return self.items.pop()

    def __len__(self):
        return len(self.items)

    def __iter__(self):
        return iter(self.items)

    def __contains__(self, x):
        return x in self.items

    def __eq__(self, other):
        return isinstance(other, Stack) and self.items == other.items

    __hash__ = None
'''}
TESTS = {"tests/conftest.py": "import pytest\n\n\n@pytest.fixture\ndef width():\n    return 2\n",
         "tests/test_shapes.py": '''import pytest
from fractions import Fraction

import shapes
from shapes import Stack, area
from shapes.core import PI, NAMES, ShapeError, EmptyError, squares, fill, half, lookup


def test_functions_and_constants(width):
    assert area(width, 3) == 6 and type(area(2.0, 3)) is float
    assert PI == 3.0 and NAMES == ("a", "b")


def test_exceptions_under_pytest_raises():
    with pytest.raises(ShapeError, match="negative width -1"):
        area(-1, 2)
    with pytest.raises(ValueError):
        area(-1, 2)
    with pytest.raises(KeyError):
        lookup({}, "missing")
    with pytest.raises(EmptyError):
        Stack().pop()
    assert issubclass(EmptyError, ShapeError)


def test_generators():
    assert list(squares(4)) == [0, 1, 4, 9]
    gen = squares(2)
    assert next(gen) == 0 and next(gen) == 1
    with pytest.raises(StopIteration):
        next(gen)


def test_in_place_mutation_is_copied_back():
    xs, d = [7], {}
    assert fill(xs, d) is None
    assert xs == [7, 1] and d == {"seen": True}


def test_values_that_are_not_json():
    fraction, point, mixed = half(3)
    assert fraction == Fraction(3, 2) and point.x == 3 and point == (3, -3)
    assert mixed == {1: b"x", (2, 3): {4}}


def test_classes_and_instances():
    s = Stack(1, 2).push(3)
    assert isinstance(s, Stack) and not isinstance(5, Stack)
    assert len(s) == 3 and 2 in s and list(s) == [1, 2, 3] and s.items == [1, 2, 3]
    assert s.pop() == 3 and Stack.kind == "lifo" and s.kind == "lifo"
    assert s == Stack(1, 2) and s != Stack(9)
    s.label = "mine"
    assert s.label == "mine"


def test_module_attributes_can_be_patched(monkeypatch):
    monkeypatch.setattr(shapes.core, "PI", 4.0)
    assert shapes.core.PI == 4.0
'''}
CANNOT_CROSS = {"tests/test_needs_too_much.py": '''from shapes.core import Stack, area, squares


def test_callback():
    assert area(lambda: 1, 2) == 0


def test_compares_an_object_with_a_plain_value():
    assert Stack(1) == [1]


def test_subclasses():
    class Mine(Stack):
        pass
'''}


def grade(backend: LocalBackend, files: Mapping[str, str], tests: Mapping[str, str], expected: int) -> GradeResult:
    async def run() -> GradeResult:
        sandbox = await backend.create("boundary-test")
        try:
            await backend.write_files(sandbox, dict(files))
            return await grade_pytest(backend, sandbox, sources=sorted(files), tests=tests,
                                      expected_passed=expected, timeout=30)
        finally:
            await backend.delete(sandbox)

    return asyncio.run(run())


def test_functions_classes_exceptions_generators_constants_and_mutation_cross(local_backend: LocalBackend) -> None:
    result = grade(local_backend, LIBRARY, TESTS, expected=7)
    assert (result.reward, result.passed) == (1.0, 7), result.detail


def test_a_test_that_needs_what_cannot_cross_fails_and_names_it(local_backend: LocalBackend) -> None:
    result = grade(local_backend, LIBRARY, CANNOT_CROSS, expected=3)
    assert (result.reward, result.passed) == (0.0, 0), result.detail
    assert "cannot cross the grading boundary" in result.detail
    for needle in ("the function test_callback.<locals>.<lambda>", "'==' between a Stack object", "cannot subclass Stack"):
        assert needle in result.detail, (needle, result.detail)


def test_the_codec_refuses_values_over_its_limits() -> None:
    deep: list[object] = []
    for _ in range(codec.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(codec.TooLarge, match="nested deeper"):
        codec.encode(deep, repr)
    with pytest.raises(codec.TooLarge, match="items"):
        codec.encode(list(range(codec.MAX_ITEMS + 1)), repr)
    with pytest.raises(codec.TooLarge, match="bytes"):
        codec.dumps("x" * (codec.MAX_MESSAGE + 1))


def test_the_codec_rebuilds_only_plain_data() -> None:
    class Sneaky(float):
        def __eq__(self, other: object) -> bool:
            return True

    when = (datetime.datetime(2026, 1, 2, 3, 4, tzinfo=datetime.timezone.utc), datetime.timedelta(days=1, seconds=3))
    data = codec.encode({"a": [Sneaky(0.5), (1, b"b")], 2: {3}, "when": when, "f": Fraction(1, 3)}, repr)
    value = codec.decode(json.loads(json.dumps(data)), lambda d: ("handle", d["h"]), lambda d: ValueError)
    assert value == {"a": [0.5, (1, b"b")], 2: {3}, "when": when, "f": Fraction(1, 3)}
    assert type(value["a"][0]) is float
    for bad in ({"zz": 1}, {"t": 5}, {"nt": ["P", ["__class__"], [1]]}, {"b": "!!"}):
        with pytest.raises(ValueError):
            codec.decode(bad, lambda d: None, lambda d: ValueError)
