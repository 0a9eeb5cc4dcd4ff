"""What the policy knows at a decision point, recomputed from context token ids alone.

Invariant: `observe(ids)` is a pure function of the ids (no clock, no randomness, no server
state), so training recomputes exactly the observation the sampler saw. It replays the
transcript: the files the task names (Python paths in the user prompt) and the files views
show are the ones it knows; views fill a believed copy of each file, the policy's own
`sed -i` edits are applied to that copy exactly as sed applies them, and every pytest output
updates which tests fail and which edited lines were judged bad (their function still fails).
Nothing here knows any one taskset: a test file is `test_*.py`, `*_test.py`, `conftest.py` or
anything under a `tests/` folder; every other `.py` is a source.
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass, field, replace
from functools import lru_cache

from rl_daytona.policy import grammar as G
from rl_daytona.policy import pytest_output
from rl_daytona.policy import vocab as V

_EXIT = re.compile(r"\n?\[exit code (-?\d+)[^\]]*\]\s*$")
_CUT = re.compile(r"\n\[\.\.\. \d+ characters cut \.\.\.\]\n")
_NUMBERED = re.compile(r"^\s*(\d+)(?:\t|:)(.*)$")
_DEF = re.compile(r"^def (\w+)\s*\(")
_HEADER = re.compile(r"^==> (\S+) <==$")
_PATH = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w-]+\.py)\b")


def is_test_path(path: str) -> bool:
    """Whether a path is a test file (never a place to fix a bug)."""
    name = path.rsplit("/", 1)[-1]
    return (name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"
            or path.startswith("tests/") or "/tests/" in path)


def paths_in(text: str) -> list[str]:
    """Python file paths a text names, in order of first mention."""
    out: list[str] = []
    for path in _PATH.findall(text):
        path = path[2:] if path.startswith("./") else path
        if path not in out and set(path) <= V.PATH_CHARS:
            out.append(path)
    return out


@dataclass(frozen=True)
class Function:
    name: str
    start: int  # the `def` line
    end: int  # last line of the body


@dataclass(frozen=True)
class Observation:
    """The policy's knowledge before one completion (treat the mappings as read-only)."""

    turn: int = 0
    last_verb: int = -1
    last_failed: bool = False
    tests_run: bool = False
    failing_tests: tuple[str, ...] = ()
    all_passed: bool = False
    broken: bool = False
    edited_since_test: bool = False
    progressing: bool = False  # a test run within the last two set a new low of failing tests
    lines: dict[int, str] = field(default_factory=dict)
    original: dict[int, str] = field(default_factory=dict)
    bad_texts: frozenset[tuple[int, str]] = frozenset()
    functions: tuple[Function, ...] = ()
    failing_functions: frozenset[str] = frozenset()
    path: str = ""  # the file `lines`, `functions`... describe (the focus: see `_focus`)
    files: tuple[str, ...] = ()  # every file known: named by the prompt or shown by a view
    beliefs: dict[str, "FileBelief"] = field(default_factory=dict)

    @property
    def source_seen(self) -> bool:
        return any(b.lines for p, b in self.beliefs.items() if not is_test_path(p))

    @property
    def sources(self) -> tuple[str, ...]:
        return tuple(p for p in self.files if not is_test_path(p))

    @property
    def any_failing_function(self) -> bool:
        return any(b.failing_functions for b in self.beliefs.values())

    def for_path(self, path: str) -> "Observation":
        """This observation with `lines`... describing `path` (empty when never seen)."""
        b = self.beliefs.get(path, FileBelief())
        if path == self.path and b.lines is self.lines and b.original is self.original \
                and b.functions is self.functions and b.bad_texts is self.bad_texts \
                and b.failing_functions is self.failing_functions:
            return self  # already so (asked before every edit decision)
        return replace(self, path=path, lines=b.lines, original=b.original, bad_texts=b.bad_texts,
                       functions=b.functions, failing_functions=b.failing_functions)

    def function_at(self, line: int) -> Function | None:
        return _function_at(self.functions, line)

    def is_dirty_bad(self, line: int, text: str | None = None) -> bool:
        """True when the line's text differs from what was first seen and was judged bad
        (its function still failed, or pytest could not even collect, right after it)."""
        text = self.lines.get(line, "") if text is None else text
        return (line, text) in self.bad_texts and not same_code(text, self.original.get(line))


@dataclass(frozen=True)
class FileBelief:
    """What the policy believes one file holds (lines 1-based), and what it judged of its edits."""

    lines: dict[int, str] = field(default_factory=dict)
    original: dict[int, str] = field(default_factory=dict)
    bad_texts: frozenset[tuple[int, str]] = frozenset()
    functions: tuple[Function, ...] = ()
    failing_functions: frozenset[str] = frozenset()


class _File:
    """Mutable belief about one file during a replay."""

    def __init__(self) -> None:
        self.lines: dict[int, str] = {}
        self.original: dict[int, str] = {}
        self.bad_texts: set[tuple[int, str]] = set()

    def see(self, line: int, text: str) -> None:
        if 1 <= line <= V.MAX_LINE:
            self.lines[line] = text
            self.original.setdefault(line, text)

    def frozen(self, failing: tuple[str, ...]) -> FileBelief:
        functions = parse_functions(self.lines)
        return FileBelief(dict(self.lines), dict(self.original), frozenset(self.bad_texts), functions,
                          failing_functions(failing, functions))


def _function_at(functions: tuple[Function, ...], line: int) -> Function | None:
    for fn in functions:
        if fn.start <= line <= fn.end:
            return fn
    return None


def split_segments(ids: list[int] | tuple[int, ...]) -> list[tuple[int, list[int]]]:
    """(role marker, body ids) for every segment of a context."""
    segments: list[tuple[int, list[int]]] = []
    for token in ids:
        if token in _MARKERS:
            segments.append((token, []))
        elif segments:
            segments[-1][1].append(token)
    return segments


_MARKERS = frozenset(V.ROLE_MARKERS.values())


class Replay:
    """Mutable replay state; `snapshot()` freezes it into an `Observation`."""

    def __init__(self) -> None:
        self.turn, self.last_verb, self.last_failed = 0, -1, False
        self.result: pytest_output.TestResult | None = None
        self.edited_since_test = False
        self.failed_counts: list[int] = []  # failing tests per readable (not broken) run
        self.files: dict[str, _File] = {}
        self.known: list[str] = []
        self.pending: Command | None = None

    def feed(self, role: int, body: list[int]) -> None:
        if role == V.ASSISTANT and body:
            self.turn += 1
            self.pending = G.decode(body)
            self.last_verb = self.pending.verb if self.pending else -1
        elif role == V.TOOL and self.turn:
            self._observe_output(V.decode_bytes(body))
        elif role == V.USER:
            self._know(*paths_in(V.decode_bytes(body)))

    def _know(self, *paths: str) -> None:
        self.known.extend(p for p in paths if p not in self.known)

    def _file(self, path: str) -> _File:
        self._know(path)
        return self.files.setdefault(path, _File())

    def _observe_output(self, text: str) -> None:
        match = _EXIT.search(text)
        code = int(match.group(1)) if match else 0
        output = text[: match.start()] if match else text
        command, self.pending = self.pending, None
        self.last_failed = code != 0 or command is None
        if command is None:
            return
        if command.verb == G.EDIT_ID:
            self._apply_edit(command, output)
        elif command.verb == G.LOOK_ID:
            self._apply_listing(output)
        elif command.file and code == 0:
            self._apply_view(command, output)
        if command.verb in G.PYTEST_IDS or command.verb == G.LOOK_ID or command.then_test:
            self._apply_tests(pytest_output.parse(output))

    def _apply_listing(self, output: str) -> None:
        """`==> path <==` headers, each followed by that file's numbered lines."""
        current: _File | None = None
        for row in _trusted_rows(output):
            header = _HEADER.match(row)
            if header:
                path = header.group(1)
                current = self._file(path) if set(path) <= V.PATH_CHARS else None
                continue
            found = _NUMBERED.match(row)
            if found and current is not None:
                current.see(int(found.group(1)), found.group(2))

    def _apply_view(self, command: G.Command, output: str) -> None:
        numbered = command.verb in _NUMBERED_VIEW_IDS
        rows = _trusted_rows(output)
        start = _view_start(command)
        belief = self._file(command.file)
        for offset, row in enumerate(rows):
            if numbered:
                found = _NUMBERED.match(row)
                if found:
                    belief.see(int(found.group(1)), found.group(2))
            elif start > 0 and (row or offset < len(rows) - 1):
                belief.see(start + offset, row)

    def _apply_edit(self, command: G.Command, output: str) -> None:
        self.edited_since_test = True
        if "sed: " in output or command.file not in self.files:
            return
        lines = self.files[command.file].lines
        for sub in command.subs:
            if sub.line in lines:
                lines[sub.line] = apply_substitution(lines[sub.line], sub)

    def _apply_tests(self, result: pytest_output.TestResult) -> None:
        if result.broken and self.result is not None:  # a collection error names no test: keep the last ones
            result = replace(result, failing=self.result.failing)
        self.result, self.edited_since_test = result, False
        if not result.broken:
            self.failed_counts.append(result.failed)
        for belief in self.files.values():
            functions = parse_functions(belief.lines)
            failing = failing_functions(result.failing, functions)
            for line, text in belief.lines.items():
                fn = _function_at(functions, line)
                judged_bad = result.broken or (fn is not None and fn.name in failing)
                if judged_bad and not same_code(text, belief.original.get(line)):
                    belief.bad_texts.add((line, text))

    def snapshot(self) -> Observation:
        result = self.result or pytest_output.TestResult()
        beliefs = {p: f.frozen(result.failing) for p, f in self.files.items()}
        obs = Observation(
            turn=self.turn, last_verb=self.last_verb, last_failed=self.last_failed,
            tests_run=self.result is not None, failing_tests=result.failing,
            all_passed=result.all_passed, broken=result.broken,
            edited_since_test=self.edited_since_test, progressing=progressing(self.failed_counts),
            files=tuple(self.known), beliefs=beliefs,
        )
        return obs.for_path(_focus(beliefs, self.known))


@lru_cache(maxsize=1 << 16)
def code_key(text: str) -> str:
    """What a line of code means, as a comparable string: its syntax tree when it parses on its
    own (a block header with a `pass` body), so `(len(xs))` and `len(xs)` compare equal; else
    the text itself."""
    code = text.strip()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.dump(ast.parse(code + " pass" if code.endswith(":") else code))
    except (SyntaxError, ValueError):
        return "\0" + text


_LAYOUT = str.maketrans("", "", " \t()")


def same_code(a: str | None, b: str | None) -> bool:
    """Whether two versions of a line are the same code: identical, or differing only in
    spacing, parentheses or a comment, with the same syntax tree. An edit that only adds or
    drops redundant parentheses has put the line back; `(a - b) * c` is not `a - b * c`.

    The text comparison comes first and settles almost every pair without parsing: the policy
    asks this of every replacement it could make on a line, each turn."""
    if a == b:
        return True
    if a is None or b is None:
        return False
    if "#" not in a and "#" not in b and a.translate(_LAYOUT) != b.translate(_LAYOUT):
        return False
    return code_key(a) == code_key(b)


def progressing(failed_counts: list[int]) -> bool:
    """Whether one of the last two test runs failed fewer tests than every run before it
    (and some still fail): the edits are getting somewhere, so more turns are worth their cost."""
    for last in (len(failed_counts) - 1, len(failed_counts) - 2):
        if last >= 1 and failed_counts[-1] > 0 and failed_counts[last] < min(failed_counts[:last]):
            return True
    return False


def _focus(beliefs: dict[str, FileBelief], known: list[str]) -> str:
    """The source a failing test points into, else the first source seen, else the first named."""
    sources = [p for p in known if not is_test_path(p)]
    for path in sources:
        if path in beliefs and beliefs[path].failing_functions:
            return path
    for path in sources:
        if path in beliefs and beliefs[path].lines:
            return path
    return sources[0] if sources else ""


def _trusted_rows(output: str) -> list[str]:
    """The output's rows before any cut (the row the cut fell in is partial: never believed)."""
    rows = _CUT.split(output)[0].split("\n")
    return rows[:-1] if _CUT.search(output) else rows


Command = G.Command
_NUMBERED_VIEW_IDS = (V.piece_id("nl -ba "), V.piece_id("grep -n 'def ' "), V.piece_id("grep -n 'return' "))


def _view_start(command: G.Command) -> int:
    """First line number of an un-numbered view's output (0: unknown, as for `tail`)."""
    if command.verb == G.RANGE_VIEW_ID:
        return command.first
    return 0 if command.verb == V.piece_id("tail -n ") else 1


def apply_substitution(text: str, sub: G.Substitution) -> str:
    """What GNU sed makes of one line under `Ls/OLD/NEW/[2|g]`."""
    pattern, new = V.FRAGMENT_REGEX[sub.old], V.FRAGMENTS[sub.new]
    if sub.occurrence in (0, 1):
        return pattern.sub(lambda m: V.replacement_text(new, m), text, count=1 if sub.occurrence == 1 else 0)
    matches = list(pattern.finditer(text))
    if len(matches) < sub.occurrence:
        return text
    hit = matches[sub.occurrence - 1]
    return text[: hit.start()] + V.replacement_text(new, hit) + text[hit.end():]


def parse_functions(lines: dict[int, str]) -> tuple[Function, ...]:
    """Top-level functions of the believed source, each up to the line before the next."""
    starts = sorted((n, m.group(1)) for n, text in lines.items() if (m := _DEF.match(text)))
    last = max(lines) if lines else 0
    bounds = [n for n, _ in starts[1:]] + [last + 1]
    return tuple(Function(name, n, end - 1) for (n, name), end in zip(starts, bounds))


def failing_functions(tests: tuple[str, ...], functions: tuple[Function, ...]) -> frozenset[str]:
    """Functions named by failing tests (`test_median_even` -> `median`, longest name wins)."""
    names = sorted((fn.name for fn in functions), key=len, reverse=True)
    found = set()
    for test in tests:
        stem = test[5:] if test.startswith("test_") else test
        for name in names:
            if stem == name or stem.startswith(name + "_"):
                found.add(name)
                break
    return frozenset(found)


def observe(ids: list[int] | tuple[int, ...]) -> Observation:
    """The observation before the completion that follows `ids`."""
    replay = Replay()
    for role, body in split_segments(ids):
        replay.feed(role, body)
    return replay.snapshot()


def observe_turns(ids: list[int] | tuple[int, ...], starts: list[int]) -> list[Observation]:
    """Observations before the completions starting at each index of `starts` (ascending).

    A completion starting at `start` follows the `<|assistant|>` marker at `start - 1`; its
    observation is the replay of every segment whose marker comes before that one.
    """
    marks = [i for i, t in enumerate(ids) if t in _MARKERS]
    segments = split_segments(ids)
    replay, out, pos = Replay(), [], 0
    for start in starts:
        while pos < len(segments) and marks[pos] < start - 1:
            replay.feed(*segments[pos])
            pos += 1
        out.append(replay.snapshot())
    return out
