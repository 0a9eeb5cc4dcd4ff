"""What a train step leaves behind: its `metrics.jsonl` line, its line on the terminal, the curve.

Invariant: pure functions of the step's report (and held-out result): the terminal line says
the same figures as the metrics line, as counts a reader can check (`27/64`), and names the
held-out rate only on steps where it was evaluated.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from rl_daytona.learn.learner import StepReport


def metrics_line(report: StepReport, rollout_seconds: float, step_seconds: float,
                 heldout: dict[str, Any] | None, overlap: dict[str, float] | None,
                 checkpoint: str | None) -> dict[str, Any]:
    """One metrics.jsonl line. `step_seconds` runs from the start of this step's rollouts (or,
    overlapped, from the end of the previous step) to the end of its training (and eval);
    `overlap`, when step t's training ran beside step t+1's rollouts, is that window's length
    and the two phases inside it, so `window / max(phases)` is the overlap figure."""
    counts = report.counts
    complete = max(counts.get("groups_complete", 0), 1)
    return {
        "step": report.step, "train_pass_rate": round(report.train_pass_rate, 4),
        "heldout_pass_rate": None if heldout is None else round(heldout["pass_rate"], 4),
        "frac_groups_mixed": round(counts.get("groups_mixed", 0) / complete, 4),
        "frac_groups_all_pass": round(counts.get("groups_all_pass", 0) / complete, 4),
        "frac_groups_all_fail": round(counts.get("groups_all_fail", 0) / complete, 4),
        "datums": report.datums, "chunks": report.chunks, "bytes_sent": report.bytes_sent,
        "rollout_seconds": round(rollout_seconds, 3), "train_seconds": round(report.train_seconds, 3),
        "step_seconds": round(step_seconds, 3), "policy_version": report.version,
        "trained": report.trained, "skipped_reason": report.skipped_reason, "loss": report.loss,
        "mean_turns": round(report.mean_turns, 3), "overlapped": overlap is not None,
        "overlap": overlap,
        "counts": counts,
        "bytes_per_rollout_by_turns": bytes_by_turns(report.rollout_bytes),
        "training_calls": asdict(report.calls), "checkpoint": checkpoint,
    }


def bytes_by_turns(pairs: tuple[tuple[int, int], ...]) -> dict[str, float]:
    by: dict[int, list[int]] = {}
    for turns, nbytes in pairs:
        by.setdefault(turns, []).append(nbytes)
    return {str(t): round(sum(v) / len(v), 1) for t, v in sorted(by.items())}


def _rate(passed: int, scored: int) -> str:
    return f"{passed / scored:.1%} ({passed}/{scored})" if scored else "- (0/0)"


def step_line(report: StepReport, steps: int, heldout: dict[str, Any] | None, seconds: float) -> str:
    """`step 3/10  train 42.2% (27/64)  mixed groups 5/8  held-out 35.9% (23/64)  31 s`."""
    scored = report.rollouts_ok
    line = (f"step {report.step + 1}/{steps}  train {_rate(round(report.train_pass_rate * scored), scored)}  "
            f"mixed groups {report.counts.get('groups_mixed', 0)}/{report.counts.get('groups_complete', 0)}")
    if heldout is not None:
        held = heldout["rollouts"] - heldout.get("infra_errors", 0)
        line += f"  held-out {_rate(round(heldout['pass_rate'] * held), held)}"
    return f"{line}  {seconds:.0f} s"


def plot_curve(metrics: list[dict[str, Any]], path: Path, title: str = "") -> None:
    """curve.png: held-out pass rate at each evaluation, train pass rate per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=120)
    steps = [m["step"] for m in metrics if m.get("train_pass_rate") is not None and m["step"] >= 0]
    ax.plot([s + 1 for s in steps], [m["train_pass_rate"] for m in metrics if m["step"] >= 0],
            marker=".", label="train (rollouts of the step)")
    held = [(m["step"] + 1, m["heldout_pass_rate"]) for m in metrics if m.get("heldout_pass_rate") is not None]
    if held:
        ax.plot([s for s, _ in held], [h for _, h in held], marker="o", label="held-out (group 8)")
    ax.set_xlabel("after step (0 = untrained)")
    ax.set_ylabel("pass rate")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    if title:
        ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
