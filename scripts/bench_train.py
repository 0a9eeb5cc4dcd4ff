"""Benchmark: does training really teach the built-in policy? (a script, not a test)

    .venv/bin/python scripts/bench_train.py [--steps 10] [--tasks-per-step 16] [--group 8]
        [--lr 0.2] [--control-lr 0] [--off-policy 0] [--out runs/bench-train]
    .venv/bin/python scripts/bench_train.py --replot trained=RUNDIR control=RUNDIR --out DIR

Runs `rl-daytona train` on calc (local backend) twice in one process: the real run and a
control with learning rate 0 (same seeds, so the same task draws), then prints both held-out
curves, the run times, the step time against max(rollout phase, train phase) (overlap figure
for `--off-policy 1`), and datum bytes per rollout by turn count (token-in/token-out: it should
grow linearly with turns). Writes `<out>/bench.json` and `<out>/curves.png`.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from rl_daytona.train import TrainConfig, run_train
from rl_daytona.types import Settings


def _metrics(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _overlap(metrics: list[dict[str, Any]]) -> dict[str, float]:
    windows = [m["overlap"] for m in metrics if m["step"] >= 0 and m.get("overlap")]
    if not windows:
        return {}
    ratios = [w["window_seconds"] / max(w["rollout_seconds"], w["train_seconds"]) for w in windows]
    return {"overlapped_steps": len(windows), "mean_step_over_max_phase": round(sum(ratios) / len(ratios), 3),
            "worst_step_over_max_phase": round(max(ratios), 3)}


def _bytes_by_turns(metrics: list[dict[str, Any]]) -> dict[str, float]:
    pooled: dict[int, list[float]] = {}
    for m in metrics:
        for turns, nbytes in (m.get("bytes_per_rollout_by_turns") or {}).items():
            pooled.setdefault(int(turns), []).append(nbytes)
    return {str(t): round(sum(v) / len(v)) for t, v in sorted(pooled.items())}


def _plot(runs: dict[str, list[dict[str, Any]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=120)
    for label, metrics in runs.items():
        held = [(m["step"] + 1, m["heldout_pass_rate"]) for m in metrics if m.get("heldout_pass_rate") is not None]
        ax.plot([s for s, _ in held], [h for _, h in held], marker="o", label=f"{label} held-out")
        train = [(m["step"] + 1, m["train_pass_rate"]) for m in metrics if m["step"] >= 0]
        ax.plot([s for s, _ in train], [t for _, t in train], linestyle=":", alpha=0.7, label=f"{label} train")
    ax.set_xlabel("after step")
    ax.set_ylabel("pass rate")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--tasks-per-step", type=int, default=16)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.2)
    parser.add_argument("--control-lr", type=float, default=0.0, help="learning rate of the control run (< 0: skip it)")
    parser.add_argument("--off-policy", type=int, default=0)
    parser.add_argument("--max-turns", type=int, default=Settings().max_turns)
    parser.add_argument("--eval-every", type=int, default=0)
    parser.add_argument("--max-concurrent", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("runs/bench-train"))
    parser.add_argument("--replot", nargs="+", metavar="LABEL=RUNDIR", default=None,
                        help="run nothing: draw the curves of finished runs (their metrics.jsonl) into OUT/curves.png")
    args = parser.parse_args()
    if args.replot:
        pairs = [item.split("=", 1) for item in args.replot]
        if any(len(p) != 2 for p in pairs):
            parser.error("--replot takes LABEL=RUNDIR pairs")
        args.out.mkdir(parents=True, exist_ok=True)
        _plot({label: _metrics(Path(run) / "metrics.jsonl") for label, run in pairs}, args.out / "curves.png")
        print(args.out / "curves.png")
        return
    console = Console(stderr=True)
    runs: dict[str, list[dict[str, Any]]] = {}
    figures: dict[str, Any] = {"config": vars(args) | {"out": str(args.out)}}
    plan = [("trained", args.lr)] + ([("control", args.control_lr)] if args.control_lr >= 0 else [])
    for label, lr in plan:
        out = args.out / label
        started = time.monotonic()
        summary = run_train(TrainConfig(out=out, steps=args.steps, tasks_per_step=args.tasks_per_step,
                                        group=args.group, lr=lr, off_policy=args.off_policy, seed=args.seed,
                                        eval_every=args.eval_every, max_concurrent=args.max_concurrent,
                                        settings=Settings(max_turns=args.max_turns)), console=console)
        metrics = _metrics(out / "metrics.jsonl")
        runs[label] = metrics
        figures[label] = {
            "lr": lr, "heldout_before": summary["heldout_before"], "heldout_after": summary["heldout_after"],
            "wall_seconds": round(time.monotonic() - started, 1),
            "heldout_curve": [(m["step"] + 1, m["heldout_pass_rate"]) for m in metrics
                              if m.get("heldout_pass_rate") is not None],
            "train_curve": [(m["step"] + 1, m["train_pass_rate"]) for m in metrics if m["step"] >= 0],
            "mean_turns": [m.get("mean_turns") for m in metrics if m["step"] >= 0],
            "step_seconds": [m["step_seconds"] for m in metrics if m["step"] >= 0],
            "rollout_seconds": [m["rollout_seconds"] for m in metrics if m["step"] >= 0],
            "train_seconds": [m["train_seconds"] for m in metrics if m["step"] >= 0],
            "overlap": _overlap(metrics),
            "bytes_per_rollout_by_turns": _bytes_by_turns(metrics),
        }
    _plot(runs, args.out / "curves.png")
    (args.out / "bench.json").write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
