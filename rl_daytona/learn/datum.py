"""Training datums: one graded trajectory as Tinker's `Datum` fields, plus its wire size.

Invariant: a datum is built from the trajectory's token sequence exactly as the sampler
returned it (never re-tokenised): `model_input` = tokens[:-1], `target_tokens` = tokens[1:],
`logprobs` = the sampler's logprob of each target (0 on context), `advantages` = the
rollout's advantage on every sampled target and 0 on context. Its JSON is Tinker's wire
shape (ModelInput chunks, TensorData), so `nbytes` is what a chunk really sends. A trajectory
stored in several segments (a template that re-rendered history, `learn.segments`) gives one
datum per segment (`datums_from_rollout`), never one datum across a segment boundary.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from rl_daytona.learn.segments import TokenSegment, split_segments
from rl_daytona.types import Rollout


class DatumError(ValueError):
    """A trajectory that cannot become a datum (no tokens, inconsistent lengths)."""


@dataclass(frozen=True)
class Datum:
    model_input: tuple[int, ...]
    target_tokens: tuple[int, ...]
    logprobs: tuple[float, ...]
    advantages: tuple[float, ...]
    rollout_id: str = ""
    group_id: str = ""

    @classmethod
    def from_rollout(cls, rollout: Rollout, advantage: float) -> "Datum":
        """The datum of a one-segment trajectory (see `datums_from_rollout` for any trajectory)."""
        if rollout.trajectory.segment_starts:
            raise DatumError(f"rollout {rollout.rollout_id}: trajectory has "
                             f"{len(rollout.trajectory.segment_starts) + 1} segments; use datums_from_rollout")
        return datums_from_rollout(rollout, advantage)[0]

    @classmethod
    def from_segment(cls, segment: TokenSegment, advantage: float, rollout_id: str = "",
                     group_id: str = "") -> "Datum":
        ids, lps, mask = segment.token_ids, segment.logprobs, segment.loss_mask
        return cls(model_input=tuple(ids[:-1]), target_tokens=tuple(ids[1:]),
                   logprobs=tuple(float(x) if m else 0.0 for x, m in zip(lps[1:], mask[1:])),
                   advantages=tuple(float(advantage) if m else 0.0 for m in mask[1:]),
                   rollout_id=rollout_id, group_id=group_id)

    @property
    def sampled_tokens(self) -> int:
        return sum(1 for a, lp in zip(self.advantages, self.logprobs) if a != 0.0 or lp != 0.0)

    def to_wire(self) -> dict[str, Any]:
        """Tinker's Datum JSON: `model_input` chunks and TensorData loss inputs."""
        n = len(self.target_tokens)
        return {
            "model_input": {"chunks": [{"type": "encoded_text", "tokens": list(self.model_input)}]},
            "loss_fn_inputs": {
                "target_tokens": {"data": list(self.target_tokens), "dtype": "int64", "shape": [n]},
                "logprobs": {"data": list(self.logprobs), "dtype": "float32", "shape": [n]},
                "advantages": {"data": list(self.advantages), "dtype": "float32", "shape": [n]},
            },
        }

    @cached_property
    def nbytes(self) -> int:
        return len(json.dumps(self.to_wire(), separators=(",", ":")).encode())


def datums_from_rollout(rollout: Rollout, advantage: float) -> list[Datum]:
    """One datum per segment of the rollout's trajectory that holds sampled tokens."""
    traj = rollout.trajectory
    ids, lps, mask = traj.token_ids, traj.logprobs, traj.loss_mask
    if len(ids) < 2 or not (len(ids) == len(lps) == len(mask)):
        raise DatumError(f"rollout {rollout.rollout_id}: trajectory has no usable token sequence "
                         f"({len(ids)} ids, {len(lps)} logprobs, {len(mask)} mask)")
    segments = [s for s in split_segments(ids, lps, mask, traj.segment_starts) if any(s.loss_mask[1:])]
    if not segments:
        raise DatumError(f"rollout {rollout.rollout_id}: trajectory has no sampled tokens")
    return [Datum.from_segment(s, advantage, rollout.rollout_id, rollout.group_id) for s in segments]
