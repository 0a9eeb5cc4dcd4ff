"""Datums from real trajectories: alignment with the loss mask, Tinker wire shape, wire size."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from rl_daytona.learn.datum import Datum, DatumError
from rl_daytona.policy.training import completion_mask, parse_datum
from rl_daytona.types import Trajectory
from tests.learn.builders import rollout_of


def test_from_rollout_aligns_targets_logprobs_and_advantages_with_the_mask(trajectories: list[Trajectory]) -> None:
    for i, traj in enumerate(trajectories):
        advantage = 0.75 if i % 2 else -1.25
        d = Datum.from_rollout(rollout_of(traj, f"g{i}", 3, 1.0), advantage)
        ids, lps, mask = traj.token_ids, traj.logprobs, traj.loss_mask
        n = len(ids) - 1
        assert d.model_input == ids[:-1] and d.target_tokens == ids[1:]
        assert len(d.logprobs) == len(d.advantages) == n
        for k in range(n):  # target k is token k+1
            if mask[k + 1]:
                assert d.logprobs[k] == lps[k + 1] and d.advantages[k] == advantage
            else:
                assert d.logprobs[k] == 0.0 and d.advantages[k] == 0.0
        assert d.sampled_tokens == sum(mask[1:]) == traj.sampled_tokens
        assert (d.rollout_id, d.group_id) == (f"g{i}/3", f"g{i}")


def test_the_trainer_recovers_exactly_the_agents_loss_mask_from_the_tokens(trajectories: list[Trajectory]) -> None:
    """The wire carries no mask: the trainer's role-marker mask must be the agent's own."""
    assert any(t.turns >= 2 for t in trajectories)
    for traj in trajectories:
        assert completion_mask(traj.token_ids) == list(traj.loss_mask)


def test_to_wire_is_parsed_back_exactly_by_the_trainer(trajectories: list[Trajectory]) -> None:
    for i, traj in enumerate(trajectories):
        d = Datum.from_rollout(rollout_of(traj, "g", i, 0.0), 1.0 / 3.0)
        wire = d.to_wire()
        assert set(wire) == {"model_input", "loss_fn_inputs"}
        for raw in (wire, json.loads(json.dumps(wire))):
            parsed = parse_datum(raw, 0)
            assert parsed.tokens == traj.token_ids
            assert parsed.n_targets == len(d.target_tokens)
            assert parsed.sampler_logprobs.tolist() == list(d.logprobs)
            assert parsed.advantages.tolist() == list(d.advantages)
        n = len(d.target_tokens)
        for key, dtype in (("target_tokens", "int64"), ("logprobs", "float32"), ("advantages", "float32")):
            assert wire["loss_fn_inputs"][key]["shape"] == [n] and wire["loss_fn_inputs"][key]["dtype"] == dtype


def test_nbytes_is_the_compact_json_length(trajectories: list[Trajectory]) -> None:
    sizes = set()
    for traj in trajectories:
        d = Datum.from_rollout(rollout_of(traj, "g", 0, 1.0), -0.5)
        compact = json.dumps(d.to_wire(), separators=(",", ":")).encode()
        assert d.nbytes == len(compact)
        assert d.nbytes < len(json.dumps(d.to_wire()).encode())  # the default separators are longer
        sizes.add(d.nbytes)
    assert len(sizes) > 1


def test_a_rollout_without_tokens_raises(trajectories: list[Trajectory]) -> None:
    with pytest.raises(DatumError, match="no usable token sequence"):
        Datum.from_rollout(rollout_of(Trajectory(), "g", 0, 1.0), 1.0)
    traj = trajectories[0]
    one_token = dataclasses.replace(traj, token_ids=traj.token_ids[:1], logprobs=traj.logprobs[:1],
                                    loss_mask=traj.loss_mask[:1])
    with pytest.raises(DatumError):
        Datum.from_rollout(rollout_of(one_token, "g", 0, 1.0), 1.0)
    ragged = dataclasses.replace(traj, logprobs=traj.logprobs[:-1])
    with pytest.raises(DatumError, match="logprobs"):
        Datum.from_rollout(rollout_of(ragged, "g", 0, 1.0), 1.0)
    prompt_only = dataclasses.replace(traj, loss_mask=tuple(0 for _ in traj.loss_mask),
                                      logprobs=tuple(0.0 for _ in traj.logprobs))
    with pytest.raises(DatumError, match="no sampled tokens"):
        Datum.from_rollout(rollout_of(prompt_only, "g", 0, 1.0), 1.0)


def test_datum_logprobs_are_the_samplers_on_every_sampled_target(trajectories: list[Trajectory]) -> None:
    traj = trajectories[-1]
    d = Datum.from_rollout(rollout_of(traj, "g", 0, 1.0), 2.0)
    sampled = np.asarray(traj.loss_mask[1:], dtype=bool)
    np.testing.assert_array_equal(np.asarray(d.logprobs)[sampled], np.asarray(traj.logprobs[1:])[sampled])
    assert np.all(np.asarray(d.logprobs)[sampled] <= 0.0)
    assert np.count_nonzero(np.asarray(d.advantages)) == sampled.sum()
