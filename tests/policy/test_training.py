"""The Tinker-shaped trainer on the built-in model: exact loss gradients, accumulation, PPO
clipping, Adam steps, datum validation and save/load, on real sampled trajectories."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rl_daytona.policy import params as P
from rl_daytona.policy import vocab as V
from rl_daytona.policy.model import PolicyModel
from rl_daytona.policy.training import Trainer, TrainDatum, TrainingError, completion_mask, parse_adam, parse_datum
from tests.policy.conftest import Episode, Sample

ADAM = parse_adam({"learning_rate": 0.05})


def _episode_sequence(episode: Episode) -> tuple[list[int], list[float], list[int]]:
    """(ids, sampler logprobs aligned with ids, loss mask) of a whole multi-turn episode."""
    ids, mask = episode.chat.training_sequence()
    flat = iter(x for turn in episode.logprobs for x in turn)
    return ids, [next(flat) if m else 0.0 for m in mask], mask


def _sample_sequence(s: Sample) -> tuple[list[int], list[float], list[int]]:
    ids = list(s.context) + list(s.ids)
    return ids, [0.0] * len(s.context) + list(s.logprobs), [0] * len(s.context) + [1] * len(s.ids)


def _datum(ids: list[int], lps: list[float] | np.ndarray, mask: list[int],
           advantage: float | np.ndarray) -> TrainDatum:
    """A datum exactly as Tinker's wire carries it (targets are ids[1:])."""
    adv = np.broadcast_to(np.asarray(advantage, dtype=float), (len(ids),)) * np.asarray(mask)
    return TrainDatum(tuple(ids), np.asarray(lps, dtype=float)[1:] * np.asarray(mask)[1:], adv[1:].copy())


def _wire(ids: list[int], lps: list[float], mask: list[int], advantage: float) -> dict[str, Any]:
    n = len(ids) - 1
    return {"model_input": {"chunks": [{"type": "encoded_text", "tokens": ids[:-1]}]},
            "loss_fn_inputs": {
                "target_tokens": {"data": ids[1:], "dtype": "int64", "shape": [n]},
                "logprobs": {"data": [lp if m else 0.0 for lp, m in zip(lps[1:], mask[1:])],
                             "dtype": "float32", "shape": [n]},
                "advantages": {"data": [advantage if m else 0.0 for m in mask[1:]], "dtype": "float32",
                               "shape": [n]}}}


def _loss(params: dict[str, np.ndarray], datums: list[TrainDatum], loss_fn: str = "importance_sampling") -> float:
    return Trainer(PolicyModel(params=params)).forward_backward(datums, loss_fn)["metrics"]["loss:sum"]


def _long_sample(samples: list[Sample], min_len: int = 12) -> Sample:
    return next(s for s in samples if s.temperature == 1.0 and len(s.ids) >= min_len and s.finished)


def _grads_equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert set(a) == set(b)
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-12, atol=1e-15, err_msg=name)


def test_the_mask_from_role_markers_is_the_episodes_own(episodes: list[Episode]) -> None:
    for episode in episodes:
        ids, _, mask = _episode_sequence(episode)
        assert completion_mask(ids) == mask and sum(mask) > 0


def test_importance_sampling_gradient_is_the_derivative_of_the_returned_loss(episodes: list[Episode]) -> None:
    ids, lps, mask = _episode_sequence(episodes[0])
    rng = np.random.default_rng(3)
    # off-policy sampler logprobs (ratios spread around 1) and per-token advantages of both signs
    sampler = np.asarray(lps) + rng.normal(0.0, 0.3, len(ids)) * np.asarray(mask)
    datum = _datum(ids, sampler, mask, rng.normal(0.0, 1.0, len(ids)))
    trainer = Trainer(PolicyModel())
    out = trainer.forward_backward([datum], "importance_sampling")
    base = PolicyModel().params
    assert out["metrics"]["loss:sum"] == pytest.approx(_loss(base, [datum]), abs=1e-12)

    nonzero = sorted((name, int(i)) for name, g in trainer.grads.items() for i in np.flatnonzero(g))
    assert len(nonzero) > 10
    steepest = sorted(nonzero, key=lambda k: -abs(trainer.grads[k[0]].flat[k[1]]))[:3]
    picked = [nonzero[int(i)] for i in rng.choice(len(nonzero), size=4, replace=False)]
    untouched = next((name, int(i)) for name, g in trainer.grads.items() for i in np.flatnonzero(g == 0))
    eps = 1e-5
    for name, index in steepest + picked + [untouched]:
        up, down = copy.deepcopy(base), copy.deepcopy(base)
        up[name].reshape(-1)[index] += eps
        down[name].reshape(-1)[index] -= eps
        numeric = (_loss(up, [datum]) - _loss(down, [datum])) / (2 * eps)
        assert trainer.grads[name].flat[index] == pytest.approx(numeric, rel=1e-5, abs=1e-7), (name, index)


def test_the_returned_logprobs_and_loss_are_the_models_own(episodes: list[Episode]) -> None:
    ids, lps, mask = _episode_sequence(episodes[1])
    out = Trainer(PolicyModel()).forward_backward([_datum(ids, lps, mask, 0.5)], "importance_sampling")
    (row,) = out["loss_fn_outputs"]
    assert row["logprobs"]["shape"] == [len(ids) - 1]
    np.testing.assert_allclose(row["logprobs"]["data"], np.asarray(lps[1:]) * np.asarray(mask[1:]), atol=1e-9)
    # on-policy every ratio is 1, so the loss is minus the summed advantage
    assert out["metrics"]["loss:sum"] == pytest.approx(-0.5 * sum(mask), rel=1e-9)
    assert out["metrics"]["tokens:sum"] == sum(mask) and out["metrics"]["datums:sum"] == 1.0


def test_two_calls_accumulate_exactly_like_one_call_with_both(episodes: list[Episode], samples: list[Sample]) -> None:
    ids1, lps1, mask1 = _episode_sequence(episodes[0])
    d1 = _datum(ids1, lps1, mask1, 1.0)
    ids2, lps2, mask2 = _sample_sequence(_long_sample(samples))
    d2 = _datum(ids2, np.asarray(lps2) - 0.1 * np.asarray(mask2), mask2, -0.5)
    split, joint, alone = Trainer(PolicyModel()), Trainer(PolicyModel()), Trainer(PolicyModel())
    first = split.forward_backward([d1], "importance_sampling")
    second = split.forward_backward([d2], "importance_sampling")
    both = joint.forward_backward([d1, d2], "importance_sampling")
    _grads_equal(split.grads, joint.grads)
    assert split.pending_datums == joint.pending_datums == 2
    assert first["metrics"]["loss:sum"] + second["metrics"]["loss:sum"] == pytest.approx(both["metrics"]["loss:sum"])
    assert first["loss_fn_outputs"] + second["loss_fn_outputs"] == both["loss_fn_outputs"]
    alone.forward_backward([d2], "importance_sampling")
    only_first = Trainer(PolicyModel())
    only_first.forward_backward([d1], "importance_sampling")
    _grads_equal(joint.grads, {k: only_first.grads[k] + alone.grads[k] for k in joint.grads})


@pytest.mark.parametrize("ratio, sign, clipped", [
    (5.0, +1.0, True),    # far above 1.2 with a positive advantage: the clipped term is smaller
    (5.0, -1.0, False),   # ... with a negative advantage the unclipped term is the pessimistic one
    (0.2, +1.0, False),
    (0.2, -1.0, True),
])
def test_ppo_gives_no_gradient_on_clipped_tokens(samples: list[Sample], ratio: float, sign: float,
                                                 clipped: bool) -> None:
    s = _long_sample(samples)
    ids, lps, mask = _sample_sequence(s)
    new = PolicyModel().sequence_logprobs(ids, mask)
    sampled = [i for i, m in enumerate(mask) if m]
    far = set(sampled[::2])  # every other sampled token is far off-policy, the rest on-policy
    sampler = np.array([new[i] - np.log(ratio) if i in far else new[i] for i in range(len(ids))])
    ppo = Trainer(PolicyModel())
    out = ppo.forward_backward([_datum(ids, sampler, mask, sign)], "ppo")
    # the same gradient as importance sampling once the clipped tokens carry no advantage
    adv = np.array([0.0 if (i in far and clipped) else sign * m for i, m in enumerate(mask)])
    reference = Trainer(PolicyModel())
    reference.forward_backward([_datum(ids, sampler, mask, adv)], "importance_sampling")
    _grads_equal(ppo.grads, reference.grads)
    assert out["metrics"]["clipped:sum"] == (len(far) if clipped else 0)
    bound = 1.2 if ratio > 1 else 0.8
    far_term = min(ratio * sign, bound * sign)
    expected = -(sign * (len(sampled) - len(far)) + far_term * len(far))
    assert out["metrics"]["loss:sum"] == pytest.approx(expected, rel=1e-9)


def test_ppo_with_every_token_clipped_has_an_all_zero_gradient(samples: list[Sample]) -> None:
    ids, lps, mask = _sample_sequence(_long_sample(samples))
    new = PolicyModel().sequence_logprobs(ids, mask)
    datum = _datum(ids, new - np.log(5.0) * np.asarray(mask), mask, 1.0)
    trainer = Trainer(PolicyModel())
    out = trainer.forward_backward([datum], "ppo")
    assert out["metrics"]["clipped:sum"] == sum(mask[1:])
    assert trainer.grads and all(not np.any(g) for g in trainer.grads.values())
    # wider thresholds from loss_fn_config let the same tokens through
    wide = Trainer(PolicyModel())
    wide.forward_backward([datum], "ppo", {"clip_low_threshold": 0.1, "clip_high_threshold": 10.0})
    assert any(np.any(g) for g in wide.grads.values())


def test_optim_step_bumps_the_version_applies_adam_and_clears_the_gradient(episodes: list[Episode]) -> None:
    ids, lps, mask = _episode_sequence(episodes[0])
    trainer = Trainer(PolicyModel())
    before = {k: v.copy() for k, v in trainer.model.params.items()}
    trainer.forward_backward([_datum(ids, lps, mask, 1.0)], "importance_sampling")
    grads = {k: v.copy() for k, v in trainer.grads.items()}
    out = trainer.optim_step(parse_adam({"learning_rate": 0.01}))
    assert out["version"] == trainer.model.version == 1
    assert out["metrics"]["datums"] == 1.0
    assert out["metrics"]["grad_norm"] == pytest.approx(np.sqrt(sum(float((g * g).sum()) for g in grads.values())))
    assert trainer.grads == {} and trainer.pending_datums == 0
    moved = 0
    for name, g in grads.items():
        delta = trainer.model.params[name] - before[name]
        assert np.all(delta[g == 0] == 0.0), name
        assert np.all(np.sign(delta[g != 0]) == -np.sign(g[g != 0])), name  # against the loss gradient
        moved += int(np.count_nonzero(delta))
    assert moved > 0
    with pytest.raises(TrainingError, match="no accumulated gradient"):
        trainer.optim_step(ADAM)
    assert trainer.model.version == 1


def test_optim_step_without_forward_backward_is_refused() -> None:
    trainer = Trainer(PolicyModel())
    with pytest.raises(TrainingError, match="without forward_backward"):
        trainer.optim_step(ADAM)
    assert trainer.model.version == 0


@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_a_few_steps_move_the_trajectorys_logprob_with_the_advantage(episodes: list[Episode],
                                                                    advantage: float) -> None:
    ids, _, mask = _episode_sequence(episodes[1])
    trainer = Trainer(PolicyModel())
    history = []
    for _ in range(4):
        current = trainer.model.sequence_logprobs(ids, mask)
        history.append(float(current.sum()))
        trainer.forward_backward([_datum(ids, current, mask, advantage)], "importance_sampling")
        trainer.optim_step(ADAM)
    history.append(float(trainer.model.sequence_logprobs(ids, mask).sum()))
    steps = [b - a for a, b in zip(history, history[1:])]
    assert all(np.sign(d) == advantage for d in steps), history
    assert trainer.model.version == 4


def _valid_wire(samples: list[Sample]) -> dict[str, Any]:
    s = _long_sample(samples)
    ids, lps, mask = _sample_sequence(s)
    return _wire(ids, lps, mask, 1.0)


def _bad(name: str, raw: dict[str, Any]) -> Any:
    ids = raw["model_input"]["chunks"][0]["tokens"]
    inputs = raw["loss_fn_inputs"]
    targets = inputs["target_tokens"]["data"]
    if name == "not an object":
        return ["model_input"]
    if name == "no loss_fn_inputs":
        return {"model_input": raw["model_input"]}
    if name == "model_input a string":
        raw["model_input"] = "hello"
    elif name == "an image chunk":
        raw["model_input"]["chunks"].append({"type": "image", "data": "..."})
    elif name == "empty model_input":
        raw["model_input"]["chunks"][0]["tokens"] = []
    elif name == "negative token":
        ids[3] = -1
    elif name == "token past the vocabulary":
        ids[3] = V.VOCAB_SIZE
    elif name == "boolean token":
        ids[3] = True
    elif name == "float token":
        ids[3] = 5.5
    elif name == "no advantages":
        del inputs["advantages"]
    elif name == "one target too few":
        inputs["target_tokens"]["data"] = targets[:-1]
    elif name == "targets not shifted":
        inputs["target_tokens"]["data"] = ids
    elif name == "a target changed":
        targets[5] = (targets[5] + 1) % V.VOCAB_SIZE
    elif name == "logprobs one short":
        inputs["logprobs"]["data"] = inputs["logprobs"]["data"][:-1]
    elif name == "advantages one long":
        inputs["advantages"]["data"] = inputs["advantages"]["data"] + [0.0]
    elif name == "nan logprob":
        inputs["logprobs"]["data"][-1] = float("nan")
    elif name == "infinite advantage":
        inputs["advantages"]["data"][-1] = float("inf")
    elif name == "text logprob":
        inputs["logprobs"]["data"][-1] = "low"
    elif name == "logprobs not a list":
        inputs["logprobs"] = 0.5
    return raw


BAD_DATUMS = ["not an object", "no loss_fn_inputs", "model_input a string", "an image chunk", "empty model_input",
              "negative token", "token past the vocabulary", "boolean token", "float token", "no advantages",
              "one target too few", "targets not shifted", "a target changed", "logprobs one short",
              "advantages one long", "nan logprob", "infinite advantage", "text logprob", "logprobs not a list"]


@pytest.mark.parametrize("name", BAD_DATUMS)
def test_bad_datums_are_training_errors_naming_the_datum(samples: list[Sample], name: str) -> None:
    raw = _valid_wire(samples)
    parse_datum(copy.deepcopy(raw), 0)  # the unmodified datum is fine
    with pytest.raises(TrainingError, match="datum 7"):
        parse_datum(_bad(name, raw), 7)


@pytest.mark.parametrize("bad_token", [V.VOCAB_SIZE, V.VOCAB_SIZE + 10_000, -3])
def test_the_last_target_token_is_checked_against_the_vocabulary_too(samples: list[Sample], bad_token: int) -> None:
    """BUG (training.parse_datum): only `model_input` is checked against the vocabulary; the
    shift check covers target_tokens[:-1], so the LAST target token is never validated. A datum
    whose final target is outside the vocabulary parses, and the failure surfaces later inside
    the model as a plain ValueError ("not a candidate"): an HTTP 500 instead of the 400 a bad
    datum gets. Fix: validate every target token (or `targets[-1]`) like model_input."""
    raw = _valid_wire(samples)
    raw["loss_fn_inputs"]["target_tokens"]["data"][-1] = bad_token
    with pytest.raises(TrainingError, match="datum 0"):
        parse_datum(raw, 0)


def test_a_completion_the_grammar_cannot_produce_is_refused_without_touching_the_gradient(
        samples: list[Sample], episodes: list[Episode]) -> None:
    """BUG (training.Trainer.forward_backward/_one): a datum whose sampled span holds an
    in-vocabulary token that is not a grammar candidate there (e.g. a byte token where a verb
    must be) makes `model.steps` raise a plain ValueError, not TrainingError, so the server
    answers 500 "internal error" instead of 400. Worse, datums are scored one by one and each
    one's gradient is added to `self.grads` immediately, so the datums before the bad one stay
    accumulated after the call failed (pending_datums is not bumped): the Learner's retry of that
    forward_backward then adds them a second time, and the next optim_step applies them.
    Fix: compute every datum's gradient into a local dict, catch ValueError from the model and
    raise TrainingError, and merge into `self.grads` only after the whole batch succeeded."""
    ids, lps, mask = _episode_sequence(episodes[0])
    good = _datum(ids, lps, mask, 1.0)
    s = _long_sample(samples)
    sids, slps, smask = _sample_sequence(s)
    start = len(s.context)
    sids[start] = V.BYTE_OFFSET + ord("x")  # a raw byte where the first command piece must be
    bad = _datum(sids, slps, smask, 1.0)
    trainer = Trainer(PolicyModel())
    with pytest.raises(TrainingError):
        trainer.forward_backward([good, bad], "importance_sampling")
    assert trainer.grads == {} and trainer.pending_datums == 0


def test_an_unknown_loss_is_refused(samples: list[Sample]) -> None:
    ids, lps, mask = _sample_sequence(_long_sample(samples))
    trainer = Trainer(PolicyModel())
    with pytest.raises(TrainingError, match="unknown loss_fn 'cross_entropy'"):
        trainer.forward_backward([_datum(ids, lps, mask, 1.0)], "cross_entropy")
    assert trainer.grads == {} and trainer.pending_datums == 0


@pytest.mark.parametrize("adam", [{"learning_rate": -0.1}, {"beta1": 1.0}, {"beta2": -0.5}, {"eps": 0.0},
                                  {"learning_rate": "fast"}])
def test_bad_adam_params_are_refused(adam: dict[str, Any]) -> None:
    with pytest.raises(TrainingError, match="adam_params"):
        parse_adam(adam)


def test_adam_params_default_to_tinkers() -> None:
    assert parse_adam(None) == {"learning_rate": 1e-4, "beta1": 0.9, "beta2": 0.95, "eps": 1e-12, "weight_decay": 0.0}
    assert parse_adam({"learning_rate": 0.3, "weight_decay": 0.01})["learning_rate"] == 0.3


def test_save_then_load_restores_version_params_and_adam_state(tmp_path: Path, episodes: list[Episode]) -> None:
    ids, lps, mask = _episode_sequence(episodes[0])
    datum = _datum(ids, lps, mask, 1.0)
    trainer = Trainer(PolicyModel())
    trainer.forward_backward([datum], "importance_sampling")
    trainer.optim_step(ADAM)
    saved = trainer.save(str(tmp_path / "policy"))
    assert saved["version"] == 1 and Path(saved["path"] + ".npz").exists()
    assert json.loads((tmp_path / "policy.json").read_text())["version"] == 1

    other = Trainer(PolicyModel())
    other.forward_backward([datum], "importance_sampling")  # pending work is dropped by a load
    assert other.load(str(tmp_path / "policy")) == {"path": str(tmp_path / "policy"), "version": 1}
    assert other.model.version == 1 and other.grads == {} and other.pending_datums == 0
    for name in P.SHAPES:
        np.testing.assert_array_equal(other.model.params[name], trainer.model.params[name])
    # Adam's moments came back: the same next step gives the same weights
    for t in (trainer, other):
        t.forward_backward([datum], "importance_sampling")
        assert t.optim_step(ADAM)["version"] == 2
    for name in P.SHAPES:
        np.testing.assert_array_equal(other.model.params[name], trainer.model.params[name])


def test_loading_a_missing_state_is_a_training_error(tmp_path: Path) -> None:
    trainer = Trainer(PolicyModel())
    with pytest.raises(TrainingError, match="cannot load policy state"):
        trainer.load(str(tmp_path / "nothing-here"))
    assert trainer.model.version == 0
