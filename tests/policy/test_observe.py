"""Replaying a transcript: the believed calc.py, the failing functions and the bad edits.

The policy replays its own `sed -i` edits on what it has seen, so `apply_substitution` must
mean exactly what GNU sed does with the rendered command; these tests run the real `sed`.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from rl_daytona.policy import grammar as G
from rl_daytona.policy import observe as O
from rl_daytona.policy import vocab as V
from rl_daytona.tasks.calc import BUGS, N_VARIANTS, buggy_source, pristine_source
from tests.policy.conftest import EDIT_NOT_FIXING_MEDIAN, LOOK, Episode
from tests.policy.transcripts import CalcShell, Chat, tool_call_message, tool_content

_ID = V.piece_id
TRICKY_LINES = (
    "    lo, hi = 0, len(xs) - 1",
    "    mid = (lo + hi) // 2  # mid - 1 or mid + 1",
    "    return xs[1:] + xs[:-1] + xs[-1] + xs[0] + xs[i - 1]",
    "    y = x ** 2 ** 0.5 * 2.0 / 2 // 2 % 10",
    "    if n >= 10 and n <= 100 or n != -1 and not n == 0:",
    "    return x is not None and y in xs and z not in xs or w is None",
    "    total += 1e-9 + 10.0 * 0.5 - 1.0 + 100 - 10",
    "    for i in range(1, len(xs)): count -= i; total *= 2; s /= 2",
    "    return sorted(xs)[len(xs) // 2] if len(s) + 1 > n - 1 else min(max(lo, x), hi)",
    "    n = n-1 + n+1 + (n - 1) * (n + 1) + x-1 + -1",
    "    return [abs(round(float(int(x)))) for x in range(n + 1) if x < hi]",
    "    return True if f(k) == False else None",
    "",
    "x",
)


def _calc_like_lines() -> list[str]:
    lines = set(pristine_source().splitlines()) | {b.new for b in BUGS} | set(TRICKY_LINES)
    for variant in range(N_VARIANTS):
        lines |= set(buggy_source(variant).splitlines())
    return sorted(lines)


_OLD_OK = [f for f, k in enumerate(V.FRAGMENT_KIND) if k not in V.NEW_ONLY_KINDS]
_NEW_OK = [f for f, k in enumerate(V.FRAGMENT_KIND) if k not in V.OLD_ONLY_KINDS]


def _groups_fit(old: int, new: int) -> bool:
    """Whether every group the replacement names is one the pattern has."""
    named = [int(g) for g in re.findall(r"\\(\d)", V.FRAGMENTS[new])] if V.FRAGMENT_KIND[new] == "swap" else []
    return all(g <= V.FRAGMENT_REGEX[old].groups for g in named)


def _news(rng: np.random.Generator, old: int, size: int) -> list[int]:
    """Replacements the grammar allows for `old` (a group reference only after a pattern that
    has the group: sed refuses a script naming a group its pattern lacks, and the replay then
    expects no change)."""
    ok = [n for n in _NEW_OK if n != old and _groups_fit(old, n)]
    return [int(n) for n in rng.choice(ok, size=size, replace=False)]


def _cases(rng: np.random.Generator) -> list[tuple[str, G.Substitution]]:
    """(line, substitution) pairs: every fragment occurring on a line (and some that do not),
    each with random replacements under every flag."""
    cases = []
    for text in _calc_like_lines():
        present = [f for f, regex in enumerate(V.FRAGMENT_REGEX) if regex.search(text)]
        absent = [int(f) for f in rng.choice(_OLD_OK, size=2, replace=False) if int(f) not in present]
        for old in present + absent:
            for new in _news(rng, old, 2):
                for occurrence in (1, 2, 0):
                    cases.append((text, G.Substitution(1, old, new, occurrence)))
    return cases


def _sed_command(line: int, sub: G.Substitution) -> str:
    """One `Ls/OLD/NEW/[2|g]` exactly as the policy's pieces render it."""
    flag = {1: "/", 2: "/2", 0: "/g"}[sub.occurrence]
    old, new = V.PIECES[V.OLD_IDS[sub.old]].text, V.PIECES[V.NEW_IDS[sub.new]].text
    return f"{line}s/{old}/{new}{flag}"


def _real_sed(tmp_path: Path, lines: list[str], script: list[str]) -> list[str]:
    target = tmp_path / "lines.txt"
    target.write_text("".join(f"{line}\n" for line in lines))
    subprocess.run(["sh", "-c", f"sed -i '{';'.join(script)}' lines.txt"], check=True, cwd=tmp_path,
                   env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"})  # through a shell, as the agent runs it
    return target.read_text().split("\n")[:-1]


def test_apply_substitution_agrees_with_gnu_sed(tmp_path: Path) -> None:
    cases = _cases(np.random.default_rng(3))
    assert len(cases) > 1000
    changed = 0
    for start in range(0, len(cases), 800):  # one sed run per chunk: case k is line k
        chunk = cases[start:start + 800]
        script = [_sed_command(k, sub) for k, (_, sub) in enumerate(chunk, start=1)]
        got = _real_sed(tmp_path, [text for text, _ in chunk], script)
        assert len(got) == len(chunk)
        for (text, sub), (command, sed_out) in zip(chunk, zip(script, got)):
            mine = O.apply_substitution(text, sub)
            assert mine == sed_out, f"{command!r} on {text!r}: sed gives {sed_out!r}, replay gives {mine!r}"
            changed += mine != text
    assert changed > len(cases) // 3  # most cases really substitute something


def test_chained_substitutions_on_one_line_agree_with_gnu_sed(tmp_path: Path) -> None:
    """Within one `sed -i`, later substitutions see the line as the earlier ones left it."""
    rng = np.random.default_rng(5)
    lines = _calc_like_lines()
    texts, script, expected = [], [], []
    for k in range(1, 301):
        text = after = lines[int(rng.integers(len(lines)))]
        for _ in range(int(rng.integers(2, 5))):
            present = [f for f, regex in enumerate(V.FRAGMENT_REGEX) if regex.search(after)]
            old = int(rng.choice(present))
            new = _news(rng, old, 1)[0]
            sub = G.Substitution(k, old, new, int(rng.choice([1, 2, 0])))
            script.append(_sed_command(k, sub))
            after = O.apply_substitution(after, sub)
        texts.append(text)
        expected.append(after)
    assert _real_sed(tmp_path, texts, script) == expected


def _edit_ids(rng: np.random.Generator, lines: dict[int, str], then_test: bool) -> tuple[int, ...]:
    ids = [G.EDIT_ID, *V.encode_bytes("calc.py"), G.EDIT_OPEN_ID]
    candidates = [n for n, t in lines.items() if t.strip()]
    n_subs = int(rng.integers(1, V.MAX_SUBSTITUTIONS + 1))
    for k in range(n_subs):
        line = int(rng.choice(candidates))
        present = [f for f, regex in enumerate(V.FRAGMENT_REGEX) if regex.search(lines[line])]
        old = int(rng.choice(present)) if rng.random() < 0.9 else int(rng.choice(_OLD_OK))
        new = _news(rng, old, 1)[0]
        flag = G.FLAG_IDS[int(rng.integers(3))]
        ids += [V.LINE_IDS[line - 1], _ID("s/"), V.OLD_IDS[old], _ID("/"), V.NEW_IDS[new], flag]
        ids.append(G.MORE_ID if k < n_subs - 1 else G.CLOSE_ID)
    ids += [V.EOC] if not then_test else [_ID(V.EDIT_SUFFIXES[0]), V.EOC]
    return tuple(ids)


def test_rendered_edit_commands_run_in_a_shell_as_the_replay_predicts(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    for i in range(25):
        shell = CalcShell(tmp_path / f"w{i}", i % N_VARIANTS)
        before = shell.source_lines()
        ids = _edit_ids(rng, before, then_test=False)
        assert G.is_complete(ids)
        command = G.decode(ids)
        assert command is not None
        predicted = dict(before)
        for sub in command.subs:
            predicted[sub.line] = O.apply_substitution(predicted[sub.line], sub)
        out = shell.run(G.render(ids))
        assert out.endswith("[exit code 0]"), out
        assert shell.source_lines() == predicted, G.render(ids)


def _shown(shell: CalcShell) -> dict[int, str]:
    """calc.py's lines as the look shows them (blank lines left out)."""
    return {n: t for n, t in shell.source_lines().items() if t.strip()}


def test_a_scripted_episode_tracks_lines_failures_and_bad_edits(tmp_path: Path) -> None:
    shell, chat = CalcShell(tmp_path, 8), Chat()
    # before the first turn: only the files the prompt names
    assert O.observe(chat.prompt_ids()) == O.Observation(path="calc.py", files=("test_calc.py", "calc.py"))

    chat.run(LOOK, shell)
    obs = O.observe(chat.prompt_ids())
    assert obs.turn == 1 and obs.last_verb == G.LOOK_ID and not obs.last_failed  # the quick run exits 0
    assert obs.lines == _shown(shell) == obs.original
    assert obs.tests_run and not obs.all_passed and not obs.broken and not obs.edited_since_test
    assert obs.failing_tests == ("test_median_even_length", "test_median_odd_length", "test_percentile_interpolates")
    assert obs.failing_functions == {"median", "percentile"}
    defs = {n: t for n, t in shell.source_lines().items() if t.startswith("def ")}
    assert [fn.start for fn in obs.functions] == sorted(defs)
    median = next(fn for fn in obs.functions if fn.name == "median")
    assert obs.function_at(11) == median and obs.function_at(13) == median and obs.function_at(2) is None
    assert obs.bad_texts == frozenset() and not obs.progressing  # one run: nothing to compare

    # an edit inside median that does not fix it: the new line 13 is judged bad
    out = chat.run(EDIT_NOT_FIXING_MEDIAN, shell)
    assert "test_median" in out
    obs = O.observe(chat.prompt_ids())
    actual = shell.source_lines()
    assert obs.lines == _shown(shell) and actual[13] != obs.original[13]
    assert (13, actual[13]) in obs.bad_texts and obs.is_dirty_bad(13)
    assert all(line == 13 for line, _ in obs.bad_texts)
    assert not obs.is_dirty_bad(11) and obs.failing_functions == {"median", "percentile"}
    assert not obs.progressing  # 3 failing, then 3 again

    # fix median's parity and revert line 13: median passes, nothing new is bad
    chat.run("f=calc.py; sed -i '11s/ == / != /;13s/ \\/\\/ / \\/ /' \"$f\"" + V.EDIT_SUFFIXES[0], shell)
    obs = O.observe(chat.prompt_ids())
    assert obs.lines == _shown(shell) and obs.lines[13] == obs.original[13]
    assert obs.failing_functions == {"percentile"} and obs.failing_tests == ("test_percentile_interpolates",)
    assert not obs.is_dirty_bad(11) and not obs.is_dirty_bad(13)
    assert (13, actual[13]) in obs.bad_texts  # the old verdict is kept for that text
    assert obs.progressing  # 3, 3, then 1 failing: a new low

    # an edit without tests: known to be untested
    chat.run("f=calc.py; sed -i '41s/ - / + /' \"$f\"", shell)
    obs = O.observe(chat.prompt_ids())
    assert obs.edited_since_test and obs.lines == _shown(shell) and not obs.all_passed
    assert obs.progressing  # the new low was one of the last two runs

    chat.run(V.PYTEST_COMPACT, shell)
    obs = O.observe(chat.prompt_ids())
    assert obs.all_passed and not obs.failing_tests and not obs.failing_functions
    assert not obs.edited_since_test and not obs.last_failed and obs.turn == 5
    assert not obs.progressing  # nothing left to fix


@pytest.mark.parametrize(("counts", "expected"), [
    ([], False), ([3], False), ([3, 3], False), ([3, 2], True), ([3, 2, 2], True), ([3, 2, 2, 2], False),
    ([3, 4, 2], True), ([2, 3, 3], False), ([3, 1, 0], False), ([5, 1, 3, 1], False), ([5, 4, 3, 3], True),
])
def test_progressing_means_a_new_low_of_failures_in_the_last_two_runs(counts: list[int], expected: bool) -> None:
    assert O.progressing(counts) is expected


def test_an_edit_that_breaks_collection_marks_the_changed_line_bad(tmp_path: Path) -> None:
    shell, chat = CalcShell(tmp_path, 0), Chat()
    chat.run(LOOK, shell)
    before = O.observe(chat.prompt_ids())
    chat.run("f=calc.py; sed -i '5s/ \\/ /not /' \"$f\"" + V.EDIT_SUFFIXES[0], shell)
    obs = O.observe(chat.prompt_ids())
    assert obs.broken and not obs.all_passed
    assert obs.failing_tests == before.failing_tests  # a collection error names no test: keep the last
    assert obs.lines == _shown(shell) and obs.is_dirty_bad(5)


@pytest.mark.parametrize("command,expected_lines", [
    ("cat calc.py", "all"),
    ("nl -ba calc.py", "all"),
    ("head -n 7 calc.py", range(1, 8)),
    ("sed -n '9,13p' calc.py", range(9, 14)),
    ("sed -n '55,80p' calc.py", range(55, 59)),
    ("grep -n 'def ' calc.py", "defs"),
    ("grep -n 'return' calc.py", "returns"),
    ("tail -n 5 calc.py", ()),  # where the output starts is unknown
    ("cat test_calc.py", ()),  # only calc.py is tracked
    ("nl -ba test_calc.py", ()),
])
def test_views_fill_exactly_the_lines_they_show(tmp_path: Path, command: str, expected_lines: object) -> None:
    shell, chat = CalcShell(tmp_path, 11), Chat()
    chat.run(command, shell)
    obs = O.observe(chat.prompt_ids())
    source = shell.source_lines()
    if expected_lines == "all":
        wanted = set(source)
    elif expected_lines == "defs":
        wanted = {n for n, t in source.items() if "def " in t}
    elif expected_lines == "returns":
        wanted = {n for n, t in source.items() if "return" in t}
    else:
        wanted = set(expected_lines)  # type: ignore[call-overload]
    assert set(obs.lines) == wanted
    assert all(obs.lines[n] == source[n] for n in obs.lines)
    assert not obs.tests_run and obs.turn == 1


def _cut_views(tmp_path: Path, command: str) -> list[tuple[int, O.Observation, dict[int, str]]]:
    """The observation after `command` when the agent cut its output to 30%..90% of its length."""
    shell = CalcShell(tmp_path, 8)
    result = shell.exec(command)
    out = []
    for fraction in (0.3, 0.5, 0.7, 0.9):
        limit = int(len(result.output) * fraction)
        chat = Chat()
        chat.messages += [tool_call_message("call_1", command),
                          {"role": "tool", "tool_call_id": "call_1", "content": tool_content(result, limit)}]
        assert "characters cut" in chat.messages[-1]["content"]
        out.append((limit, O.observe(chat.prompt_ids()), shell.source_lines()))
    return out


def test_a_cut_off_cat_never_believes_a_partial_line(tmp_path: Path) -> None:
    for limit, obs, source in _cut_views(tmp_path, "cat calc.py"):
        wrong = {n: t for n, t in obs.lines.items() if source.get(n) != t}
        assert obs.lines and not wrong, f"cut at {limit}: believed lines differ from calc.py: {wrong}"


@pytest.mark.parametrize("command", [LOOK, "nl -ba calc.py"])
def test_a_cut_off_numbered_view_never_believes_a_partial_line(tmp_path: Path, command: str) -> None:
    """BUG (observe.Replay._apply_view): for numbered views (nl -ba, the look command, grep -n)
    the last row before `[... N characters cut ...]` is usually cut mid-line, yet it is kept
    as that line's whole text (only un-numbered views drop it), so the believed calc.py holds
    a truncated line that later edits and features are computed on."""
    for limit, obs, source in _cut_views(tmp_path, command):
        wrong = {n: t for n, t in obs.lines.items() if source.get(n) != t}
        assert obs.lines and not wrong, f"cut at {limit}: believed lines differ from calc.py: {wrong}"


def test_believed_source_matches_the_real_file_through_policy_episodes(episodes: list[Episode]) -> None:
    checked = 0
    for episode in episodes:
        chat = episode.chat
        prompts = chat.prompts + ([chat.prompt_ids()] if chat.completions[-1] != (V.SUBMIT,) else [])
        for prompt, actual in zip(prompts, episode.files):
            obs = O.observe(prompt)
            wrong = {n: t for n, t in obs.lines.items() if actual.get(n) != t}
            assert not wrong, f"variant {episode.variant}: believed lines differ from calc.py: {wrong}"
            checked += len(obs.lines)
    edits = sum(ids[0] == G.EDIT_ID for e in episodes for ids in e.chat.completions)
    assert checked and edits >= 2, "the episodes should read the source and edit it"


def test_observe_turns_equals_observe_on_each_prompt(episodes: list[Episode]) -> None:
    for episode in episodes:
        ids, mask = episode.chat.training_sequence()
        starts = [len(p) for p in episode.chat.prompts]
        assert O.observe_turns(ids, starts) == [O.observe(p) for p in episode.chat.prompts]
        assert O.observe(ids) == O.observe(list(ids))  # pure: same ids, same observation


def test_failing_functions_maps_test_names_to_the_longest_function_name() -> None:
    functions = (O.Function("mean", 1, 3), O.Function("median", 4, 8), O.Function("cumulative_sum", 9, 12),
                 O.Function("sum", 13, 14))
    tests = ("test_median_even_length", "test_mean_integers", "test_cumulative_sum_running_total", "test_other_x",
             "test_meanx")
    assert O.failing_functions(tests, functions) == {"median", "mean", "cumulative_sum"}


def test_parse_functions_spans_each_def_to_the_next() -> None:
    lines = {1: '"""doc"""', 3: "def a(x):", 4: "    return x", 6: "def b(y):", 7: "    return y", 8: ""}
    assert O.parse_functions(lines) == (O.Function("a", 3, 5), O.Function("b", 6, 8))
    assert O.parse_functions({}) == ()


def test_split_segments_cuts_at_role_markers() -> None:
    ids = [V.SYSTEM, *V.encode_bytes("s"), V.USER, *V.encode_bytes("u"), V.ASSISTANT, V.SUBMIT, V.ASSISTANT]
    segments = O.split_segments(ids)
    assert [role for role, _ in segments] == [V.SYSTEM, V.USER, V.ASSISTANT, V.ASSISTANT]
    assert segments[2][1] == [V.SUBMIT] and segments[3][1] == []


@pytest.mark.parametrize("a,b,same", [
    ("    return (len(xs))", "    return len(xs)", True),
    ("    return len( xs )", "    return len(xs)", True),
    ("    return (a - b) * c", "    return a - b * c", False),  # the parentheses mattered
    ("    return a - b  # was +", "    return a - b", True),  # a comment is not code
    ("    return a + b", "    return a - b", False),
    ("    return s[0]", "    return s[0", False),  # does not parse: only identical text is the same
    ("    return s[0", "    return s[0", True),
    (None, "x", False),
])
def test_same_code(a, b, same) -> None:
    assert O.same_code(a, b) is same and O.same_code(b, a) is same
