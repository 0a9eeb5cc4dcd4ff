"""The parameter layout of the built-in policy: names, shapes and the index helpers.

Invariant: every logit is a sum of `params[name].flat[index] * value` terms, so the
gradient of a logprob is the same sum of (feature - expected feature) and nothing else;
the layout here is the only place that knows the shapes.
"""

from __future__ import annotations

import zlib
from functools import lru_cache

from rl_daytona.policy import grammar as G
from rl_daytona.policy import vocab as V

HASH_SIZE = 1 << 15
MAX_TURN_FEATURE = 15  # turn_0 .. turn_15; a later turn shares turn_15
# The value of the hashed (function | line text, old, new) keys scoring a replacement. Adam
# moves a parameter by about lr per step whatever its gradient's scale, so one step moves a
# replacement's learned logit by NEW_GAIN x lr and the generic weights by lr: which fix suits
# which line is learned fast, the habits slowly. (Probed on calc, lr 0.2, 8 x 8 per step: 4 lifts
# held-out; 1 and 2 are slow; 8, or 4 on the line and old keys too, is noise-driven.)
NEW_GAIN = 4.0
# The same for the hashed (function | line text, old) keys choosing which fragment to replace
# (2 was probed, arm B of learning.md section "0 (v10)": no better).
OLD_GAIN = 1.0
N_FRAGMENTS = len(V.FRAGMENTS)
N_VERBS = len(G.VERB_CHOICES)
SLOTS: tuple[str, ...] = ("count", "range_a", "range_b", "flag", "suffix")

VERB_CONTEXT: tuple[str, ...] = (
    "bias", "no_tests_yet", "no_source", "can_edit", "all_passed", "edited_since_test",
    "failing_but_unmapped", "broken", "last_failed", "source_but_no_tests", "no_files_known",
    *(f"turn_{i}" for i in range(MAX_TURN_FEATURE + 1)),
    "last_none", "last_pytest", "last_view", "last_edit", "last_other", "progressing",
)
LINE_FEATURES: tuple[str, ...] = (
    "in_failing_fn", "in_passing_fn", "outside_fn", "is_def", "is_return", "dirty_bad",
    "dirty_good", "fn_tried_in_command", "line_reverted_in_command", "line_tried_in_command",
    "log_bad_tries", "log_fragments", "failing_fn_untouched", "calls_failing_fn",
    *(f"has_{kind}" for kind in V.KINDS),
)
OLD_FEATURES: tuple[str, ...] = ("revertible", "in_failing_fn", "repeated_on_line", "no_valid_new")
NEW_FEATURES: tuple[str, ...] = ("reverts", "known_bad", "same_kind", "compatible_kind", "incompatible_kind",
                                 "breaks_syntax", "unknown_name", "no_change", "rebinds")
FLAG_FEATURES: tuple[str, ...] = ("reverts", "no_change", "breaks")
PATH_FEATURES: tuple[str, ...] = ("bias", "source", "test", "seen", "has_failing_fn", "focus")
SEP_CONTEXT: tuple[str, ...] = ("bias", "untried_failing_fn", "unreverted_bad_line", "subs_2", "subs_3")

SHAPES: dict[str, tuple[int, ...]] = {
    "verb_w": (len(VERB_CONTEXT), N_VERBS),
    "slot_w": (len(SLOTS), V.BYTE_OFFSET),
    "line_w": (len(LINE_FEATURES),),
    "line_hash": (HASH_SIZE,),
    "old_bias": (N_FRAGMENTS,),
    "old_w": (len(OLD_FEATURES),),
    "old_hash": (HASH_SIZE,),
    "pair_w": (N_FRAGMENTS, N_FRAGMENTS),
    "new_w": (len(NEW_FEATURES),),
    "new_hash": (HASH_SIZE,),
    "sep_w": (len(SEP_CONTEXT), 2),
    "flag_w": (len(FLAG_FEATURES),),
    "path_w": (len(PATH_FEATURES),),
}


def index(names: tuple[str, ...], name: str) -> int:
    return names.index(name)


@lru_cache(maxsize=1 << 18, typed=True)
def hashed(*parts: object) -> int:
    """A stable (unsalted) hash bucket of a tuple of parts. Memoised, as the policy asks it of
    every candidate of every decision, so the parts must be hashable (strings, numbers, tuples)."""
    key = "\x1f".join(str(p) for p in parts).encode("utf-8")
    return zlib.crc32(key) % HASH_SIZE
