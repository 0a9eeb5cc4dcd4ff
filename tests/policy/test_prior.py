"""The untrained prior: the declared layout, finite weights, and the generic habits it promises."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rl_daytona.policy import grammar as G
from rl_daytona.policy import params as P
from rl_daytona.policy import vocab as V
from rl_daytona.policy.model import PolicyModel
from rl_daytona.policy.prior import initial_params
from tests.policy.transcripts import CalcShell, Chat


def test_initial_params_follow_the_layout_and_are_finite() -> None:
    a, b = initial_params(), initial_params()
    assert set(a) == set(P.SHAPES)
    for name, shape in P.SHAPES.items():
        assert a[name].shape == shape and a[name].dtype == np.float64 and np.all(np.isfinite(a[name]))
        assert np.array_equal(a[name], b[name])  # deterministic
    assert not np.any(a["line_hash"]) and not np.any(a["old_hash"]) and not np.any(a["new_hash"])  # no bug knowledge
    assert np.array_equal(a["pair_w"], a["pair_w"].T)  # inverses get no direction


def test_the_prior_starts_by_testing_or_reading_and_submits_once_everything_passes(tmp_path: Path) -> None:
    model = PolicyModel()
    chat = Chat()
    first, _ = model.sample(chat.prompt_ids(), np.random.default_rng(0), temperature=0.0)
    runs_tests_or_reads = set(G.PYTEST_IDS) | {G.LOOK_ID} | set(G.FILE_VIEW_IDS)
    assert first[0] in runs_tests_or_reads, G.render(first)

    shell = CalcShell(tmp_path, 0)  # variant 0: mean divides by len(xs) - 1
    chat.run(V.LOOK_VERB, shell)
    chat.run("f=calc.py; sed -i '5s/ - 1\\b//' \"$f\"" + V.EDIT_SUFFIXES[0], shell)
    assert "16 passed" in chat.messages[-1]["content"]
    done, _ = model.sample(chat.prompt_ids(), np.random.default_rng(0), temperature=0.0)
    assert done == [V.SUBMIT]


def test_the_prior_keeps_searching_until_its_give_up_turn_then_submits() -> None:
    from rl_daytona.policy.prior import GIVE_UP_TURN, STOP_TURN, give_up_prior

    w = initial_params()["verb_w"]
    submit, edit = G.VERB_CHOICES.index(V.SUBMIT), G.VERB_CHOICES.index(V.piece_id(V.EDIT_VERB))

    def logits(turn: int, progressing: bool = False) -> np.ndarray:  # failing tests, the source read
        context = np.zeros(len(P.VERB_CONTEXT))
        names = ["bias", "can_edit", "last_pytest", f"turn_{min(turn, P.MAX_TURN_FEATURE)}"]
        for name in names + (["progressing"] if progressing else []):
            context[P.VERB_CONTEXT.index(name)] = 1.0
        return context @ w

    assert GIVE_UP_TURN < STOP_TURN <= P.MAX_TURN_FEATURE
    assert all(logits(t)[edit] > logits(t)[submit] + 5 for t in range(1, GIVE_UP_TURN - 2))
    assert all(logits(t)[submit] > logits(t)[edit] for t in range(GIVE_UP_TURN, 40))  # later turns share turn_15
    # still cutting the failures: keep going past the give-up turn, but never past STOP_TURN
    assert all(logits(t, True)[edit] > logits(t, True)[submit] + 5 for t in range(1, STOP_TURN))
    assert all(logits(t, True)[submit] > logits(t, True)[edit] + 5 for t in range(STOP_TURN, 40))
    assert set(give_up_prior(5)) == {f"turn_{t}" for t in range(3, P.MAX_TURN_FEATURE + 1)}


def test_sharpness_scales_every_prior_weight_so_sampling_equals_the_unit_prior_at_lower_temperature(
        tmp_path: Path, monkeypatch) -> None:
    from rl_daytona.policy import prior

    monkeypatch.setattr(prior, "SHARPNESS", 1.0)
    unit = initial_params()
    monkeypatch.setattr(prior, "SHARPNESS", 2.5)
    sharp = initial_params()
    assert all(np.array_equal(sharp[name], 2.5 * unit[name]) for name in P.SHAPES)

    shell, chat = CalcShell(tmp_path, 8), Chat()
    chat.run(V.LOOK_VERB, shell)
    context = chat.prompt_ids()
    a = PolicyModel(sharp).sample(context, np.random.default_rng(7), temperature=1.0, max_tokens=256)
    b = PolicyModel(unit).sample(context, np.random.default_rng(7), temperature=1 / 2.5, max_tokens=256)
    assert a[0] == b[0] and np.allclose(a[1], b[1])
