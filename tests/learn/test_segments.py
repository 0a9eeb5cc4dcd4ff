"""Token-exact segments: extension appends, anything else starts a new segment; datums per segment."""

from __future__ import annotations

import pytest

from rl_daytona.learn.datum import Datum, DatumError, datums_from_rollout
from rl_daytona.learn.segments import SampledTurn, SegmentError, SegmentedTokens, segment_turns
from rl_daytona.types import PhaseTimings, Rollout, RolloutStatus, Trajectory


def test_a_prompt_that_extends_appends_only_its_new_tokens() -> None:
    segments = segment_turns([SampledTurn((1, 2), (3, 4), (-0.3, -0.4)), SampledTurn((1, 2, 3, 4, 5), (6,), (-0.6,))])
    assert len(segments) == 1 and segments[0].token_ids == (1, 2, 3, 4, 5, 6)
    assert segments[0].loss_mask == (0, 0, 1, 1, 0, 1) and segments[0].logprobs == (0, 0, -0.3, -0.4, 0, -0.6)


def test_a_prompt_that_re_renders_history_starts_a_new_segment_with_its_whole_prompt() -> None:
    tokens = SegmentedTokens()
    assert tokens.add_turn([1, 2], [3, 4], [-0.3, -0.4]) is False
    assert tokens.add_turn([1, 2, 9, 5], [6], [-0.6]) is True  # history re-rendered (3, 4 -> 9)
    first, second = tokens.segments()
    assert second.token_ids == (1, 2, 9, 5, 6) and second.loss_mask == (0, 0, 0, 0, 1)
    assert first.token_ids == (1, 2, 3, 4) and tokens.segment_starts == [4]


def test_unusable_turns_are_refused() -> None:
    with pytest.raises(SegmentError, match="2 sampled token ids but 1 logprobs"):
        SegmentedTokens().add_turn([1], [2, 3], [-0.1])
    with pytest.raises(SegmentError, match="at least one prompt token"):
        SegmentedTokens().add_turn([], [2], [-0.1])


def _rollout(tokens: SegmentedTokens) -> Rollout:
    traj = Trajectory(token_ids=tuple(tokens.token_ids), logprobs=tuple(tokens.logprobs),
                      loss_mask=tuple(tokens.loss_mask), segment_starts=tuple(tokens.segment_starts))
    return Rollout("r", "t", "v", "g", 0, 1.0, RolloutStatus.OK, PhaseTimings(), traj)


def test_a_rollout_in_two_segments_is_two_datums_never_one_across_the_boundary() -> None:
    tokens = SegmentedTokens()
    tokens.add_turn([1, 2], [3, 4], [-0.3, -0.4])
    tokens.add_turn([1, 2, 9, 5], [6], [-0.6])
    datums = datums_from_rollout(_rollout(tokens), 0.5)
    assert [d.model_input for d in datums] == [(1, 2, 3), (1, 2, 9, 5)]
    assert [d.advantages for d in datums] == [(0.0, 0.5, 0.5), (0.0, 0.0, 0.0, 0.5)]
    assert datums[1].logprobs == (0.0, 0.0, 0.0, -0.6)
    with pytest.raises(DatumError, match="2 segments"):
        Datum.from_rollout(_rollout(tokens), 0.5)
