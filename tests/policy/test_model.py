"""The log-linear policy: seeded sampling, exact logprobs and gradients, Adam, save/load."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rl_daytona.policy import grammar as G
from rl_daytona.policy import params as P
from rl_daytona.policy import vocab as V
from rl_daytona.policy.model import STATE_FORMAT, PolicyModel, TurnMemo, completion_spans
from tests.policy.conftest import Episode, Sample


def _embedded(context: tuple[int, ...] | list[int], ids: tuple[int, ...]) -> tuple[list[int], list[int]]:
    return list(context) + list(ids), [0] * len(context) + [1] * len(ids)


def _edit_sample(samples: list[Sample], context: str = "looked", min_len: int = 20) -> Sample:
    return next(s for s in samples if s.context_name == context and s.ids[0] == G.EDIT_ID
                and len(s.ids) >= min_len and s.temperature == 1.0)


def _touched(model: PolicyModel, ids: list[int], mask: list[int]) -> set[tuple[str, int]]:
    """(param, flat index) of every feature term of a multi-candidate decision."""
    out = set()
    for step in model.steps(ids, mask):
        if len(step.decision.candidates) > 1:
            for block in step.decision.blocks:
                out |= {(block.param, int(i)) for i, v in zip(block.index.ravel(), block.value.ravel()) if v != 0}
    return out


def test_same_seed_same_sample(contexts: dict[str, list[int]], prior_model: PolicyModel) -> None:
    for context in contexts.values():
        for seed in (0, 1, 2):
            a = prior_model.sample(context, np.random.default_rng(seed))
            b = prior_model.sample(context, np.random.default_rng(seed))
            detailed = prior_model.sample_detailed(context, np.random.default_rng(seed), top_k=5)
            assert a == b
            assert (list(detailed.token_ids), list(detailed.logprobs)) == a  # top_k only reports


def test_different_seeds_explore(contexts: dict[str, list[int]], prior_model: PolicyModel) -> None:
    drawn = {tuple(prior_model.sample(contexts["looked"], np.random.default_rng(s), temperature=1.5)[0])
             for s in range(16)}
    assert len(drawn) >= 3


def test_top_k_alternatives_are_sorted_and_contain_the_best(contexts: dict[str, list[int]],
                                                            prior_model: PolicyModel) -> None:
    s = prior_model.sample_detailed(contexts["looked"], np.random.default_rng(4), top_k=4)
    assert len(s.top) == len(s.token_ids)
    for token, lp, top in zip(s.token_ids, s.logprobs, s.top):
        lps = [x for _, x in top]
        assert 1 <= len(top) <= 4 and lps == sorted(lps, reverse=True)
        assert lp <= lps[0] + 1e-12
        if token in dict(top):
            assert dict(top)[token] == pytest.approx(lp, abs=1e-12)


def test_sequence_logprobs_reproduce_the_sampler(samples: list[Sample], prior_model: PolicyModel) -> None:
    for s in samples:
        ids, mask = _embedded(s.context, s.ids)
        lp = prior_model.sequence_logprobs(ids, mask, temperature=s.temperature)
        assert np.all(lp[: len(s.context)] == 0.0)
        np.testing.assert_allclose(lp[len(s.context):], s.logprobs, rtol=0, atol=1e-10)


def test_sequence_logprobs_reproduce_every_turn_of_an_episode(episodes: list[Episode],
                                                              prior_model: PolicyModel) -> None:
    for episode in episodes:
        ids, mask = episode.chat.training_sequence()
        assert len(completion_spans(mask)) == len(episode.chat.completions) >= 2
        lp = prior_model.sequence_logprobs(ids, mask)
        expected = [x for turn in episode.logprobs for x in turn]
        np.testing.assert_allclose(lp[np.asarray(mask) == 1], expected, rtol=0, atol=1e-10)
        assert np.all(lp[np.asarray(mask) == 0] == 0.0)


def test_greedy_picks_the_highest_logit_whatever_the_seed(contexts: dict[str, list[int]],
                                                          prior_model: PolicyModel) -> None:
    context = contexts["looked"]
    ids, lps = prior_model.sample(context, np.random.default_rng(0), temperature=0.0)
    assert prior_model.sample(context, np.random.default_rng(99), temperature=0.0) == (ids, lps)
    assert all(lp == 0.0 for lp in lps)
    seq, mask = _embedded(context, tuple(ids))
    for step in prior_model.steps(seq, mask):
        logits = prior_model.logits(step.decision)
        assert step.decision.candidates[int(np.argmax(logits))] == step.token


def test_a_token_that_is_not_a_candidate_is_refused(samples: list[Sample], prior_model: PolicyModel) -> None:
    s = _edit_sample(samples)
    bad = list(s.ids)
    bad[1] = V.LINE_IDS[V.MAX_LINE - 1]  # the grammar allows line 200, but it was never seen
    with pytest.raises(ValueError, match="not a candidate"):
        prior_model.sequence_logprobs(*_embedded(s.context, tuple(bad)))


def test_completion_spans() -> None:
    assert completion_spans([0, 1, 1, 0, 0, 1, 0, 1]) == [(1, 3), (5, 6), (7, 8)]
    assert completion_spans([]) == [] and completion_spans([0, 0]) == []


def test_logprob_grads_match_finite_differences(samples: list[Sample], episodes: list[Episode]) -> None:
    model = PolicyModel()
    ids, mask = episodes[0].chat.training_sequence()
    rng = np.random.default_rng(17)
    weights = rng.normal(size=len(ids)) * np.asarray(mask)
    grads = model.logprob_grads(ids, mask, weights)

    touched = _touched(model, ids, mask)
    params_hit = {p for p, _ in touched}
    assert {"verb_w", "line_w", "old_bias", "pair_w", "new_w"} <= params_hit
    nonzero = {(name, int(i)) for name, g in grads.items() for i in np.flatnonzero(g)}
    assert nonzero and nonzero <= touched  # no gradient where no feature fired

    def objective() -> float:
        return float(np.dot(weights, model.sequence_logprobs(ids, mask)))

    picks = sorted(touched)
    chosen = [picks[int(i)] for i in rng.choice(len(picks), size=10, replace=False)]
    chosen += [max(nonzero, key=lambda k: abs(grads[k[0]].flat[k[1]]))]  # the steepest coordinate too
    eps = 1e-5
    for name, index in chosen:
        flat = model.params[name].reshape(-1)
        original = flat[index]
        flat[index] = original + eps
        up = objective()
        flat[index] = original - eps
        down = objective()
        flat[index] = original
        numeric = (up - down) / (2 * eps)
        assert grads[name].flat[index] == pytest.approx(numeric, rel=1e-5, abs=1e-7), (name, index)


def test_apply_adam_descends_and_bumps_the_version(samples: list[Sample]) -> None:
    model = PolicyModel()
    before = {k: v.copy() for k, v in model.params.items()}
    s = _edit_sample(samples)
    ids, mask = _embedded(s.context, s.ids)
    grads = model.logprob_grads(ids, mask, mask)
    loss_grads = {k: -g for k, g in grads.items()}
    assert model.apply_adam(loss_grads, lr=0.01) == 1 and model.version == 1
    for name, g in loss_grads.items():
        moved = model.params[name] - before[name]
        assert np.all(moved[g == 0] == 0.0), name  # untouched params stay put
        assert np.all(np.sign(moved[g != 0]) == -np.sign(g[g != 0])), name  # a step against the loss gradient
        assert np.all(np.abs(moved) <= 0.01 + 1e-9)
    assert model.apply_adam(loss_grads, lr=0.01) == 2


def test_reinforcing_a_completion_raises_its_logprob(samples: list[Sample]) -> None:
    model = PolicyModel()
    s = _edit_sample(samples, context="looked_three_bugs")
    ids, mask = _embedded(s.context, s.ids)
    history = [float(model.sequence_logprobs(ids, mask).sum())]
    for _ in range(5):
        grads = model.logprob_grads(ids, mask, mask)
        model.apply_adam({k: -g for k, g in grads.items()}, lr=0.05)
        history.append(float(model.sequence_logprobs(ids, mask).sum()))
    assert all(b > a for a, b in zip(history, history[1:])), history
    assert history[-1] > history[0] + 1.0, history


def _trained(samples: list[Sample], steps: int = 2) -> PolicyModel:
    model = PolicyModel()
    s = _edit_sample(samples)
    ids, mask = _embedded(s.context, s.ids)
    for _ in range(steps):
        grads = model.logprob_grads(ids, mask, mask)
        model.apply_adam({k: -g for k, g in grads.items()}, lr=0.02)
    return model


def test_save_load_round_trip_restores_params_moments_and_version(tmp_path: Path, samples: list[Sample]) -> None:
    model = _trained(samples, steps=3)
    base = model.save(tmp_path / "state")
    assert base.with_suffix(".npz").exists()
    assert json.loads(base.with_suffix(".json").read_text())["format"] == STATE_FORMAT
    loaded = PolicyModel.load(tmp_path / "state")
    assert loaded.version == model.version == 3
    for name in P.SHAPES:
        assert np.array_equal(loaded.params[name], model.params[name]), name
    # the Adam moments and step count came back too: one more identical step stays identical
    s = _edit_sample(samples)
    ids, mask = _embedded(s.context, s.ids)
    for m in (model, loaded):
        grads = m.logprob_grads(ids, mask, mask)
        m.apply_adam({k: -g for k, g in grads.items()}, lr=0.02)
    for name in P.SHAPES:
        np.testing.assert_array_equal(loaded.params[name], model.params[name])
    assert loaded.version == model.version == 4
    fresh = PolicyModel()  # without the moments the same step would differ
    fresh.params = {k: v.copy() for k, v in PolicyModel.load(tmp_path / "state").params.items()}
    grads = fresh.logprob_grads(ids, mask, mask)
    fresh.apply_adam({k: -g for k, g in grads.items()}, lr=0.02)
    assert any(not np.array_equal(fresh.params[k], model.params[k]) for k in P.SHAPES)


def test_load_accepts_the_path_with_either_suffix(tmp_path: Path, samples: list[Sample]) -> None:
    model = _trained(samples, steps=1)
    model.save(tmp_path / "state.npz")
    assert PolicyModel.load(tmp_path / "state.json").version == 1
    assert PolicyModel.load(tmp_path / "state").version == 1


@pytest.mark.parametrize("meta", [{"format": "something-else/1", "version": 1}, {"version": 1}])
def test_loading_a_foreign_state_is_a_value_error(tmp_path: Path, meta: dict) -> None:
    PolicyModel().save(tmp_path / "state")
    (tmp_path / "state.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="not a built-in policy state"):
        PolicyModel.load(tmp_path / "state")


def test_checkpoints_whose_names_contain_a_dot_do_not_overwrite_each_other(tmp_path: Path,
                                                                          samples: list[Sample]) -> None:
    """BUG (model.PolicyModel.save/load): the docstring promises `<path>.npz`/`<path>.json`, but
    `Path(path).with_suffix("")` drops everything after the last dot, so `policy.step1` and
    `policy.step2` (or `lr0.05`) are both written to `policy.npz`/`policy.json`, silently
    overwriting each other."""
    first, second = _trained(samples, steps=1), _trained(samples, steps=2)
    first.save(tmp_path / "policy.step1")
    second.save(tmp_path / "policy.step2")
    assert PolicyModel.load(tmp_path / "policy.step1").version == 1
    assert PolicyModel.load(tmp_path / "policy.step2").version == 2


def test_the_turn_memo_changes_no_sample_logprob_or_gradient(samples: list[Sample], episodes: list[Episode]) -> None:
    warm = PolicyModel()  # the process-wide memo, warm from the fixtures' sampling
    cold = PolicyModel(memo=TurnMemo(size=0))  # keeps nothing: every turn observed and decided again
    for episode in episodes:
        ids, mask = episode.chat.training_sequence()
        np.testing.assert_array_equal(warm.sequence_logprobs(ids, mask), cold.sequence_logprobs(ids, mask))
        weights = np.linspace(-1.0, 1.0, len(ids))
        got, expected = warm.logprob_grads(ids, mask, weights), cold.logprob_grads(ids, mask, weights)
        assert got.keys() == expected.keys()
        for name in got:
            np.testing.assert_array_equal(got[name], expected[name])
    for s in samples[::4]:
        a = warm.sample_detailed(s.context, np.random.default_rng(7), s.temperature, top_k=3)
        b = cold.sample_detailed(s.context, np.random.default_rng(7), s.temperature, top_k=3)
        assert a == b
    assert cold.memo.hits == 0 and not cold.memo._turns


def test_the_trainer_scores_the_turns_the_sampler_met_from_the_memo(episodes: list[Episode]) -> None:
    memo = TurnMemo()
    model = PolicyModel(memo=memo)
    ids, mask = episodes[1].chat.training_sequence()
    starts = [start for start, _ in completion_spans(mask)]
    for start in starts:
        model.sample(ids[:start], np.random.default_rng(0))
    hits, misses = memo.hits, memo.misses
    model.sequence_logprobs(ids, mask)
    model.logprob_grads(ids, mask, [1.0] * len(ids))
    assert memo.hits - hits == 2 * len(starts) and memo.misses == misses
    turn = memo.turn(ids[:starts[0]])
    first = turn.decide([], G.START)
    assert turn.decide([], G.START) is first  # a decision is made once per (turn, prefix)


def test_the_turn_memo_keeps_the_last_size_turns(contexts: dict[str, list[int]]) -> None:
    memo = TurnMemo(size=2)
    a, b, c = list(contexts.values())[:3]
    memo.turn(a), memo.turn(b)
    memo.turn(a)  # a is now the most recent
    memo.turn(c)
    assert len(memo._turns) == 2
    assert memo.get(memo.key(b)) is None and memo.get(memo.key(a)) is not None and memo.get(memo.key(c)) is not None


def test_a_turn_keeps_at_most_its_cap_of_decisions(contexts: dict[str, list[int]], monkeypatch: pytest.MonkeyPatch) -> None:
    from rl_daytona.policy.model import Turn

    monkeypatch.setattr(Turn, "MAX_DECISIONS", 3)
    memo = TurnMemo()
    model = PolicyModel(memo=memo)
    cold = PolicyModel(memo=TurnMemo(size=0))
    context = contexts["looked"]
    for seed in range(6):
        assert model.sample_detailed(context, np.random.default_rng(seed)) == cold.sample_detailed(
            context, np.random.default_rng(seed))
    assert len(memo.turn(context)._decisions) == 3  # past the cap decided, not kept: the same samples
