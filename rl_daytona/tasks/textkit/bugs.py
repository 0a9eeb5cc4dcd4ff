"""The textkit bug catalogue and the fixed variant table.

Invariant: every bug is one exact line of one source file replaced by another (off-by-one,
wrong comparison, wrong constant, swapped arguments, wrong operator or method); each old line
occurs exactly once in its file and a variant breaks at most one bug per function, so any
variant's bugs apply together cleanly. Variants 0-23 and 32-37 are the train split and 24-31
the heldout split: no pair of bugs inside a heldout variant appears together in a train
variant, while every bug of the catalogue is a train variant on its own (32-37 add the ones
0-23 held only in combinations, appended so the older variant numbers keep their bugs). The
table is literal data.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from rl_daytona.tasks.api import TaskError

SOURCES: dict[str, str] = {"textkit/strings.py": "strings.py", "textkit/seqs.py": "seqs.py"}
TESTS: dict[str, str] = {"tests/test_strings.py": "test_strings.py", "tests/test_seqs.py": "test_seqs.py"}


@dataclass(frozen=True)
class Bug:
    """One single-line bug in `path`: `old` (a whole line) becomes `new`."""

    bug_id: str
    path: str
    old: str
    new: str


def _bug(bug_id: str, old: str, new: str) -> Bug:
    return Bug(bug_id, f"textkit/{bug_id.split('.', 1)[0]}.py", old, new)


BUGS: tuple[Bug, ...] = (
    _bug("strings.slugify.upper", "    words = text.lower().split()", "    words = text.upper().split()"),
    _bug("strings.truncate.strict", "    if len(text) <= width:", "    if len(text) < width:"),
    _bug("strings.truncate.cut", '    return text[: width - 1] + "~"', '    return text[: width - 2] + "~"'),
    _bug("strings.count_vowels.start", "    total = 0", "    total = 1"),
    _bug("strings.count_vowels.assign", "            total += 1", "            total = 1"),
    _bug("strings.pad_left.swapped", "    return text.rjust(width, fill)", "    return text.rjust(fill, width)"),
    _bug("strings.is_palindrome.step", "    return letters == letters[::-1]", "    return letters == letters[::1]"),
    _bug("strings.initials.index", '    return "".join(p[0].upper() for p in name.split())',
         '    return "".join(p[1].upper() for p in name.split())'),
    _bug("seqs.chunk.start", "    return [xs[i:i + size] for i in range(0, len(xs), size)]",
         "    return [xs[i:i + size] for i in range(1, len(xs), size)]"),
    _bug("seqs.window_sums.off_by_one", "    return [sum(xs[i:i + k]) for i in range(len(xs) - k + 1)]",
         "    return [sum(xs[i:i + k]) for i in range(len(xs) - k - 1)]"),
    _bug("seqs.last_index.stop", "    for i in range(len(xs) - 1, -1, -1):", "    for i in range(len(xs) - 1, 0, -1):"),
    _bug("seqs.count_above.compare", "    return sum(1 for x in xs if x > limit)",
         "    return sum(1 for x in xs if x >= limit)"),
    _bug("seqs.rotate.mod", "    n = n % len(xs)", "    n = n // len(xs)"),
    _bug("seqs.scale.sign", "    return [x * factor + offset for x in xs]", "    return [x * factor - offset for x in xs]"),
    _bug("seqs.split_even.swapped", "    q, r = divmod(total, parts)", "    q, r = divmod(parts, total)"),
)

VARIANT_BUGS: tuple[tuple[str, ...], ...] = (
    ('strings.is_palindrome.step',),
    ('strings.truncate.strict',),
    ('strings.count_vowels.assign',),
    ('seqs.split_even.swapped',),
    ('seqs.scale.sign',),
    ('strings.slugify.upper',),
    ('seqs.window_sums.off_by_one',),
    ('strings.count_vowels.start',),
    ('seqs.last_index.stop',),
    ('strings.slugify.upper', 'seqs.split_even.swapped'),
    ('strings.is_palindrome.step', 'strings.initials.index'),
    ('strings.is_palindrome.step', 'seqs.count_above.compare'),
    ('strings.truncate.strict', 'strings.is_palindrome.step'),
    ('seqs.window_sums.off_by_one', 'seqs.last_index.stop'),
    ('strings.count_vowels.start', 'seqs.rotate.mod'),
    ('strings.count_vowels.assign', 'seqs.last_index.stop'),
    ('strings.truncate.strict', 'strings.pad_left.swapped'),
    ('strings.count_vowels.assign', 'strings.pad_left.swapped'),
    ('strings.slugify.upper', 'strings.is_palindrome.step'),
    ('strings.truncate.strict', 'strings.count_vowels.start', 'seqs.count_above.compare'),
    ('strings.slugify.upper', 'strings.initials.index', 'seqs.split_even.swapped'),
    ('strings.truncate.cut', 'strings.initials.index', 'seqs.rotate.mod'),
    ('strings.count_vowels.start', 'seqs.chunk.start', 'seqs.last_index.stop'),
    ('strings.count_vowels.start', 'strings.initials.index', 'seqs.chunk.start'),
    ('seqs.count_above.compare', 'seqs.rotate.mod'),
    ('strings.truncate.cut', 'strings.is_palindrome.step'),
    ('strings.is_palindrome.step', 'seqs.last_index.stop'),
    ('strings.count_vowels.start', 'strings.is_palindrome.step'),
    ('strings.slugify.upper', 'strings.count_vowels.assign'),
    ('seqs.rotate.mod', 'seqs.scale.sign'),
    ('strings.slugify.upper', 'strings.truncate.strict', 'seqs.window_sums.off_by_one'),
    ('strings.pad_left.swapped', 'seqs.window_sums.off_by_one', 'seqs.scale.sign'),
    ('strings.truncate.cut',),
    ('strings.pad_left.swapped',),
    ('strings.initials.index',),
    ('seqs.chunk.start',),
    ('seqs.count_above.compare',),
    ('seqs.rotate.mod',),
)

TRAIN_VARIANTS: tuple[int, ...] = tuple(range(24)) + tuple(range(32, 38))
HELDOUT_VARIANTS: tuple[int, ...] = tuple(range(24, 32))


def variant_bugs(variant: int) -> tuple[str, ...]:
    """The bug ids a variant applies; `TaskError` for an unknown variant."""
    if isinstance(variant, bool) or not isinstance(variant, int) or not 0 <= variant < len(VARIANT_BUGS):
        raise TaskError(f"textkit has no variant {variant!r} (variants are 0..{len(VARIANT_BUGS) - 1})")
    return VARIANT_BUGS[variant]


def _read(name: str) -> str:
    return resources.files(__package__).joinpath("files", name).read_text()


def pristine_files() -> dict[str, str]:
    """Workspace path -> text of every source (the package's __init__ included)."""
    return {"textkit/__init__.py": '"""textkit: small text and sequence helpers."""\n',
            **{path: _read(name) for path, name in SOURCES.items()}}


def test_files() -> dict[str, str]:
    return {path: _read(name) for path, name in TESTS.items()}


def seeded_files(variant: int) -> dict[str, str]:
    """The sources with the variant's bugs applied; `TaskError` if a line is not there once."""
    files = pristine_files()
    by_id = {bug.bug_id: bug for bug in BUGS}
    for bug_id in variant_bugs(variant):
        bug = by_id[bug_id]
        lines = files[bug.path].split("\n")
        hits = [i for i, line in enumerate(lines) if line == bug.old]
        if len(hits) != 1:
            raise TaskError(f"bug {bug_id}: line {bug.old.strip()!r} occurs {len(hits)} times, expected once")
        lines[hits[0]] = bug.new
        files[bug.path] = "\n".join(lines)
    return files
