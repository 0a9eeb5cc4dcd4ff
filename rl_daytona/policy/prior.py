"""The untrained policy's weights: a sensible but unsure prior, with no bug-specific knowledge.

Invariant: only generic habits are encoded: run the tests, read the file, edit lines of the
functions the failing tests name, revert an edit its tests rejected, prefer operators and
constants over names, and prefer textbook mutation inverses (`<`/`<=`, `+`/`-`, `min`/`max`,
`0`/`1`, `n - 1`/`n`) without knowing their direction. Which replacement fixes which line
(the hashed keys, and most of `pair_w`) starts at zero and is left to the rewards.
`PRIOR_SCALE` sharpens or flattens the whole edit prior (the knob the probe tunes).
"""

from __future__ import annotations

import numpy as np

from rl_daytona.policy import grammar as G
from rl_daytona.policy import params as P
from rl_daytona.policy import vocab as V

PRIOR_SCALE = 1.0

VERB_PRIOR: dict[str, dict[str, float]] = {
    "bias": {"<submit>": -4, "python -m pytest -q --tb=no": 1, V.LOOK_VERB: 0, "python -m pytest -q": -1,
             "python -m pytest -q -x": -2, "cat ": 0, "nl -ba ": 0, "grep -n 'def ' ": -2,
             "grep -n 'return' ": -3, "head -n ": -3, "tail -n ": -4, "sed -n '": -3, "sed -i '": -1},
    "no_tests_yet": {"python -m pytest -q --tb=no": 3, "python -m pytest -q": 1, V.LOOK_VERB: 4},
    "no_source": {"cat ": 2.5, "nl -ba ": 2.5, V.LOOK_VERB: 3},
    "can_edit": {"sed -i '": 6},
    "all_passed": {"<submit>": 12},
    "edited_since_test": {"python -m pytest -q --tb=no": 5},
    "failing_but_unmapped": {"cat ": 2, "nl -ba ": 2},
    "source_but_no_tests": {"python -m pytest -q --tb=no": 4},
}
SLOT_PRIOR: dict[str, dict[str, float]] = {
    "file": {"calc.py": 3},
    "flag": {"flag:/": 4, "flag:/2": 0.5, "flag:/g": -1},
    "suffix": {" && python -m pytest -q --tb=no": 4},
}
LINE_PRIOR: dict[str, float] = {
    "in_failing_fn": 3, "in_passing_fn": -3, "outside_fn": -5, "is_def": -5, "is_return": 0.5,
    "dirty_bad": 5, "dirty_good": -5, "fn_tried_in_command": -6, "line_reverted_in_command": 1,
    "line_tried_in_command": -5, "log_bad_tries": -0.3, "log_fragments": 0.0, "failing_fn_untouched": 0.5,
    "calls_failing_fn": -3,
}
OLD_KIND_PRIOR: dict[str, float] = {
    "compare": 2.0, "arith": 2.0, "assign": 1.0, "logic": 0.5, "int": 1.2, "float": 0.5, "const": 0.3,
    "builtin": 1.2, "name": -4.0, "offset": 1.0, "expr": 1.0, "paren": 1.5, "index": 0.5, "range": 0.5,
    "eol": 0.3,
}
OLD_PRIOR: dict[str, float] = {"revertible": 6, "repeated_on_line": -0.3, "no_valid_new": -8}
NEW_PRIOR: dict[str, float] = {"reverts": 6, "known_bad": -8, "same_kind": 1, "compatible_kind": 0,
                               "incompatible_kind": -6,
                               "breaks_syntax": -8, "unknown_name": -6, "no_change": -6, "rebinds": -4}
SEP_PRIOR: dict[str, float] = {"bias": -3, "untried_failing_fn": 5, "unreverted_bad_line": 5,
                               "subs_2": -0.5, "subs_3": -1}
FLAG_PRIOR: dict[str, float] = {"reverts": 6, "no_change": -6, "breaks": -8}
PAIR_WEIGHT = 3.0

# Textbook mutation inverses (both directions get PAIR_WEIGHT).
COMMON_PAIRS: tuple[tuple[str, str], ...] = (
    (" < ", " <= "), (" > ", " >= "), (" < ", " > "), (" <= ", " >= "), (" == ", " != "),
    (" + ", " - "), (" * ", " / "), (" / ", " // "), (" + ", " * "), (" * ", " ** "), (" % ", " // "),
    (" = ", " += "), (" = ", " -= "), (" += ", " -= "), (" *= ", " /= "),
    (" and ", " or "), (" in ", " not in "), (" is ", " is not "),
    ("0", "1"), ("1", "2"), ("2", "3"), ("0", "-1"), ("1", "-1"), ("10", "100"), ("0.5", "2"),
    ("0", "0.0"), ("1", "1.0"), ("True", "False"), ("min", "max"), ("sum", "max"), ("sum", "min"),
    ("sum", "len"), ("int", "round"), ("lo", "hi"), ("x", "y"), ("i", "j"),
    (" + 1", " - 1"), (" + 1", " + 2"), (" * 2", " / 2"), (" / 2", " // 2"), ("", " + 1"), ("", " - 1"),
    ("n - 1", "n + 1"), ("i - 1", "i + 1"), ("mid - 1", "mid + 1"), ("len(xs) - 1", "len(xs) + 1"),
    ("len(s) - 1", "len(s) + 1"), ("n - 1", "n"), ("n + 1", "n"), ("i - 1", "i"), ("i + 1", "i"),
    ("mid - 1", "mid"), ("mid + 1", "mid"), ("len(xs) - 1", "len(xs)"), ("len(xs) + 1", "len(xs)"),
    ("len(s) - 1", "len(s)"), ("len(s) + 1", "len(s)"), ("(n - 1)", "n"), ("(n + 1)", "n"),
    ("(len(xs) - 1)", "len(xs)"), ("(len(xs) + 1)", "len(xs)"), ("(len(s) - 1)", "len(s)"),
    ("(len(s) + 1)", "len(s)"), ("(n - 1)", "(n + 1)"), ("(len(xs) - 1)", "(len(xs) + 1)"),
    ("(len(s) - 1)", "(len(s) + 1)"), ("[0]", "[-1]"), ("[1]", "[0]"), ("[-1]", "[-2]"), ("[1:]", "[:-1]"),
    ("[i]", "[i - 1]"), ("[i]", "[i + 1]"), ("[i - 1]", "[i + 1]"), ("[mid]", "[mid - 1]"),
    ("[mid]", "[mid + 1]"), ("[mid - 1]", "[mid + 1]"), ("range(n)", "range(n + 1)"),
    ("range(n)", "range(1, n)"), ("range(len(xs))", "range(1, len(xs))"),
)


def _fill(vector: np.ndarray, names: tuple[str, ...], values: dict[str, float], scale: float = 1.0) -> None:
    for name, value in values.items():
        vector[names.index(name)] = value * scale


def _verb_weights() -> np.ndarray:
    w = np.zeros(P.SHAPES["verb_w"])
    for context, columns in VERB_PRIOR.items():
        for verb, value in columns.items():
            w[P.VERB_CONTEXT.index(context), G.VERB_CHOICES.index(V.piece_id(verb))] = value
    return w


def _slot_weights() -> np.ndarray:
    w = np.zeros(P.SHAPES["slot_w"])
    for slot, pieces in SLOT_PRIOR.items():
        for piece, value in pieces.items():
            w[P.SLOTS.index(slot), V.piece_id(piece)] = value
    return w


def _pair_weights(scale: float) -> np.ndarray:
    w = np.zeros(P.SHAPES["pair_w"])
    index = {f: i for i, f in enumerate(V.FRAGMENTS)}
    for a, b in COMMON_PAIRS:
        w[index[a], index[b]] = w[index[b], index[a]] = PAIR_WEIGHT * scale
    return w


def initial_params(scale: float | None = None) -> dict[str, np.ndarray]:
    """Fresh prior weights for every param in `params.SHAPES`."""
    scale = PRIOR_SCALE if scale is None else scale
    out = {name: np.zeros(shape) for name, shape in P.SHAPES.items()}
    out["verb_w"], out["slot_w"] = _verb_weights(), _slot_weights()
    _fill(out["line_w"], P.LINE_FEATURES, LINE_PRIOR)
    out["old_bias"] = np.array([OLD_KIND_PRIOR[k] * scale for k in V.FRAGMENT_KIND])
    _fill(out["old_w"], P.OLD_FEATURES, OLD_PRIOR)
    _fill(out["new_w"], P.NEW_FEATURES, NEW_PRIOR)
    _fill(out["flag_w"], P.FLAG_FEATURES, FLAG_PRIOR)
    for name in ("same_kind", "incompatible_kind"):
        out["new_w"][P.NEW_FEATURES.index(name)] *= scale
    out["pair_w"] = _pair_weights(scale)
    sep = out["sep_w"]
    for name, value in SEP_PRIOR.items():
        sep[P.SEP_CONTEXT.index(name), 0] = value
    return out
