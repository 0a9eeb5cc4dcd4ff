"""The command grammar: sampled and random completions are whole commands that parse back to
themselves, decode into the choices their sed text spells, and forbidden pieces are refused."""

from __future__ import annotations

import re

import numpy as np
import pytest

from rl_daytona.policy import grammar as G
from rl_daytona.policy import vocab as V
from tests.policy.conftest import Sample

_ID = V.piece_id
_SUFFIX = V.EDIT_SUFFIXES[0]
_EDIT_TEXT = re.compile(r"^f=(?P<path>[\w./-]+); sed -i '(?P<script>.*)' \"\$f\"(?P<suffix>(" + "|".join(map(re.escape, V.EDIT_SUFFIXES)) + ")?)$")
_SUB_TEXT = re.compile(r"^(?P<line>\d+)s/(?P<old>(?:[^\\/]|\\.)*)/(?P<new>(?:[^\\/]|\\.)*)/(?P<flag>2|g)?$")


def _random_command(rng: np.random.Generator) -> tuple[int, ...]:
    """A uniformly random walk through the grammar (covers paths the prior rarely samples)."""
    ids: list[int] = []
    state = G.START
    while state != G.DONE:
        choices = G.allowed(state)
        if state.slot in ("edit_line", "count", "range_a") and rng.random() < 0.7:
            choices = choices[:60]  # mostly lines a calc.py has
        if state.slot == "path" and rng.random() < 0.2:
            choices = choices[-1:]  # the path's end: paths of a few bytes
        token = int(choices[rng.integers(len(choices))])
        ids.append(token)
        state = G.advance(state, token)
    return tuple(ids)


def _edit(path: str, script: str, suffix: str = "") -> str:
    return f"f={path}; sed -i '{script}' \"$f\"{suffix}"


def _unescape_sed(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def test_sampled_completions_are_complete_commands_that_parse_back(samples: list[Sample]) -> None:
    assert samples
    for s in samples:
        assert s.finished and G.is_complete(s.ids), s
        assert not any(G.is_complete(s.ids[:k]) for k in range(1, len(s.ids)))
        text = G.render(s.ids)
        if s.ids == (V.SUBMIT,):
            assert text == ""  # <submit> is a reply, not a command; chat.py maps it by its text
            continue
        assert text and G.parse_command(text) == s.ids, text
        assert len(s.logprobs) == len(s.ids) and all(lp <= 0.0 for lp in s.logprobs)
    verbs = {s.ids[0] for s in samples}
    assert G.EDIT_ID in verbs and len(verbs) >= 4, "the samples should cover edits and other verbs"


def test_random_grammar_walks_round_trip() -> None:
    rng = np.random.default_rng(7)
    commands = {_random_command(rng) for _ in range(400)}
    for ids in commands:
        assert G.is_complete(ids)
        if ids == (V.SUBMIT,):
            continue
        assert G.parse_command(G.render(ids)) == ids, G.render(ids)
    rendered = [G.render(ids) for ids in commands if ids != (V.SUBMIT,)]
    assert len(set(rendered)) == len(rendered), "rendering must be injective"


def _check_decoded(ids: tuple[int, ...]) -> None:
    command = G.decode(ids)
    assert command is not None and command.verb == ids[0]
    text = G.render(ids)
    if ids[0] == G.EDIT_ID:
        match = _EDIT_TEXT.match(text)
        assert match, text
        assert command.then_test == bool(match["suffix"]) and command.file == match["path"]
        parts = match["script"].split(";")
        assert len(parts) == len(command.subs) >= 1
        for part, sub in zip(parts, command.subs):
            m = _SUB_TEXT.match(part)
            assert m, part
            assert int(m["line"]) == sub.line
            assert m["old"] == V.sed_pattern(V.FRAGMENTS[sub.old])
            assert m["new"] == V.sed_replacement(V.FRAGMENTS[sub.new])
            assert {None: 1, "2": 2, "g": 0}[m["flag"]] == sub.occurrence
            assert sub.old != sub.new
        assert command.first == command.subs[0].line and command.last == command.subs[-1].line
    elif ids[0] == G.RANGE_VIEW_ID:
        m = re.fullmatch(r"sed -n '(\d+),(\d+)p' (\S+)", text)
        assert m and (command.first, command.last, command.file) == (int(m[1]), int(m[2]), m[3])
        assert command.first <= command.last
    elif ids[0] in G.COUNT_VIEW_IDS:
        m = re.fullmatch(r"(?:head|tail) -n (\d+) (\S+)", text)
        assert m and command.first == command.last == int(m[1]) and command.file == m[2]
    elif ids[0] in G.FILE_VIEW_IDS:
        assert text.endswith(" " + command.file) and command.file and not command.subs
    else:
        assert not command.subs and not command.then_test


def test_decode_agrees_with_the_rendered_text(samples: list[Sample]) -> None:
    for s in samples:
        _check_decoded(s.ids)
    rng = np.random.default_rng(11)
    for _ in range(300):
        _check_decoded(_random_command(rng))


def test_decode_rejects_incomplete_completions(samples: list[Sample]) -> None:
    edit = next(s.ids for s in samples if s.ids[0] == G.EDIT_ID)
    assert G.decode(edit[:-1]) is None and G.decode(()) is None


@pytest.mark.parametrize("command", [
    V.PYTEST_COMPACT,
    "python -m pytest -q",
    "python -m pytest -q -x",
    V.LOOK_VERB,
    "nl -ba calc.py",
    "cat tests/test_calc.py",
    "grep -n 'def ' pkg/sub/mod.py",
    "grep -n 'return' test_calc.py",
    "head -n 12 calc.py",
    "tail -n 3 test_calc.py",
    "sed -n '9,13p' calc.py",
    "sed -n '7,7p' a-b.c_d.py",
    _edit("calc.py", r"11s/ == / != /"),
    _edit("pkg/mod.py", r"13s/ \/ / \/\/ /2;41s/ - / + /g;5s/$/ + 1/", _SUFFIX),
    _edit("calc.py", r"5s/[A-Za-z_][A-Za-z0-9_.]*([^()]*)/(& - 1)/;12s/\[-1\]/[0]/"),
    _edit("t.py", r"3s/(\([^,()]*\), \([^,()]*\))/(\2, \1)/;4s/'\''-'\''/'\''_'\''/"),
])
def test_hand_written_commands_parse_and_render_back(command: str) -> None:
    ids = G.parse_command(command)
    assert ids is not None and G.render(ids) == command and G.is_complete(ids)
    _check_decoded(ids)


@pytest.mark.parametrize("command", [
    "",
    "python -m pytest",
    "cat calc.py ",
    "cat other file.py",
    "nl -ba ",
    "head -n 0 calc.py",
    "head -n 201 calc.py",
    "sed -n '13,9p' calc.py",  # range end before its start
    _edit("calc.py", r"11s/ == / == /"),  # replacement equal to the fragment
    _edit("calc.py", r"11s/==/!=/"),  # not a fragment pattern
    r"sed -i '11s/ == / != /' calc.py",  # the file must come first
    "f=calc.py; sed -i '" + ";".join(f"{n}s/ < / > /" for n in range(1, 8)) + "' \"$f\"",  # 7 substitutions
    "rm -rf /",
])
def test_text_outside_the_grammar_does_not_parse(command: str) -> None:
    assert G.parse_command(command) is None


def test_at_most_max_substitutions_then_only_close() -> None:
    sub = [V.LINE_IDS[4], _ID("s/"), V.OLD_IDS[V.FRAGMENTS.index(" / ")], _ID("/"),
           V.NEW_IDS[V.FRAGMENTS.index(" // ")], _ID("flag:/")]
    ids = [G.EDIT_ID, *V.encode_bytes("c.py"), G.EDIT_OPEN_ID]
    for _ in range(V.MAX_SUBSTITUTIONS - 1):
        ids += sub + [G.MORE_ID]
    ids += sub
    state = G.advance(G.walk(ids)[-1], ids[-1])
    assert G.allowed(state) == (G.CLOSE_ID,)
    with pytest.raises(ValueError):
        G.walk(ids + [G.MORE_ID])
    done = ids + [G.CLOSE_ID, V.EOC]
    assert G.is_complete(done) and len(G.decode(done).subs) == V.MAX_SUBSTITUTIONS


@pytest.mark.parametrize("ids", [
    [V.LINE_IDS[0]],  # a line where a verb must come
    [V.BYTE_OFFSET + ord("l")],  # a byte token where a verb must come
    [_ID("cat "), V.BYTE_OFFSET + ord(" ")],  # a byte no path holds
    [_ID("cat "), V.EOC],  # an empty path
    [V.EOC],
    [G.EDIT_ID, _ID("cat ")],
    [_ID("cat "), V.LINE_IDS[3]],
    [G.RANGE_VIEW_ID, V.LINE_IDS[9], _ID(","), V.LINE_IDS[3]],  # B < A
    [G.EDIT_ID, *V.encode_bytes("c.py"), G.EDIT_OPEN_ID, V.LINE_IDS[4], _ID("s/"), V.OLD_IDS[3], _ID("/"),
     V.NEW_IDS[3]],  # new == old
    [G.EDIT_ID, *V.encode_bytes("c.py"), G.EDIT_OPEN_ID, V.LINE_IDS[4], _ID("s/"), V.NEW_IDS[3]],  # new in old
    [G.EDIT_ID, *V.encode_bytes("c.py"), G.EDIT_OPEN_ID, V.LINE_IDS[4], _ID("s/"),
     V.OLD_IDS[V.FRAGMENTS.index("(& - 1)")]],  # a template is never an old fragment
    [V.SUBMIT, V.EOC],  # nothing after <submit>
    [_ID("python -m pytest -q"), V.EOC, V.EOC],
])
def test_walk_refuses_a_piece_the_grammar_forbids(ids: list[int]) -> None:
    with pytest.raises(ValueError, match="not allowed"):
        G.walk(ids)
    assert not G.is_complete(ids) and G.decode(ids) is None


def test_allowed_pieces_all_advance_and_walk_reports_states() -> None:
    ids = G.parse_command(_edit("calc.py", r"13s/ \/ / \/\/ /2;41s/ - / + /g", _SUFFIX))
    assert ids is not None
    states = G.walk(ids)
    assert len(states) == len(ids) and states[0] == G.START
    for state, token in zip(states, ids):
        assert token in G.allowed(state)
    assert G.advance(states[-1], ids[-1]) == G.DONE and G.allowed(G.DONE) == ()
