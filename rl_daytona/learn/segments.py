"""Token-exact segments of a multi-turn trajectory (one segment -> one training datum).

    tokens = SegmentedTokens()
    for turn in turns:                      # per turn: the prompt sent, the ids sampled, their logprobs
        tokens.add_turn(turn.prompt_ids, turn.completion_ids, turn.logprobs)
    tokens.segments()                       # -> [TokenSegment, ...]

Invariant: every token with loss mask 1 is exactly a sampled token with its sampled logprob,
in the order sampled, each sampled token appears exactly once, and every other token (prompt,
tool output, template framing) has mask 0 and logprob 0. A turn whose prompt extends the
current segment (previous prompt + previous sample) appends only the new prompt tokens;
a turn whose prompt does not (a template that re-renders history differently from how it
was sampled: Qwen3 dropping `<think>` blocks, a re-serialised tool call, a different BPE
split) starts a new segment holding its whole prompt, so nothing is ever trained under a
context the model did not see.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence


class SegmentError(ValueError):
    """A turn that cannot be stored token-exactly (logprobs of the wrong length, an empty first prompt)."""


@dataclass(frozen=True)
class SampledTurn:
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    logprobs: tuple[float, ...]


@dataclass(frozen=True)
class TokenSegment:
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    loss_mask: tuple[int, ...]


@dataclass
class SegmentedTokens:
    """All segments stored once, concatenated; `segment_starts` are where segments 2.. begin."""

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    segment_starts: list[int] = field(default_factory=list)

    def add_turn(self, prompt_ids: Sequence[int], completion_ids: Sequence[int], logprobs: Sequence[float]) -> bool:
        """Append one sampled turn; True when it had to start a new segment."""
        if len(logprobs) != len(completion_ids):
            raise SegmentError(f"{len(completion_ids)} sampled token ids but {len(logprobs)} logprobs")
        start = self.segment_starts[-1] if self.segment_starts else 0
        current = self.token_ids[start:]
        fresh_segment = bool(self.token_ids) and list(prompt_ids[: len(current)]) != current
        if fresh_segment:
            self.segment_starts.append(len(self.token_ids))
            current = []
        if not self.token_ids or fresh_segment:
            if not prompt_ids and completion_ids:
                raise SegmentError("a segment must start with at least one prompt token")
        new = list(prompt_ids[len(current):])
        self._extend(new, [0.0] * len(new), 0)
        self._extend(completion_ids, logprobs, 1)
        return fresh_segment

    def _extend(self, ids: Sequence[int], lps: Sequence[float], mask: int) -> None:
        self.token_ids.extend(int(i) for i in ids)
        self.logprobs.extend(float(x) for x in lps)
        self.loss_mask.extend([mask] * len(ids))

    def segments(self) -> list[TokenSegment]:
        return split_segments(self.token_ids, self.logprobs, self.loss_mask, self.segment_starts)


def split_segments(ids: Sequence[int], logprobs: Sequence[float], mask: Sequence[int],
                   starts: Sequence[int]) -> list[TokenSegment]:
    """The segments of a stored trajectory (`starts`: offsets of segments 2..)."""
    bounds = [0, *starts, len(ids)]
    return [TokenSegment(tuple(ids[a:b]), tuple(logprobs[a:b]), tuple(mask[a:b]))
            for a, b in zip(bounds, bounds[1:]) if b > a]


def segment_turns(turns: Sequence[SampledTurn]) -> list[TokenSegment]:
    """The token-exact segments of a whole trajectory given turn by turn."""
    tokens = SegmentedTokens()
    for turn in turns:
        tokens.add_turn(turn.prompt_ids, turn.completion_ids, turn.logprobs)
    return tokens.segments()
