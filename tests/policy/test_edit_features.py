"""Features of the choices inside a `sed -i` edit, read back by their names in `params`."""

from __future__ import annotations

import builtins

import numpy as np
import pytest

from rl_daytona.policy import edit_features as E
from rl_daytona.policy import features as F
from rl_daytona.policy import grammar as G
from rl_daytona.policy import params as P
from rl_daytona.policy import vocab as V
from rl_daytona.policy.observe import Observation, apply_substitution, observe

_ID = V.piece_id
_FRAG = V.FRAGMENTS.index
_NAMES = {"line_w": P.LINE_FEATURES, "old_w": P.OLD_FEATURES, "new_w": P.NEW_FEATURES, "flag_w": P.FLAG_FEATURES}


@pytest.mark.parametrize("source,ok,names", [
    ("def f(xs):\n    return sum(xs) / len(xs)\n", True, {"sum", "len"}),
    ("def f(xs):\n    m = mean(xs)\n    return sum((x - m) ** 2 for x in xs) / total.count\n", True,
     {"mean", "sum", "total"}),  # genexpr bodies are read; `count` is an attribute, `x`/`m` are locals
    ("def f(xs):\n    return [y for y in xs if y > lo]\n", True, {"lo"}),
    ("def f(xs, lo):\n    return xs.lo + lo\n", True, set()),
    ("def f(xs):\n    return sum(xs) / / len(xs)\n", False, set()),
    ("def f(xs):\n    return (xs\n", False, set()),
    ("def f(xs):\n    return 1(xs)\n", False, set()),  # 'int' object is not callable: a SyntaxWarning
    ("def f(xs):\n  return xs\n    return 2\n", False, set()),
])
def test_check_function(source: str, ok: bool, names: set[str]) -> None:
    assert E.check_function(source) == (ok, frozenset(names))


def _codes(code):  # a code object and every one nested in it
    yield code
    for c in code.co_consts:
        if hasattr(c, "co_names"):
            yield from _codes(c)


@pytest.mark.parametrize("source", [
    "def f(xs):\n    m = mean(xs)\n    return sum((x - m) ** 2 for x in xs) / total.count\n",
    "import os\nx = y + z\nclass C:\n    a = b\n    def g(self):\n        return [k for k in q if k > lo]\n",
    # more than 256 names: LOAD_GLOBAL's index needs an EXTENDED_ARG prefix
    "def f():\n    return [" + ", ".join(f"n{i}" for i in range(600)) + "]\n",
    "def f():\n    try:\n        return a[b]\n    except KeyError:\n        return c(d, *e, **g)\n",
])
def test_global_reads_match_dis(source: str) -> None:
    import dis

    for code in _codes(compile(source, "<t>", "exec")):
        expected = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
        assert E.global_reads(code) == expected


def test_global_reads_past_256_names() -> None:
    module = compile("def f():\n    return [" + ", ".join(f"n{i}" for i in range(600)) + "]\n", "<t>", "exec")
    f = next(c for c in module.co_consts if hasattr(c, "co_names"))
    assert E.global_reads(f) == {f"n{i}" for i in range(600)}


def test_fragment_lookups_on_a_line() -> None:
    text = "    return (s[mid - 1] + s[mid]) / 2"
    on = {V.FRAGMENTS[f] for f in E.fragments_on(text)}
    assert {" + ", " - ", " / ", "1", "2", " - 1", V.EOL} <= on
    assert not on & {" // ", "[0]", V.CALL, V.PAIR, "(& - 1)"}
    assert E.occurrences(text, _FRAG(" - ")) == 1 and E.occurrences(text, _FRAG(" // ")) == 0
    assert {V.FRAGMENTS[f] for f in E.fragments_on("    q, r = divmod(total, len(xs))")} >= {V.CALL, "len"}
    replaced = E.replaced(text, _FRAG(" / "))
    assert replaced[_FRAG(" // ")] == "    return (s[mid - 1] + s[mid]) // 2"
    assert replaced[_FRAG(V.EOL)] == "    return (s[mid - 1] + s[mid])2"


def _state(prefix: list[int]) -> G.GrammarState:
    return G.advance(G.walk(prefix)[-1], prefix[-1])


def _decide(obs: Observation, prefix: list[int]) -> F.Decision:
    return F.decide(obs, prefix, _state(prefix))


def _features(decision: F.Decision, param: str) -> dict[int, set[str]]:
    """Candidate -> names of the features that fire in the `param` block."""
    block = next(b for b in decision.blocks if b.param == param)
    names = _NAMES[param]
    return {c: {names[i] for i, v in zip(block.index[j], block.value[j]) if v != 0}
            for j, c in enumerate(decision.candidates)}


EDIT = [G.EDIT_ID, *V.encode_bytes("calc.py"), G.EDIT_OPEN_ID]  # f=calc.py; sed -i '


def _new_prefix(line: int, old: str) -> list[int]:
    return [*EDIT, V.LINE_IDS[line - 1], _ID("s/"), V.OLD_IDS[_FRAG(old)], _ID("/")]


def test_edit_lines_are_the_seen_lines_with_a_fragment(contexts: dict[str, list[int]]) -> None:
    obs = observe(contexts["looked"])
    decision = _decide(obs, EDIT)
    expected = {n for n, t in obs.lines.items() if any(r.search(t) for r in V.FRAGMENT_REGEX[:-1])}
    assert {V.line_of(c) for c in decision.candidates} == expected
    feats = _features(decision, "line_w")
    for c, names in feats.items():
        fn = obs.function_at(V.line_of(c))
        assert ("in_failing_fn" in names) == (fn is not None and fn.name in obs.failing_functions)
        assert ("outside_fn" in names) == (fn is None)
    assert obs.failing_functions == {"median", "percentile"}


def test_without_the_source_every_line_and_fragment_stays_possible(contexts: dict[str, list[int]]) -> None:
    obs = observe(contexts["fresh"])
    assert _decide(obs, EDIT).candidates == V.LINE_IDS
    assert _decide(obs, [*EDIT, V.LINE_IDS[4], _ID("s/")]).candidates == V.OLD_CHOICES


def test_old_candidates_are_the_fragments_on_the_line(contexts: dict[str, list[int]]) -> None:
    obs = observe(contexts["looked"])
    for line in (11, 13, 33, 41):
        decision = _decide(obs, [*EDIT, V.LINE_IDS[line - 1], _ID("s/")])
        assert decision.candidates == tuple(V.OLD_IDS[f] for f in E.fragments_on(obs.lines[line]))
        failing = obs.function_at(line).name in obs.failing_functions
        assert all(("in_failing_fn" in names) == failing for names in _features(decision, "old_w").values())


def test_new_candidates_flag_syntax_errors_and_unknown_names_by_name(contexts: dict[str, list[int]]) -> None:
    obs = observe(contexts["looked"])
    line, text = 33, "    return max(lo, min(x, hi))"  # clamp(x, lo, hi) in variant 8
    assert obs.lines[line] == text
    decision = _decide(obs, _new_prefix(line, "max"))
    feats = {V.FRAGMENTS[V.fragment_of(c)]: names for c, names in _features(decision, "new_w").items()}
    assert "max" not in feats and V.CALL not in feats  # old-only patterns are never a replacement
    assert "same_kind" in feats["min"] and not feats["min"] & {"unknown_name", "breaks_syntax"}
    assert {"breaks_syntax", "incompatible_kind"} <= feats[" < "] and "unknown_name" not in feats[" < "]

    # every candidate: the features agree with compiling the edited function
    fn = obs.function_at(line)
    known = set(dir(builtins)) | {f.name for f in obs.functions}
    for new, names in feats.items():
        after = apply_substitution(text, G.Substitution(line, _FRAG("max"), _FRAG(new)))
        body = [after if n == line else obs.lines.get(n, "") for n in range(fn.start, fn.end + 1)]
        ok, globals_read = E.check_function("\n".join(body).rstrip() + "\n")
        assert ("breaks_syntax" in names) == (not ok), new
        assert ("unknown_name" in names) == (ok and bool(globals_read - known)), new
        assert ("no_change" in names) == (after == text), new


def test_swapping_the_first_and_last_called_names_is_one_substitution(contexts: dict[str, list[int]]) -> None:
    obs = observe(contexts["looked"])
    line = 33  # clamp: `max(lo, min(x, hi))`; `min(lo, max(x, hi))` is the same edit the other way round
    olds = {V.FRAGMENTS[V.fragment_of(c)] for c in _decide(obs, [*EDIT, V.LINE_IDS[line - 1], _ID("s/")]).candidates}
    assert {V.CALLS, V.CALL, "min", "max"} <= olds
    feats = {V.FRAGMENTS[V.fragment_of(c)]: names for c, names in _features(_decide(obs, _new_prefix(line, V.CALLS)),
                                                                               "new_w").items()}
    swap = "\\3(\\2\\1("
    after = apply_substitution(obs.lines[line], G.Substitution(line, _FRAG(V.CALLS), _FRAG(swap)))
    assert after == "    return min(lo, max(x, hi))"
    assert "compatible_kind" in feats[swap] and not feats[swap] & {"breaks_syntax", "unknown_name", "no_change"}
    assert "breaks_syntax" in feats["(\\2, \\1)"]  # the pair template on this match leaves no valid code
    assert "incompatible_kind" in feats["(& - 1)"] and "incompatible_kind" in feats["min"]


def test_a_failing_functions_line_is_learned_per_signature_of_its_failing_tests(contexts: dict[str, list[int]]) -> None:
    names = ("mean", "mode", "mode_of")
    assert E.tests_of(("test_mode_most_common", "test_mean_integers", "test_mode_of_ties"), "mode", names) \
        == ("test_mode_most_common",)  # a test names the longest function it can: `mode_of` here
    assert E.tests_of(("test_mean_integers",), "mode", names) == ()

    obs = observe(contexts["looked"])  # variant 8: median and percentile fail
    decision = _decide(obs, EDIT)
    hashes = next(b for b in decision.blocks if b.param == "line_hash")
    by_line = {V.line_of(c): set(hashes.index[j][hashes.value[j] != 0]) for j, c in enumerate(decision.candidates)}
    median = obs.function_at(13)
    signature = E.tests_of(obs.failing_tests, "median", tuple(f.name for f in obs.functions))
    assert signature and all(t.startswith("test_median") for t in signature)
    key = P.hashed("tests", "median", 13 - median.start, signature)
    assert key in by_line[13] and P.hashed("line", "median", 13 - median.start) not in by_line[13]
    other = P.hashed("tests", "median", 13 - median.start, signature[:-1] + ("test_median_other",))
    assert other not in by_line[13]  # another set of failing tests is another key
    passing = [n for n in by_line if obs.function_at(n) and obs.function_at(n).name not in obs.failing_functions]
    assert passing  # a line of a passing function: (function, offset) and its text
    for n in passing:
        fn = obs.function_at(n)
        assert by_line[n] == {P.hashed("line", fn.name, n - fn.start), P.hashed("text", obs.lines[n].strip())}


def test_a_rejected_edit_is_revertible_and_its_revert_is_marked(contexts: dict[str, list[int]]) -> None:
    obs = observe(contexts["edit_rejected"])  # variant 8, line 13 changed `/` to `//`, median still fails
    assert obs.lines[13] == "    return (s[mid - 1] + s[mid]) // 2" and obs.is_dirty_bad(13)
    lines = _features(_decide(obs, EDIT), "line_w")
    assert "dirty_bad" in lines[V.LINE_IDS[12]]
    assert all("dirty_bad" not in names for c, names in lines.items() if c != V.LINE_IDS[12])

    olds = _features(_decide(obs, [*EDIT, V.LINE_IDS[12], _ID("s/")]), "old_w")
    assert {V.FRAGMENTS[V.fragment_of(c)] for c, names in olds.items() if "revertible" in names} == {" // ", " // 2"}

    news = _features(_decide(obs, _new_prefix(13, " // ")), "new_w")
    assert {V.FRAGMENTS[V.fragment_of(c)] for c, names in news.items() if "reverts" in names} == {" / "}


def test_the_second_substitution_sees_the_line_as_the_first_left_it(contexts: dict[str, list[int]]) -> None:
    obs = observe(contexts["looked"])
    first = [*EDIT, V.LINE_IDS[12], _ID("s/"), V.OLD_IDS[_FRAG(" / ")], _ID("/"), V.NEW_IDS[_FRAG(" // ")],
             _ID("flag:/")]
    draft = E.draft_of(obs, first + [G.MORE_ID])
    assert draft.working[13] == "    return (s[mid - 1] + s[mid]) // 2" and draft.subs == 1
    assert draft.tried_lines == {13} and draft.tried_functions == {"median"}
    olds = {V.FRAGMENTS[V.fragment_of(c)]
            for c in _decide(obs, first + [G.MORE_ID, V.LINE_IDS[12], _ID("s/")]).candidates}
    assert " // " in olds and " / " not in olds
    # reverting inside the same command is noticed as such
    back = first + [G.MORE_ID, V.LINE_IDS[12], _ID("s/"), V.OLD_IDS[_FRAG(" // ")], _ID("/"),
                    V.NEW_IDS[_FRAG(" / ")], _ID("flag:/")]
    draft = E.draft_of(obs, back + [G.MORE_ID])
    assert draft.working[13] == obs.original[13] and 13 in draft.reverted and draft.subs == 2


def test_decisions_are_pure_functions_of_observation_and_prefix(contexts: dict[str, list[int]]) -> None:
    prefix = _new_prefix(41, " - ")
    a, b = _decide(observe(contexts["looked"]), prefix), _decide(observe(contexts["looked"]), prefix)
    assert a.candidates == b.candidates
    for x, y in zip(a.blocks, b.blocks):
        assert x.param == y.param and (x.index == y.index).all() and (x.value == y.value).all()


@pytest.mark.parametrize("text, old, new, rebinds", [
    ("    if len(s) % 2 == 0:", "0", "1", False),  # a block header parses with a stub body
    ("    return s[f] - (s[c] - s[f]) * (k - f)", " - ", " + ", False),  # not an expression: no check
    ("    counts[x] = counts.get(x, 0)", V.EOL, " + 1", False),  # appending is never checked
    ("    return s / len(xs)", V.CALL, "(& - 1)", False),  # a template is not checked either
])
def test_rebinds_marks_a_replacement_that_does_not_stay_one_subexpression(
        text: str, old: str, new: str, rebinds: bool) -> None:
    assert E._rebinds(text, _FRAG(old), _FRAG(new)) is rebinds


def test_one_adam_step_moves_a_replacements_learned_logit_new_gain_times_faster(contexts: dict[str, list[int]]) -> None:
    """The replacement keys are valued NEW_GAIN, the line keys 1: one Adam step of lr on a
    reinforced edit raises the replacement's hashed logit by about 2 keys x NEW_GAIN x lr, and a
    line's hashed logit by about 2 keys x lr (Adam's first step is ~lr per touched parameter)."""
    from rl_daytona.policy.model import PolicyModel
    from rl_daytona.policy.prior import initial_params

    obs = observe(contexts["looked"])
    line, old, new = 33, "max", "min"
    new_prefix = _new_prefix(line, old)
    line_prefix = EDIT
    model, lr = PolicyModel(initial_params()), 0.2

    def hashed_logit(prefix: list[int], param: str, token: int) -> float:
        decision = _decide(obs, prefix)
        block = next(b for b in decision.blocks if b.param == param)
        j = decision.candidates.index(token)
        return float((model.params[param].reshape(-1)[block.index[j]] * block.value[j]).sum())

    new_token, line_token = V.NEW_IDS[_FRAG(new)], V.LINE_IDS[line - 1]
    grads = {k: np.zeros_like(v) for k, v in model.params.items()}
    for prefix, token in ((new_prefix, new_token), (line_prefix, line_token)):
        decision = _decide(obs, prefix)
        probs = np.exp(model._sampling_logprobs(decision, 1.0))
        coef = -probs
        coef[decision.candidates.index(token)] += 1.0
        for block in decision.blocks:
            np.add.at(grads[block.param].reshape(-1), block.index, -(coef[:, None] * block.value))
    before = hashed_logit(new_prefix, "new_hash", new_token), hashed_logit(line_prefix, "line_hash", line_token)
    model.apply_adam(grads, lr=lr)
    after = hashed_logit(new_prefix, "new_hash", new_token), hashed_logit(line_prefix, "line_hash", line_token)
    assert after[0] - before[0] == pytest.approx(2 * P.NEW_GAIN * lr, rel=1e-3)
    assert after[1] - before[1] == pytest.approx(2 * lr, rel=1e-3)
