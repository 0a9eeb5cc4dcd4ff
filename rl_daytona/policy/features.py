"""Decisions: the candidate pieces at one step and the features that score them.

Invariant: `decide(obs, prefix)` is a pure function of the observation (itself a pure
function of the context ids) and of the completion so far. The candidates are the grammar's
allowed pieces, narrowed by a context mask (edit lines the policy has seen, fragments that
occur on the chosen line) that falls back to the grammar's set when it would be empty; the
sampler and the trainer call this same function, so masks and logits agree exactly.

Features describe bug shapes, never variant ids: the verb depends on what is known (tests
run? source seen? failures left?); edit choices on the line's function failing, the
fragments on it, earlier verdicts, and learnable (fragment -> replacement) pair weights,
plus hashed (function, fragment, replacement) and (line text, fragment, replacement) keys
that transfer between variants sharing a bug.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from rl_daytona.policy import edit_features, path_features
from rl_daytona.policy import grammar as G
from rl_daytona.policy import params as P
from rl_daytona.policy import vocab as V
from rl_daytona.policy.decision import Block, Decision, context_block, sparse_block
from rl_daytona.policy.observe import Observation

__all__ = ["Block", "Decision", "context_block", "decide", "sparse_block", "verb_context"]


def verb_context(obs: Observation) -> np.ndarray:
    """The context vector scoring the first piece of a command."""
    c = np.zeros(len(P.VERB_CONTEXT))
    failing = obs.tests_run and not obs.all_passed
    flags = {
        "bias": True, "no_tests_yet": not obs.tests_run, "no_source": not obs.source_seen,
        "can_edit": failing and obs.source_seen and bool(obs.failing_functions) or obs.broken,
        "all_passed": obs.all_passed and not obs.edited_since_test,
        "edited_since_test": obs.edited_since_test,
        "failing_but_unmapped": failing and obs.source_seen and not obs.failing_functions,
        "broken": obs.broken, "last_failed": obs.last_failed,
        "source_but_no_tests": obs.source_seen and not obs.tests_run, "no_files_known": not obs.sources,
        f"turn_{min(obs.turn, P.MAX_TURN_FEATURE)}": True, f"last_{_verb_class(obs.last_verb)}": True,
        "progressing": obs.progressing,
    }
    for name, on in flags.items():
        c[P.VERB_CONTEXT.index(name)] = float(on)
    return c


def _verb_class(verb: int) -> str:
    if verb < 0:
        return "none"
    if verb in G.PYTEST_IDS:
        return "pytest"
    if verb == G.EDIT_ID:
        return "edit"
    if verb in G.FILE_VIEW_IDS or verb in G.COUNT_VIEW_IDS or verb == G.RANGE_VIEW_ID:
        return "view"
    return "other"


def decide(obs: Observation, prefix: Sequence[int], state: G.GrammarState) -> Decision:
    """The candidates and feature blocks for the piece after `prefix` in `state`."""
    allowed = G.allowed(state)
    if state.slot == "verb":
        block = context_block("verb_w", verb_context(obs), P.N_VERBS, range(P.N_VERBS))
        return Decision(G.VERB_CHOICES, (block,))
    if len(allowed) == 1:
        return Decision(allowed)
    if state.slot in ("path0", "path"):
        return path_features.decide_path(obs, prefix, state, allowed)
    if state.slot in edit_features.SLOTS:
        return edit_features.decide_edit(obs, prefix, state, allowed)
    slot = P.SLOTS.index(state.slot)
    rows = [[(slot * V.BYTE_OFFSET + t, 1.0)] for t in allowed]
    return Decision(allowed, (sparse_block("slot_w", rows),))
