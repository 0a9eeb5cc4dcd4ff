"""A decision of the built-in policy: the candidate pieces at one step and the logit terms scoring
them. A leaf module: features, edit_features and path_features all build these, and none of
them imports another to get the types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class Block:
    """Logit terms `params[param].flat[index[j]] * value[j]` summed over row j of candidate j."""

    param: str
    index: np.ndarray  # (n_candidates, m) int64 flat indices into params[param]
    value: np.ndarray  # (n_candidates, m) float64; padding has value 0


@dataclass(frozen=True)
class Decision:
    candidates: tuple[int, ...]
    blocks: tuple[Block, ...] = ()


def sparse_block(param: str, rows: Sequence[Sequence[tuple[int, float]]]) -> Block:
    """A block from per-candidate lists of (flat index, value), zero-padded."""
    width = max((len(r) for r in rows), default=0) or 1
    index = np.zeros((len(rows), width), dtype=np.int64)
    value = np.zeros((len(rows), width), dtype=np.float64)
    for j, row in enumerate(rows):
        for k, (i, v) in enumerate(row):
            index[j, k], value[j, k] = i, v
    return Block(param, index, value)


def context_block(param: str, context: np.ndarray, n_columns: int, columns: Sequence[int]) -> Block:
    """Logits `context @ W[:, column]` for a (len(context), n_columns) weight matrix W."""
    active = np.flatnonzero(context)
    index = active[None, :] * n_columns + np.asarray(columns, dtype=np.int64)[:, None]
    value = np.broadcast_to(context[active][None, :], index.shape).astype(np.float64)
    return Block(param, index, value)
