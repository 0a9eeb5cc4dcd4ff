"""One function per report figure: RunData -> a matplotlib Figure (Agg backend, no display).

Invariant: a figure function either returns a figure with data drawn on it or raises `NoData`
saying, in one line, why that figure cannot be drawn for this run folder; it never draws an
empty or made-up chart.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from rl_daytona.report.load import RolloutRow, RunData  # noqa: E402

# held-out pass rate of the published walkthrough (HUD + Daytona, calc, Qwen 4B): before, after 10 steps
PUBLISHED = ((0, 0.359), (10, 0.812))
PHASE_COLORS = {"claim": "#8c564b", "seed": "#ff7f0e", "agent": "#1f77b4", "grade": "#2ca02c"}
SPREAD_COLORS = {"mixed": "#1f77b4", "all pass": "#2ca02c", "all fail": "#d62728"}
TIMELINE_MAX = 400


class NoData(Exception):
    """This figure cannot be drawn from what the run folder holds; the message says why."""


def _fig(width: float = 7.0, height: float = 3.8) -> tuple[Figure, Any]:
    fig, ax = plt.subplots(figsize=(width, height), dpi=100)
    return fig, ax


def _counted(rows: list[RolloutRow]) -> list[RolloutRow]:
    return [r for r in rows if r.status != "infra_error"]


def _variant_key(variant: str) -> tuple[int, float, str]:
    try:
        return 0, float(variant), variant
    except ValueError:
        return 1, 0.0, variant


def _curve_points(data: RunData) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """(after step, train pass rate) per step and (after step, held-out pass rate) per eval."""
    train = [(m["step"] + 1, float(m["train_pass_rate"])) for m in data.metrics
             if m["step"] >= 0 and m.get("train_pass_rate") is not None]
    held = [(m["step"] + 1, float(m["heldout_pass_rate"])) for m in data.metrics
            if m.get("heldout_pass_rate") is not None]
    if not held and data.summary and isinstance(data.summary.get("evals"), dict):
        for key, ev in data.summary["evals"].items():
            if isinstance(ev, dict) and ev.get("pass_rate") is not None:
                held.append((int(key) + 1, float(ev["pass_rate"])))
    return sorted(train), sorted(held)


def training_curve(data: RunData) -> Figure:
    """Train pass rate per step and held-out pass rate at each evaluation (+ the published line)."""
    if data.kind != "train":
        raise NoData("an eval run has no training curve")
    train, held = _curve_points(data)
    if not train and not held:
        raise NoData("no step finished (metrics.jsonl has no pass rates)")
    fig, ax = _fig()
    if train:
        ax.plot(*zip(*train), marker=".", label="train (rollouts of the step)")
    if held:
        ax.plot(*zip(*held), marker="o", label="held-out")
    if data.taskset == "calc":
        ax.plot(*zip(*PUBLISHED), linestyle=":", marker="s", color="gray",
                label="published 35.9% -> 81.2% (Qwen 4B; endpoints only)")
    ax.set(xlabel="after step (0 = untrained)", ylabel="pass rate", ylim=(0, 1), title="Training curve")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    return fig


def _pass_rate(rows: list[RolloutRow]) -> float:
    scored = _counted(rows)
    return sum(r.reward >= 1.0 for r in scored) / len(scored) if scored else float("nan")


def variant_heatmap(data: RunData) -> Figure:
    """Train runs: pass rate per task variant (rows) per step (columns); blank = not sampled."""
    cells: dict[tuple[str, int], list[RolloutRow]] = defaultdict(list)
    for r in data.rollouts:
        kind, step = r.phase
        if kind == "train":
            cells[(r.variant, step)].append(r)
    if not cells:
        raise NoData("no training rollouts in rollouts.jsonl")
    variants = sorted({v for v, _ in cells}, key=_variant_key)
    steps = sorted({s for _, s in cells})
    grid = np.full((len(variants), len(steps)), np.nan)
    for (v, s), rows in cells.items():
        grid[variants.index(v), steps.index(s)] = _pass_rate(rows)
    fig, ax = _fig(max(5.0, 1.2 + 0.35 * len(steps)), max(3.0, 1.0 + 0.18 * len(variants)))
    image = ax.imshow(np.ma.masked_invalid(grid), aspect="auto", cmap="viridis", vmin=0, vmax=1,
                      interpolation="nearest")
    ax.set_facecolor("#eeeeee")
    ax.set_xticks(range(len(steps)), [str(s + 1) for s in steps])
    ax.set_yticks(range(len(variants)), variants, fontsize=7 if len(variants) > 20 else 9)
    ax.set(xlabel="step", ylabel="variant", title="Pass rate per variant per step (grey: not sampled)")
    fig.colorbar(image, ax=ax, label="pass rate")
    fig.tight_layout()
    return fig


def variant_bars(data: RunData) -> Figure:
    """Eval runs: pass rate per task variant."""
    by: dict[str, list[RolloutRow]] = defaultdict(list)
    for r in data.rollouts:
        if r.phase[0] == "eval":
            by[r.variant].append(r)
    rates = {v: _pass_rate(rows) for v, rows in by.items()}
    if not rates and data.summary and isinstance(data.summary.get("per_task"), dict):
        rates = {str(t.get("variant", k)): float(t.get("pass_rate", 0.0))
                 for k, t in data.summary["per_task"].items() if isinstance(t, dict)}
    if not rates:
        raise NoData("no evaluated rollouts (rollouts.jsonl) and no per-task table (summary.json)")
    variants = sorted(rates, key=_variant_key)
    fig, ax = _fig(max(5.0, 1.0 + 0.3 * len(variants)), 3.6)
    ax.bar(range(len(variants)), [0 if np.isnan(rates[v]) else rates[v] for v in variants], color="#1f77b4")
    ax.set_xticks(range(len(variants)), variants, rotation=90 if len(variants) > 16 else 0, fontsize=8)
    ax.set(xlabel="variant", ylabel="pass rate", ylim=(0, 1), title="Pass rate per variant")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def group_spread(rows: list[RolloutRow]) -> dict[str, int]:
    """Groups of these rollouts that are mixed, all pass, all fail (infra errors left out)."""
    groups: dict[str, list[float]] = defaultdict(list)
    for r in _counted(rows):
        groups[r.group_id].append(r.reward)
    out = {"mixed": 0, "all pass": 0, "all fail": 0}
    for rewards in groups.values():
        passes = sum(x >= 1.0 for x in rewards)
        out["mixed" if 0 < passes < len(rewards) else "all pass" if passes else "all fail"] += 1
    return out


def _spread_table(data: RunData) -> dict[str, dict[str, float]]:
    by: dict[str, list[RolloutRow]] = defaultdict(list)
    want = "train" if data.kind == "train" else "eval"
    for r in sorted(data.rollouts, key=lambda r: r.phase):
        kind, step = r.phase
        if kind == want:
            by[f"step {step + 1}" if kind == "train" else "eval"].append(r)
    table = {}
    for label, rows in by.items():
        counts = group_spread(rows)
        total = sum(counts.values()) or 1
        table[label] = {k: v / total for k, v in counts.items()}
    if not table:  # an older or rollout-less train run: the Learner's own fractions
        for m in data.metrics:
            if m["step"] >= 0 and "frac_groups_mixed" in m:
                table[f"step {m['step'] + 1}"] = {"mixed": m["frac_groups_mixed"],
                                                  "all pass": m.get("frac_groups_all_pass", 0.0),
                                                  "all fail": m.get("frac_groups_all_fail", 0.0)}
    return table


def reward_spread(data: RunData) -> Figure:
    """Fraction of groups per step whose rewards are mixed (signal), all pass or all fail."""
    table = _spread_table(data)
    if not table:
        raise NoData("no groups to count (no rollouts and no per-step group fractions)")
    labels = list(table)
    fig, ax = _fig(max(5.0, 1.5 + 0.45 * len(labels)), 3.6)
    bottom = np.zeros(len(labels))
    for name, color in SPREAD_COLORS.items():
        values = np.array([table[label][name] for label in labels])
        ax.bar(labels, values, bottom=bottom, color=color, label=name)
        bottom += values
    ax.set(ylabel="fraction of groups", ylim=(0, 1), title="Reward spread per group")
    ax.tick_params(axis="x", rotation=90 if len(labels) > 12 else 0)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    return fig


def _cdf(ax: Any, values: list[float], label: str, color: str | None = None) -> None:
    xs = np.sort(np.maximum(np.asarray(values, dtype=float), 1e-4))
    ax.step(xs, np.arange(1, len(xs) + 1) / len(xs), where="post", label=label, color=color)


def timing_cdfs(data: RunData) -> Figure:
    """CDFs of time to usable (claim + seed) and of each rollout phase, log seconds."""
    rows = [r for r in data.rollouts if r.total > 0]
    if not rows:
        raise NoData("no rollout timings (rollouts.jsonl missing or empty)")
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), dpi=100)
    _cdf(left, [r.usable for r in rows], "claim + seed", "#9467bd")
    left.set(title="Time to usable sandbox", xlabel="seconds (log)", ylabel="fraction of rollouts")
    for phase, color in {**PHASE_COLORS, "total": "black"}.items():
        _cdf(right, [getattr(r, phase) for r in rows], phase, color)
    right.set(title="Rollout phase timings", xlabel="seconds (log)")
    for ax in (left, right):
        _log_seconds_axis(ax)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    right.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # outside: it hid two curves
    fig.tight_layout()
    return fig


def _seconds_label(value: float, _position: object = None) -> str:
    """Plain seconds for a log axis tick: 0.002, 0.05, 1, 20, 300 (no 2x10^-3 stacks)."""
    return f"{value:g}"


def _log_seconds_axis(ax: Any) -> None:
    """A log seconds axis labelled at 1-2-5 steps in plain numbers, minor ticks unlabelled, so
    labels never run into each other however narrow the range."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_xscale("log")
    lo, hi = ax.get_xlim()
    subs = (1.0, 2.0, 5.0) if hi / max(lo, 1e-12) < 1e3 else (1.0,)
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.xaxis.set_major_formatter(FuncFormatter(_seconds_label))
    ax.xaxis.set_minor_formatter(NullFormatter())


def timeline(data: RunData) -> Figure:
    """Each rollout a row from its start: claim, seed, agent, grade (at most TIMELINE_MAX rows)."""
    rows = sorted((r for r in data.rollouts if r.started_at > 0), key=lambda r: r.started_at)
    if not rows:
        raise NoData("rollouts carry no start times (an older run folder, or no rollouts)")
    if len(rows) > TIMELINE_MAX:
        rows = [rows[int(i)] for i in np.linspace(0, len(rows) - 1, TIMELINE_MAX)]
    t0 = rows[0].started_at
    fig, ax = _fig(10, max(3.0, min(9.0, 1.5 + 0.03 * len(rows))))
    left = np.array([r.started_at - t0 for r in rows])
    ys = np.arange(len(rows))
    for phase, color in PHASE_COLORS.items():
        widths = np.array([getattr(r, phase) for r in rows])
        ax.barh(ys, widths, left=left, height=1.0, color=color, label=phase, linewidth=0)
        left = left + widths
    ax.invert_yaxis()
    ax.set(xlabel="seconds since the first rollout started", ylabel="rollout (by start time)",
           title=f"Rollout timeline by phase ({len(rows)} rollouts shown)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    return fig


FigureFn = Callable[[RunData], Figure]


def figures_for(data: RunData) -> list[tuple[str, str, FigureFn]]:
    """(file stem, section title, function) in page order for this kind of run."""
    variants: FigureFn = variant_heatmap if data.kind == "train" else variant_bars
    return [("curve", "Training curve", training_curve),
            ("variants", "Pass rate per task variant", variants),
            ("spread", "Reward spread per group", reward_spread),
            ("timings", "Time to usable and phase timings", timing_cdfs),
            ("timeline", "Timeline of rollouts by phase", timeline)]
