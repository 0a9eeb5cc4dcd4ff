"""The untrained policy's weights: a sensible but unsure prior, with no bug-specific knowledge.

Invariant: only generic habits are encoded: run the tests, read the file, edit lines of the
functions the failing tests name, revert an edit its tests rejected, keep going while the
failures fall, prefer operators and constants over names, and prefer textbook mutation
inverses (`<`/`<=`, `+`/`-`, `min`/`max`, `0`/`1`, `n - 1`/`n`) without knowing their
direction. Which replacement fixes which line (the hashed keys, and most of `pair_w`) starts at
zero and is left to the rewards.
`PRIOR_SCALE` sharpens or flattens the edit prior alone, `SHARPNESS` every weight.
"""

from __future__ import annotations

import numpy as np

from rl_daytona.policy import grammar as G
from rl_daytona.policy import params as P
from rl_daytona.policy import vocab as V

PRIOR_SCALE = 1.0
# Every prior weight times SHARPNESS: the policy is log-linear, so this is sampling the unscaled
# prior at temperature 1 / SHARPNESS. A sharper prior tries its likeliest edits first and in
# order (a rejected edit is never retried), rather than wandering among unlikely ones. Probed on
# calc (`scripts/probe_learn.py`, 6 steps of 8 x 8, lr 0.2; docs/bench/builtin-policy/learning.md):
# untrained pass rate 8.0% -> 15.2% over all variants, held-out rise +6..+25 -> +27..+41 points.
SHARPNESS = 2.0

VERB_PRIOR: dict[str, dict[str, float]] = {
    "bias": {"<submit>": -4, V.QUICK_TEST: 1, V.PYTEST_COMPACT: -1, V.LOOK_VERB: 0, "python -m pytest -q": -2,
             "python -m pytest -q -x": -2, "cat ": 0, "nl -ba ": 0, "grep -n 'def ' ": -2,
             "grep -n 'return' ": -3, "head -n ": -3, "tail -n ": -4, "sed -n '": -3, V.EDIT_VERB: -1},
    "no_tests_yet": {V.QUICK_TEST: 3, "python -m pytest -q": 1, V.LOOK_VERB: 4},
    "no_source": {"cat ": 2.5, "nl -ba ": 2.5, V.LOOK_VERB: 3},
    "can_edit": {V.EDIT_VERB: 6},
    "all_passed": {"<submit>": 12},
    "edited_since_test": {V.QUICK_TEST: 5},
    "failing_but_unmapped": {"cat ": 2, "nl -ba ": 2},
    "source_but_no_tests": {V.QUICK_TEST: 4},
    "no_files_known": {V.LOOK_VERB: 4},
    "progressing": {"<submit>": -14},
}
# Give up after GIVE_UP_TURN turns (every turn costs a test run and its output's tokens),
# unless the last test runs are still cutting the failures ("progressing"); never past STOP_TURN.
# A failed group teaches nothing, so a bug whose fix the prior ranks low is learned only if some
# attempt stumbles on it: two more tries per attempt (9, not 7), with `<call>` at 1.4, took calc's
# `len(xs)` -> `(len(xs) - 1)` fixes from 0 of 40 train attempts in three of five full runs to 12-28
# of 40 in three probe runs (docs/bench/builtin-policy/learning.md, section "0 (v10)").
GIVE_UP_TURN = 9
STOP_TURN = 11
SLOT_PRIOR: dict[str, dict[str, float]] = {
    "flag": {"flag:/": 4, "flag:/2": 0.5, "flag:/g": -1},
    "suffix": {V.EDIT_SUFFIXES[0]: 4, V.EDIT_SUFFIXES[1]: -1},
}
# A line whose edits the tests keep rejecting is left for another (`log_bad_tries`, per log of the
# rejected texts): at -0.3, with a revert and a new try on the same line both cheap, textkit's
# `last_index` attempts spent most of their tries on `return -1` and few on the loop's stop.
# -1.5, untrained, 12 attempts per variant (docs/bench/builtin-policy/v11/probe/untrained_cover.py):
# textkit 22.6% -> 27.6%, calc 26.9% -> 29.2%; -3 was no better (builtin-policy/learning.md, section 0).
LINE_PRIOR: dict[str, float] = {
    "in_failing_fn": 3, "in_passing_fn": -3, "outside_fn": -5, "is_def": -5, "is_return": 0.5,
    "dirty_bad": 5, "dirty_good": -5, "fn_tried_in_command": -6, "line_reverted_in_command": 1,
    "line_tried_in_command": -5, "log_bad_tries": -1.5, "log_fragments": 0.0, "failing_fn_untouched": 0.5,
    "calls_failing_fn": -3,
}
OLD_KIND_PRIOR: dict[str, float] = {
    "compare": 2.0, "arith": 2.0, "assign": 1.0, "logic": 0.5, "int": 1.2, "float": 0.5, "const": 0.3,
    "str": 0.5, "builtin": 1.2, "offset": 1.0, "index": 0.5, "call": 1.4, "pair": 0.3, "calls": 0.8,
    "wrap": 0.0, "swap": 0.0, "eol": 0.3,
}
PATH_PRIOR: dict[str, float] = {"source": 2, "test": -4, "seen": 0.5, "has_failing_fn": 3, "focus": 1}
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
    ("sum", "len"), ("int", "round"), ("any", "all"), ("lower", "upper"), ("startswith", "endswith"),
    ("append", "extend"), ("''", "' '"), ("'-'", "'_'"), ("','", "' '"),
    (" + 1", " - 1"), (" + 1", " + 2"), (" * 2", " / 2"), (" / 2", " // 2"), ("", " + 1"), ("", " - 1"),
    ("[0]", "[-1]"), ("[1]", "[0]"), ("[-1]", "[-2]"), ("[1:]", "[:-1]"),
    (V.CALL, "(& - 1)"), (V.CALL, "(& + 1)"), (V.PAIR, "(\\2, \\1)"), (V.CALLS, "\\3(\\2\\1("),
)


def _fill(vector: np.ndarray, names: tuple[str, ...], values: dict[str, float], scale: float = 1.0) -> None:
    for name, value in values.items():
        vector[names.index(name)] = value * scale


def give_up_prior(turn: int, stop: int | None = None) -> dict[str, dict[str, float]]:
    """`<submit>` likelier over the two turns before `turn` and all but certain from it on,
    unless progressing (which outweighs it), and certain from `stop` on whatever happens."""
    stop = max(turn, STOP_TURN if stop is None else stop)
    out = {f"turn_{turn - 2}": {"<submit>": 7.0}, f"turn_{turn - 1}": {"<submit>": 10.0}}
    out.update({f"turn_{t}": {"<submit>": 16.0 if t < stop else 30.0} for t in range(turn, P.MAX_TURN_FEATURE + 1)})
    return out


def _verb_weights() -> np.ndarray:
    w = np.zeros(P.SHAPES["verb_w"])
    for context, columns in give_up_prior(GIVE_UP_TURN).items():
        for verb, value in columns.items():
            w[P.VERB_CONTEXT.index(context), G.VERB_CHOICES.index(V.piece_id(verb))] = value
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
    _fill(out["path_w"], P.PATH_FEATURES, PATH_PRIOR)
    for name in ("same_kind", "incompatible_kind"):
        out["new_w"][P.NEW_FEATURES.index(name)] *= scale
    out["pair_w"] = _pair_weights(scale)
    sep = out["sep_w"]
    for name, value in SEP_PRIOR.items():
        sep[P.SEP_CONTEXT.index(name), 0] = value
    return {name: w * SHARPNESS for name, w in out.items()}
