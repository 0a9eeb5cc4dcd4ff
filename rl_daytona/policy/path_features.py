"""Which file a command names: a path spelled byte by byte among the files the policy knows.

Invariant: a pure function of (observation, completion prefix). The candidates at each byte
are the next bytes of the known paths that fit the command (a source for an edit, any file
for a view) and extend the bytes so far, plus the path's end once the bytes spell a whole
one; each candidate is scored by the features of the most relevant path it leads to (`relevance`:
one with a failing function first, then the focus, a source, a file seen, then sorted order), so
the choice of a file is made at the first byte that tells the paths apart and the rest are forced
(one candidate, logprob 0). With no known file the grammar's whole byte set is offered.

Scoring a byte by the first path in sorted order instead made `textkit/s` stand for `seqs.py`
when the failing function was in `strings.py`: `__init__.py` and `seqs.py` then looked alike, so
an edit's file was an even bet between the package's docstring and the right module.
"""

from __future__ import annotations

from typing import Sequence

from rl_daytona.policy import grammar as G
from rl_daytona.policy import params as P
from rl_daytona.policy import vocab as V
from rl_daytona.policy.decision import Decision, sparse_block
from rl_daytona.policy.observe import Observation, is_test_path


def spelled(prefix: Sequence[int]) -> str:
    """The path bytes at the end of a completion prefix."""
    n = len(prefix)
    while n and prefix[n - 1] >= V.BYTE_OFFSET:
        n -= 1
    return V.path_text(prefix[n:])


def path_choices(obs: Observation, verb: int) -> list[str]:
    """Paths a command may name: sources for an edit, every known file for a view."""
    paths = obs.sources if verb == G.EDIT_ID else obs.files
    return sorted(p for p in paths if p)


def decide_path(obs: Observation, prefix: Sequence[int], state: G.GrammarState,
                allowed: tuple[int, ...]) -> Decision:
    so_far = spelled(prefix)
    end = next(t for t in allowed if t < V.BYTE_OFFSET) if state.slot == "path" else None
    reps: dict[int, str] = {}
    for path in sorted(path_choices(obs, state.verb), key=lambda p: relevance(obs, p)):
        if not path.startswith(so_far):
            continue
        token = end if len(path) == len(so_far) else V.BYTE_OFFSET + ord(path[len(so_far)])
        if token is not None and token in allowed:
            reps.setdefault(token, path)
    if not reps:
        return Decision(allowed)
    candidates = tuple(reps)
    if len(candidates) == 1:
        return Decision(candidates)
    rows = [[(P.PATH_FEATURES.index(name), 1.0) for name in path_flags(obs, reps[t])] for t in candidates]
    return Decision(candidates, (sparse_block("path_w", rows),))


def relevance(obs: Observation, path: str) -> tuple[bool, bool, bool, bool, str]:
    """A sort key, most relevant first: has a failing function, is the focus, is a source, was
    seen, then the path itself. Independent of the weights, so a decision stays a pure function
    of (observation, prefix) and sampling and scoring agree."""
    flags = path_flags(obs, path)
    return ("has_failing_fn" not in flags, "focus" not in flags, "source" not in flags, "seen" not in flags, path)


def path_flags(obs: Observation, path: str) -> list[str]:
    """The names of the features that are on for one path."""
    belief = obs.beliefs.get(path)
    flags = ["bias", "test" if is_test_path(path) else "source"]
    if belief is not None and belief.lines:
        flags.append("seen")
    if belief is not None and belief.failing_functions:
        flags.append("has_failing_fn")
    if path == obs.path:
        flags.append("focus")
    return flags
