"""The fixed vocabulary: layout, byte tokens, and fragments rendered for sed and for Python."""

from __future__ import annotations

import re

import pytest

from rl_daytona.policy import vocab as V


def test_layout_specials_then_pieces_then_256_bytes_then_text_pieces() -> None:
    assert [V.PIECES[i].name for i in range(len(V.SPECIALS))] == list(V.SPECIALS)
    assert (V.SYSTEM, V.USER, V.ASSISTANT, V.TOOL, V.EOC, V.SUBMIT) == tuple(range(6))
    assert [p.id for p in V.PIECES] == list(range(len(V.PIECES)))
    assert V.BYTE_OFFSET == len(V.PIECES) and V.TEXT_OFFSET == V.BYTE_OFFSET + 256
    assert V.VOCAB_SIZE == V.TEXT_OFFSET + len(V.TEXT_PIECES) and len(set(V.TEXT_PIECES)) == len(V.TEXT_PIECES)
    assert all(len(t) >= 2 and t.isascii() for t in V.TEXT_PIECES)  # a one-character piece would save nothing
    assert set(V.ROLE_MARKERS) == {"system", "user", "assistant", "tool"}


def test_names_are_unique_and_look_up_their_piece() -> None:
    names = [p.name for p in V.PIECES]
    assert len(set(names)) == len(names)
    for piece in V.PIECES:
        assert V.piece_id(piece.name) == piece.id
    assert V.PIECES[V.piece_id("old: < ")].kind == "old" and V.PIECES[V.piece_id("new:<eol>")].text == ""
    with pytest.raises(KeyError):
        V.piece_id("no such piece")


@pytest.mark.parametrize("kind", ["verb", "line", "glue", "old", "new", "flag", "sep", "suffix"])
def test_texts_are_unique_within_a_kind(kind: str) -> None:
    texts = [p.text for p in V.PIECES if p.kind == kind]
    assert texts and len(set(texts)) == len(texts)


def test_kind_ids_fragments_and_lines_map_back() -> None:
    assert len(V.OLD_IDS) == len(V.NEW_IDS) == len(V.FRAGMENTS) == len(V.FRAGMENT_KIND)
    for f, (old, new) in enumerate(zip(V.OLD_IDS, V.NEW_IDS)):
        assert V.fragment_of(old) == V.fragment_of(new) == f
        assert V.PIECES[old].text == V.sed_pattern(V.FRAGMENTS[f])
        assert V.PIECES[new].text == V.sed_replacement(V.FRAGMENTS[f])
    assert len(V.LINE_IDS) == V.MAX_LINE
    for n, token in enumerate(V.LINE_IDS, start=1):
        assert V.line_of(token) == n and V.PIECES[token].text == str(n)


@pytest.mark.parametrize("text", ["", "plain ascii", "tab\tand\nnewline", "héllo ✓ 日本", "\x00\xff"])
def test_byte_tokens_round_trip_any_text(text: str) -> None:
    ids = V.encode_bytes(text)
    assert all(V.BYTE_OFFSET <= t < V.VOCAB_SIZE for t in ids)
    assert len(ids) == len(text.encode("utf-8")) and V.decode_bytes(ids) == text
    assert b"".join(bytes(V.token_bytes(t)) for t in ids) == text.encode("utf-8")
    # piece ids inside a run are skipped
    assert V.decode_bytes([V.TOOL, *ids, V.EOC]) == text


@pytest.mark.parametrize("text", ["", "plain ascii", "tab\tand\nnewline", "héllo ✓ 日本", "\x00\xff",
                                  "def f(xs):\n    return len(xs) - 1\n", "FAILED tests/test_a.py::test_b\n3 failed"])
def test_text_the_policy_reads_round_trips_in_fewer_tokens(text: str) -> None:
    ids = V.encode_text(text)
    assert all(V.BYTE_OFFSET <= t < V.VOCAB_SIZE for t in ids)
    assert V.decode_bytes([V.TOOL, *ids, V.EOC]) == text
    assert b"".join(bytes(V.token_bytes(t)) for t in ids) == text.encode("utf-8")
    assert len(ids) <= len(text.encode("utf-8"))
    assert "".join(V.token_text(t) for t in ids if t >= V.TEXT_OFFSET or t - V.BYTE_OFFSET < 128) == \
        "".join(c for c in text if c.isascii())


def test_a_source_listing_takes_about_half_the_tokens() -> None:
    from importlib import resources

    source = resources.files("rl_daytona.tasks.calc").joinpath("files/calc.py").read_text()
    ids = V.encode_text(source)
    assert V.decode_bytes(ids) == source and len(ids) < 0.6 * len(source.encode("utf-8"))
    assert V.encode_text("    return x") == [V.TEXT_OFFSET + V.TEXT_PIECES.index("    "),
                                              V.TEXT_OFFSET + V.TEXT_PIECES.index("return "), V.BYTE_OFFSET + ord("x")]


def test_token_text_and_bytes_of_pieces() -> None:
    cat = V.piece_id("cat ")
    assert V.token_text(cat) == "cat " and V.token_bytes(cat) == list(b"cat ")
    assert V.token_text(V.EOC) == "<eoc>" and V.token_text(V.SUBMIT) == "<submit>"
    assert V.token_text(V.BYTE_OFFSET + ord("A")) == "A" and V.token_bytes(V.BYTE_OFFSET + 200) == [200]


def test_fragment_regexes_compile_and_match_their_fragment_as_a_whole_token() -> None:
    for f, (fragment, regex) in enumerate(zip(V.FRAGMENTS, V.FRAGMENT_REGEX)):
        if V.FRAGMENT_KIND[f] in V.OLD_ONLY_KINDS | V.NEW_ONLY_KINDS:
            continue  # patterns and templates: see the next test
        if fragment == V.EOL:
            assert regex.pattern == "$" and V.sed_pattern(fragment) == "$"
            continue
        assert regex.search(f"({fragment})") or regex.search(f" {fragment} "), fragment
        if re.match(r"\w", fragment):  # word fragments do not match inside a longer word
            assert not regex.search(f"q{fragment}")
        if re.search(r"\w$", fragment):
            assert not regex.search(f"{fragment}q")


def test_kinds_compatible_is_reflexive_and_symmetric() -> None:
    for a in V.KINDS:
        assert V.kinds_compatible(a, a)
        for b in V.KINDS:
            assert V.kinds_compatible(a, b) == V.kinds_compatible(b, a)


@pytest.mark.parametrize("line, old, new, after", [
    ("    return s / len(xs)", V.CALL, "(& - 1)", "    return s / (len(xs) - 1)"),
    ("    q, r = divmod(parts, total)", V.PAIR, "(\\2, \\1)", "    q, r = divmod(total, parts)"),
    ("    x = f(a)", V.CALL, "(\\2, \\1)", "    x = f(a)"),  # sed refuses a missing group: no change
    ("    return min(lo, max(x, hi))", V.CALLS, "\\3(\\2\\1(", "    return max(lo, min(x, hi))"),
    ("    y = a.f(b, g(c), h(d)) + (e)", V.CALLS, "\\3(\\2\\1(", "    y = a.h(b, g(c), f(d)) + (e)"),
    ("    return f(x) + 1", V.CALLS, "\\3(\\2\\1(", "    return f(x) + 1"),  # one call: no match
    ("    return f(a, b)", V.PAIR, "\\3(\\2\\1(", "    return f(a, b)"),  # <pair> has no group 3
])
def test_patterns_and_templates_replay_what_sed_does(line: str, old: str, new: str, after: str, tmp_path) -> None:
    import subprocess

    o, n = V.FRAGMENTS.index(old), V.FRAGMENTS.index(new)
    replayed = V.FRAGMENT_REGEX[o].sub(lambda m: V.replacement_text(V.FRAGMENTS[n], m), line, count=1)
    assert replayed == after
    (tmp_path / "f.py").write_text(line + "\n")
    script = f"1s/{V.PIECES[V.OLD_IDS[o]].text}/{V.PIECES[V.NEW_IDS[n]].text}/"
    subprocess.run(["sed", "-i", script, "f.py"], cwd=tmp_path, capture_output=True)
    assert (tmp_path / "f.py").read_text() == after + "\n"


def test_no_piece_names_a_file_and_paths_are_bytes() -> None:
    assert not any(p.text.endswith(".py") for p in V.PIECES)
    assert V.path_text(V.encode_bytes("pkg/mod.py")) == "pkg/mod.py"
    assert all(V.BYTE_OFFSET <= t < V.VOCAB_SIZE for t in V.PATH_IDS)
