"""Decisions: candidates come from the grammar, logits are sums of named feature weights."""

from __future__ import annotations

import numpy as np

from rl_daytona.policy import features as F
from rl_daytona.policy import grammar as G
from rl_daytona.policy import params as P
from rl_daytona.policy import vocab as V
from rl_daytona.policy.model import PolicyModel
from rl_daytona.policy.observe import observe


def _on(obs_context: np.ndarray) -> set[str]:
    return {P.VERB_CONTEXT[i] for i in np.flatnonzero(obs_context)}


def test_verb_context_names_what_is_known(contexts: dict[str, list[int]]) -> None:
    fresh = _on(F.verb_context(observe(contexts["fresh"])))
    assert {"bias", "no_tests_yet", "no_source", "turn_0", "last_none"} <= fresh
    assert not fresh & {"can_edit", "all_passed", "broken", "last_failed"}

    looked = _on(F.verb_context(observe(contexts["looked"])))
    assert {"bias", "can_edit", "turn_1", "last_other"} <= looked
    assert not looked & {"no_tests_yet", "no_source", "source_but_no_tests", "edited_since_test"}

    rejected = _on(F.verb_context(observe(contexts["edit_rejected"])))
    assert {"can_edit", "turn_2", "last_edit"} <= rejected

    broken = _on(F.verb_context(observe(contexts["broken"])))
    assert {"broken", "can_edit"} <= broken

    tested = _on(F.verb_context(observe(contexts["read_then_tested"])))
    assert {"turn_2", "last_pytest"} <= tested and "no_source" not in tested


def test_verb_logits_are_the_context_times_the_verb_weights(contexts: dict[str, list[int]]) -> None:
    model = PolicyModel()
    model.params["verb_w"] = np.random.default_rng(0).normal(size=P.SHAPES["verb_w"])
    for context in contexts.values():
        obs = observe(context)
        decision = F.decide(obs, [], G.START)
        assert decision.candidates == G.VERB_CHOICES
        np.testing.assert_allclose(model.logits(decision), F.verb_context(obs) @ model.params["verb_w"],
                                   rtol=1e-12, atol=1e-12)


def test_plain_slots_score_each_piece_by_its_own_weight(contexts: dict[str, list[int]]) -> None:
    model = PolicyModel()
    model.params["slot_w"] = np.random.default_rng(1).normal(size=P.SHAPES["slot_w"])
    obs = observe(contexts["looked"])
    prefix = [V.piece_id("head -n ")]
    decision = F.decide(obs, prefix, G.advance(G.START, prefix[0]))
    assert decision.candidates == V.LINE_IDS
    row = model.params["slot_w"][P.SLOTS.index("count")]
    np.testing.assert_array_equal(model.logits(decision), row[list(V.LINE_IDS)])


def test_paths_are_spelled_among_the_files_the_task_names(contexts: dict[str, list[int]]) -> None:
    obs = observe(contexts["fresh"])
    assert obs.files == ("test_calc.py", "calc.py") and obs.sources == ("calc.py",)
    view = [V.piece_id("cat ")]
    decision = F.decide(obs, view, G.advance(G.START, view[0]))
    assert decision.candidates == (V.BYTE_OFFSET + ord("c"), V.BYTE_OFFSET + ord("t"))  # calc.py, test_calc.py
    edit = [G.EDIT_ID]
    decision = F.decide(obs, edit, G.advance(G.START, edit[0]))
    assert decision.candidates == (V.BYTE_OFFSET + ord("c"),) and decision.blocks == ()  # only the source
    spelled = [G.EDIT_ID, *V.encode_bytes("calc.py")]
    decision = F.decide(obs, spelled, G.walk(spelled + [G.EDIT_OPEN_ID])[-1])
    assert decision.candidates == (G.EDIT_OPEN_ID,)


def test_forced_pieces_have_no_features(contexts: dict[str, list[int]]) -> None:
    obs = observe(contexts["looked"])
    prefix = [G.EDIT_ID, *V.encode_bytes("calc.py"), G.EDIT_OPEN_ID, V.LINE_IDS[10]]
    state = G.advance(G.walk(prefix)[-1], prefix[-1])
    decision = F.decide(obs, prefix, state)
    assert decision.candidates == (V.piece_id("s/"),) and decision.blocks == ()


def test_sparse_and_context_blocks() -> None:
    block = F.sparse_block("line_w", [[(2, 1.5)], [], [(0, 1.0), (3, -2.0)]])
    assert block.index.shape == block.value.shape == (3, 2)
    assert block.value[1].tolist() == [0.0, 0.0]
    context = np.array([0.0, 2.0, 0.0, 1.0])
    w = np.arange(12.0).reshape(4, 3)
    ctx = F.context_block("verb_w", context, 3, [2, 0])
    logits = (w.reshape(-1)[ctx.index] * ctx.value).sum(axis=1)
    np.testing.assert_allclose(logits, (context @ w)[[2, 0]])
