"""`rl-daytona tasks calibrate`: is a taskset the right difficulty for a policy to learn from?

Group-relative RL learns only from groups whose attempts disagree (some pass, some fail): a
group that all passes or all fails has zero advantage everywhere. The rule of thumb checked
here: the base pass rate lies inside the band where groups disagree (default 10%-90%), and
most instances (default at least half) have a nonzero spread within their group.

Invariant: `calibrate` reads only an eval summary (`summary.json`'s `per_task`), so it judges
exactly the attempts `eval` recorded; infrastructure failures never count as attempts.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from rich.markup import escape
from rich.table import Table


@dataclass(frozen=True)
class Band:
    """The rule of thumb: base pass rate within [low, high], at least `min_mixed` of the
    instances with attempts that disagree."""

    low: float = 0.1
    high: float = 0.9
    min_mixed: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.low < self.high <= 1.0:
            raise ValueError(f"--band must be LOW:HIGH with 0 <= LOW < HIGH <= 1, got {self.low}:{self.high}")


@dataclass(frozen=True)
class InstanceCalibration:
    instance_id: str
    passes: int
    attempts: int
    pass_rate: float
    reward_std: float
    signal: str  # "mixed" (the group disagrees), "always passes", "always fails", "no attempts"


@dataclass(frozen=True)
class Calibration:
    instances: tuple[InstanceCalibration, ...]
    group: int
    base_rate: float
    mixed_fraction: float
    band: Band
    in_band: bool
    advice: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _signal(passes: int, attempts: int) -> str:
    if attempts == 0:
        return "no attempts"
    if passes == attempts:
        return "always passes"
    return "always fails" if passes == 0 else "mixed"


def calibrate(summary: dict[str, Any], group: int, band: Band = Band()) -> Calibration:
    """Per-instance signal and the band check, from an eval summary."""
    rows = tuple(InstanceCalibration(task_id, row["passes"], row["attempts"], row["pass_rate"], row["reward_std"],
                                     _signal(row["passes"], row["attempts"]))
                 for task_id, row in summary["per_task"].items())
    mixed = sum(r.signal == "mixed" for r in rows) / len(rows) if rows else 0.0
    base = float(summary["pass_rate"])
    in_band = band.low <= base <= band.high and mixed >= band.min_mixed
    return Calibration(rows, group, base, mixed, band, in_band, _advice(rows, group, base, mixed, band))


def _advice(rows: tuple[InstanceCalibration, ...], group: int, base: float, mixed: float, band: Band) -> tuple[str, ...]:
    fails = sum(r.signal == "always fails" for r in rows)
    passes = sum(r.signal == "always passes" for r in rows)
    out = []
    if base < band.low:
        out.append(f"base pass rate {base:.0%} is below {band.low:.0%}: too hard for this policy (fewer bugs per "
                   "instance, more --max-turns, or a stronger starting model)")
    elif base > band.high:
        out.append(f"base pass rate {base:.0%} is above {band.high:.0%}: too easy, little left to learn "
                   "(harder instances, or hold these out)")
    if mixed < band.min_mixed:
        out.append(f"only {mixed:.0%} of instances have attempts that disagree (want {band.min_mixed:.0%}+): "
                   f"raise --group (at group {group} a task passing half the time still looks uniform "
                   f"{2 * 0.5 ** group:.0%} of the time) or rework the no-signal instances")
    if fails or passes:
        out.append(f"no training signal at this policy: {fails} always fail, {passes} always pass")
    if not out or (band.low <= base <= band.high and mixed >= band.min_mixed):
        out.insert(0, f"in band: base pass rate {base:.0%} within {band.low:.0%}-{band.high:.0%}, "
                      f"{mixed:.0%} of instances with spread: good to train on")
    return tuple(out)


_STYLE = {"mixed": "green", "always passes": "yellow", "always fails": "red", "no attempts": "red"}


def render_calibration(cal: Calibration, title: str) -> Table:
    table = Table(title=title)
    for name, justify in (("instance", "left"), ("passes/attempts", "right"), ("pass rate", "right"),
                          ("spread (std)", "right"), ("group disagrees", "left"), ("signal", "left")):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for r in cal.instances:
        style = _STYLE[r.signal]
        table.add_row(escape(r.instance_id), f"{r.passes}/{r.attempts}", f"{r.pass_rate:.0%}", f"{r.reward_std:.2f}",
                      "yes" if r.signal == "mixed" else "no", f"[{style}]{r.signal}[/]")
    verdict = "[green]IN BAND[/]" if cal.in_band else "[red]OUT OF BAND[/]"
    table.caption = (f"{verdict}: base pass rate {cal.base_rate:.1%} (band {cal.band.low:.0%}-{cal.band.high:.0%}); "
                     f"{cal.mixed_fraction:.0%} of instances with spread (want {cal.band.min_mixed:.0%}+)\n"
                     + "\n".join(f"- {escape(a)}" for a in cal.advice))
    table.caption_justify = "left"
    return table
