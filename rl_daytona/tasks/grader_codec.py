"""The grading boundary's wire format: Python values as JSON data, never pickle (stdlib only).

Used on both sides of the boundary between the trusted pytest process and the worker that
imports the agent's sources (copied into the sandbox as `rlgrade_codec.py`).

Invariant: `decode` builds nothing but None, bool, int, float, complex, str, bytes, bytearray,
list, tuple, dict, set, frozenset, namedtuple (a class made from validated field names),
Fraction, Decimal, datetime, date, time, timedelta, and what the caller's `handle`/`exc_class` callbacks build from an integer
id or a name chain, so decoding a message never runs code the sender chose; a message over
`MAX_MESSAGE` bytes, a value nested deeper than `MAX_DEPTH` or holding more than `MAX_ITEMS`
items is refused with `TooLarge`. A subclass of a builtin type crosses as its base type (its
overridden methods stay behind), read through the base type's own slots, never through
methods the subclass could override.

Tags (a JSON object is always a tag): {"t": [..]} tuple, {"d": [[k, v], ..]} dict, {"s": [..]}
set, {"fs": [..]} frozenset, {"b": b64} bytes, {"ba": b64} bytearray, {"c": [re, im]} complex,
{"fr": [n, d]} Fraction, {"dec": str} Decimal, {"dt": [type, iso or [d, s, us]]} datetime,
date, time, timedelta, {"nt": [name, fields, values]} namedtuple,
{"h": id, "k": kind, "n": name} a handle the worker keeps, {"ec": [[key, name], ..], "base":
builtin name} an exception class.
"""

from __future__ import annotations

import base64
import builtins
import json
import struct
import sys
from typing import Any, Callable

MAX_MESSAGE = 8 << 20
MAX_DEPTH = 100
MAX_ITEMS = 1_000_000
_HEADER = struct.Struct(">I")
BUILTIN_EXCEPTIONS = {name: value for name, value in vars(builtins).items()
                      if isinstance(value, type) and issubclass(value, BaseException)}


class CannotEncode(ValueError):
    """A value the boundary cannot carry."""


class TooLarge(CannotEncode):
    """A value or message over the boundary's size or depth limits."""


class Budget:
    """Counts items while encoding or decoding one message."""

    def __init__(self) -> None:
        self.items = 0

    def reserve(self, count: int) -> None:
        """Refuse a container at once when its length alone is over the limit."""
        if self.items + count > MAX_ITEMS:
            raise TooLarge(f"a value of more than {MAX_ITEMS:,} items")

    def take(self, depth: int) -> None:
        self.items += 1
        if depth > MAX_DEPTH:
            raise TooLarge(f"a value nested deeper than {MAX_DEPTH} levels")
        if self.items > MAX_ITEMS:
            raise TooLarge(f"a value of more than {MAX_ITEMS:,} items")


def _plain(value: Any) -> tuple[str, Any] | None:
    """(base type name, exact base value) for builtins and their subclasses, read via base slots."""
    kind = type(value)
    if kind is bool or value is None:
        return ("atom", value)
    for base, read in _BASES:
        if kind is base and base is not dict:
            return (base.__name__, value)
        if issubclass(kind, base):
            return (base.__name__, read(value))
    return None


_BASES: tuple[tuple[type, Callable[[Any], Any]], ...] = (
    (int, int.__int__), (float, float.__float__), (str, str.__str__), (bytes, bytes.__bytes__),
    (bytearray, lambda v: bytearray(memoryview(v))), (complex, complex.__complex__),
    (list, lambda v: list(list.__iter__(v))), (tuple, lambda v: tuple(tuple.__iter__(v))),
    (dict, lambda v: list(dict.items(v))), (set, lambda v: list(set.__iter__(v))),
    (frozenset, lambda v: list(frozenset.__iter__(v))),
)


def encode(value: Any, other: Callable[[Any], Any], budget: Budget | None = None, depth: int = 0) -> Any:
    """`value` as JSON data; values that are not data go to `other` (a handle, or an error)."""
    budget = budget or Budget()
    budget.take(depth)
    plain = _plain(value)
    if plain is None:
        return _special(value, other, budget, depth)
    original, (kind, value) = type(value), plain
    inner = depth + 1
    if kind in ("list", "tuple", "dict", "set", "frozenset"):
        budget.reserve(len(value))
    if kind in ("atom", "int", "str"):
        return value
    if kind == "float":
        return value
    if kind == "list":
        return [encode(v, other, budget, inner) for v in value]
    if kind == "tuple":
        fields = vars(original).get("_fields") if original is not tuple else None
        items = [encode(v, other, budget, inner) for v in value]
        if type(fields) is not tuple or not all(type(f) is str for f in fields):
            return {"t": items}
        return {"nt": [type.__dict__["__name__"].__get__(original), list(fields), items]}
    if kind == "dict":
        return {"d": [[encode(k, other, budget, inner), encode(v, other, budget, inner)] for k, v in value]}
    if kind in ("set", "frozenset"):
        return {"s" if kind == "set" else "fs": [encode(v, other, budget, inner) for v in value]}
    if kind in ("bytes", "bytearray"):
        return {"b" if kind == "bytes" else "ba": base64.b64encode(value).decode()}
    return {"c": [value.real, value.imag]}


def _special(value: Any, other: Callable[[Any], Any], budget: Budget, depth: int) -> Any:
    kind = type(value)
    fractions, decimal = sys.modules.get("fractions"), sys.modules.get("decimal")
    if fractions is not None and kind is fractions.Fraction:
        return {"fr": [value.numerator, value.denominator]}
    if decimal is not None and kind is decimal.Decimal:
        return {"dec": str(value)}
    datetime = sys.modules.get("datetime")
    if datetime is not None and kind in (datetime.datetime, datetime.date, datetime.time):
        return {"dt": [kind.__name__, kind.isoformat(value)]}
    if datetime is not None and kind is datetime.timedelta:
        return {"dt": ["timedelta", [value.days, value.seconds, value.microseconds]]}
    return other(value)


def decode(data: Any, handle: Callable[[dict[str, Any]], Any], exc_class: Callable[[dict[str, Any]], Any],
           budget: Budget | None = None, depth: int = 0) -> Any:
    """Rebuild a value from `encode`'s data (see the module invariant)."""
    budget = budget or Budget()
    budget.take(depth)
    if data is None or type(data) in (bool, int, float, str):
        return data
    inner = depth + 1
    if type(data) is list:
        budget.reserve(len(data))
        return [decode(v, handle, exc_class, budget, inner) for v in data]
    if type(data) is not dict or len(data) not in (1, 2, 3):
        raise ValueError(f"not boundary data: {type(data).__name__}")
    tag = next(iter(data))

    def items(key: str) -> list[Any]:
        seq = data[key]
        if type(seq) is not list:
            raise ValueError(f"tag {key!r} needs a list")
        budget.reserve(len(seq))
        return [decode(v, handle, exc_class, budget, inner) for v in seq]

    if tag == "t":
        return tuple(items("t"))
    if tag == "d":
        pairs = items("d")
        if not all(type(p) is list and len(p) == 2 for p in pairs):
            raise ValueError("a dict entry is not a pair")
        return {k: v for k, v in pairs}
    if tag in ("s", "fs"):
        return (set if tag == "s" else frozenset)(items(tag))
    if tag in ("b", "ba"):
        raw = base64.b64decode(str(data[tag]), validate=True)
        return raw if tag == "b" else bytearray(raw)
    if tag == "c":
        re, im = items("c")
        return complex(float(re), float(im))
    if tag == "fr":
        import fractions

        num, den = items("fr")
        return fractions.Fraction(int(num), int(den))
    if tag == "dec":
        import decimal

        return decimal.Decimal(str(data["dec"]))
    if tag == "dt":
        return _datetime(data["dt"])
    if tag == "nt":
        return _namedtuple(data["nt"], handle, exc_class, budget, inner)
    if tag == "h":
        return handle(data)
    if tag == "ec":
        return exc_class(data)
    raise ValueError(f"unknown boundary tag {tag!r}")


def _datetime(spec: Any) -> Any:
    import datetime

    kind, value = spec
    if kind == "timedelta" and type(value) is list and len(value) == 3 and all(type(v) is int for v in value):
        return datetime.timedelta(days=value[0], seconds=value[1], microseconds=value[2])
    if kind in ("datetime", "date", "time") and type(value) is str:
        return getattr(datetime, kind).fromisoformat(value)
    raise ValueError("malformed date or time")


_NAMEDTUPLES: dict[tuple[str, tuple[str, ...]], type] = {}


def _namedtuple(spec: Any, handle: Callable[..., Any], exc_class: Callable[..., Any], budget: Budget,
                depth: int) -> Any:
    import collections
    import keyword

    name, fields, values = spec
    names = (name, *fields)
    if not all(type(n) is str and n.isidentifier() and not keyword.iskeyword(n) and not n.startswith("_")
               for n in names) or len(fields) != len(values) or len(set(fields)) != len(fields):
        raise ValueError("malformed namedtuple")
    key = (name, tuple(fields))
    if key not in _NAMEDTUPLES:
        _NAMEDTUPLES[key] = collections.namedtuple(name, fields)  # type: ignore[misc]
    return _NAMEDTUPLES[key](*(decode(v, handle, exc_class, budget, depth) for v in values))


def dumps(message: Any) -> bytes:
    try:
        body = json.dumps(message, separators=(",", ":")).encode()
    except ValueError as exc:  # an int over sys.get_int_max_str_digits
        raise CannotEncode(str(exc)) from None
    if len(body) > MAX_MESSAGE:
        raise TooLarge(f"a message of {len(body):,} bytes (the limit is {MAX_MESSAGE:,})")
    return _HEADER.pack(len(body)) + body


def _read_exactly(recv: Callable[[int], bytes], size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError("the other side closed the channel")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_message(recv: Callable[[int], bytes]) -> Any:
    """One framed JSON message; `TooLarge` before reading a body over the limit."""
    (size,) = _HEADER.unpack(_read_exactly(recv, _HEADER.size))
    if size > MAX_MESSAGE:
        raise TooLarge(f"a message of {size:,} bytes (the limit is {MAX_MESSAGE:,})")
    try:
        return json.loads(_read_exactly(recv, size))
    except RecursionError:
        raise TooLarge("a message nested too deeply to parse") from None
