"""The calc bug catalogue and the fixed variant table.

Invariant: every bug is one exact line of `files/calc.py` replaced by another; each old line
occurs exactly once, a variant breaks at most one bug per function, so any variant's bugs
apply together cleanly. Variants 0-23 and 32-39 are the train split and 24-31 the heldout
split: every pair of bugs inside a heldout variant never appears together in a train variant,
while every bug of the catalogue is a train variant on its own (32-39 add the ones 0-23 held
only in combinations, appended so the older variant numbers keep their bugs). The table is
literal data, so it is the same in every process and Python version.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from rl_daytona.tasks.api import TaskError


@dataclass(frozen=True)
class Bug:
    """One single-line bug: `old` (a whole line of calc.py) becomes `new`."""

    bug_id: str
    old: str
    new: str

    @property
    def function(self) -> str:
        return self.bug_id.split(".", 1)[0]


BUGS: tuple[Bug, ...] = (
    Bug("mean.off_by_one", "    return sum(xs) / len(xs)", "    return sum(xs) / (len(xs) - 1)"),
    Bug("mean.floor_division", "    return sum(xs) / len(xs)", "    return sum(xs) // len(xs)"),
    Bug("median.wrong_index", "    return (s[mid - 1] + s[mid]) / 2", "    return (s[mid] + s[mid + 1]) / 2"),
    Bug("median.wrong_parity", "    if len(s) % 2 == 1:", "    if len(s) % 2 == 0:"),
    Bug("variance.off_by_one", "    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)",
        "    return sum((x - m) ** 2 for x in xs) / len(xs)"),
    Bug("variance.wrong_sign", "    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)",
        "    return sum((x + m) ** 2 for x in xs) / (len(xs) - 1)"),
    Bug("stdev.wrong_exponent", "    return variance(xs) ** 0.5", "    return variance(xs) ** 2"),
    Bug("mode.min_for_max", "    return max(counts, key=counts.get)", "    return min(counts, key=counts.get)"),
    Bug("mode.no_increment", "        counts[x] = counts.get(x, 0) + 1", "        counts[x] = counts.get(x, 0)"),
    Bug("clamp.swapped_min_max", "    return max(lo, min(x, hi))", "    return min(lo, max(x, hi))"),
    Bug("percentile.off_by_one", "    k = (len(s) - 1) * p / 100", "    k = len(s) * p / 100"),
    Bug("percentile.wrong_sign", "    return s[f] + (s[c] - s[f]) * (k - f)", "    return s[f] - (s[c] - s[f]) * (k - f)"),
    Bug("dot.plus_for_times", "    return sum(x * y for x, y in zip(xs, ys))", "    return sum(x + y for x, y in zip(xs, ys))"),
    Bug("normalize.max_for_sum", "    total = sum(xs)", "    total = max(xs)"),
    Bug("cumulative_sum.wrong_start", "    out, total = [], 0", "    out, total = [], 1"),
    Bug("cumulative_sum.assign_not_add", "        total += x", "        total = x"),
)

VARIANT_BUGS: tuple[tuple[str, ...], ...] = (
    ('mean.off_by_one',),
    ('median.wrong_index',),
    ('variance.off_by_one',),
    ('stdev.wrong_exponent',),
    ('mode.no_increment',),
    ('percentile.off_by_one',),
    ('dot.plus_for_times',),
    ('cumulative_sum.wrong_start',),
    ('median.wrong_parity', 'percentile.wrong_sign'),
    ('median.wrong_index', 'clamp.swapped_min_max'),
    ('stdev.wrong_exponent', 'clamp.swapped_min_max'),
    ('median.wrong_parity', 'cumulative_sum.wrong_start'),
    ('median.wrong_index', 'percentile.wrong_sign'),
    ('percentile.wrong_sign', 'cumulative_sum.assign_not_add'),
    ('percentile.off_by_one', 'dot.plus_for_times'),
    ('mean.off_by_one', 'normalize.max_for_sum'),
    ('mean.floor_division', 'mode.no_increment'),
    ('variance.wrong_sign', 'mode.min_for_max'),
    ('mode.min_for_max', 'percentile.wrong_sign', 'cumulative_sum.assign_not_add'),
    ('mean.floor_division', 'clamp.swapped_min_max', 'normalize.max_for_sum'),
    ('mean.floor_division', 'variance.wrong_sign', 'percentile.wrong_sign'),
    ('mean.off_by_one', 'median.wrong_parity', 'percentile.off_by_one'),
    ('mean.floor_division', 'dot.plus_for_times', 'cumulative_sum.wrong_start'),
    ('median.wrong_index', 'variance.off_by_one', 'dot.plus_for_times'),
    ('mode.no_increment', 'dot.plus_for_times'),
    ('median.wrong_parity', 'variance.wrong_sign'),
    ('dot.plus_for_times', 'cumulative_sum.assign_not_add'),
    ('median.wrong_index', 'cumulative_sum.assign_not_add'),
    ('clamp.swapped_min_max', 'percentile.wrong_sign', 'dot.plus_for_times'),
    ('mean.floor_division', 'median.wrong_parity', 'stdev.wrong_exponent'),
    ('mean.off_by_one', 'clamp.swapped_min_max', 'percentile.wrong_sign'),
    ('variance.off_by_one', 'stdev.wrong_exponent', 'mode.min_for_max'),
    ('mean.floor_division',),
    ('median.wrong_parity',),
    ('variance.wrong_sign',),
    ('mode.min_for_max',),
    ('clamp.swapped_min_max',),
    ('percentile.wrong_sign',),
    ('normalize.max_for_sum',),
    ('cumulative_sum.assign_not_add',),
)

TRAIN_VARIANTS: tuple[int, ...] = tuple(range(24)) + tuple(range(32, 40))
HELDOUT_VARIANTS: tuple[int, ...] = tuple(range(24, 32))


def bug_catalogue() -> dict[str, Bug]:
    """Every bug by id, in catalogue order."""
    return {bug.bug_id: bug for bug in BUGS}


def variant_bugs(variant: int) -> tuple[str, ...]:
    """The bug ids a variant applies; `TaskError` for an unknown variant."""
    if isinstance(variant, bool) or not isinstance(variant, int) or not 0 <= variant < len(VARIANT_BUGS):
        raise TaskError(f"calc has no variant {variant!r} (variants are 0..{len(VARIANT_BUGS) - 1})")
    return VARIANT_BUGS[variant]


def pristine_source() -> str:
    return resources.files(__package__).joinpath("files/calc.py").read_text()


def apply_bugs(source: str, bug_ids: tuple[str, ...], *, revert: bool = False) -> str:
    """`source` with each bug's line replaced (`revert`: each bug's line put back);
    `TaskError` if a line is not there exactly once."""
    catalogue = bug_catalogue()
    lines = source.split("\n")
    for bug_id in bug_ids:
        if bug_id not in catalogue:
            raise TaskError(f"unknown calc bug {bug_id!r}")
        bug = catalogue[bug_id]
        old, new = (bug.new, bug.old) if revert else (bug.old, bug.new)
        hits = [i for i, line in enumerate(lines) if line == old]
        if len(hits) != 1:
            raise TaskError(f"bug {bug_id}: line {old.strip()!r} occurs {len(hits)} times, expected once")
        lines[hits[0]] = new
    return "\n".join(lines)


def buggy_source(variant: int) -> str:
    """calc.py with the variant's bugs applied."""
    return apply_bugs(pristine_source(), variant_bugs(variant))


def fixed_source(variant: int) -> str:
    """The variant's calc.py with every one of its bugs reverted (the reference fix)."""
    return apply_bugs(buggy_source(variant), variant_bugs(variant), revert=True)
