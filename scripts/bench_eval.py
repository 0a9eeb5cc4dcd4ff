"""Benchmark: 128 rollouts of the built-in policy on calc, local backend.

Prints rollouts/s and the ratio of wall time to the CPU floor (total CPU seconds of the
sandbox processes divided by the cores): 1.0 means the machine did nothing but sandbox work.

    .venv/bin/python scripts/bench_eval.py [--rollouts 128] [--max-concurrent 64] [--out runs/bench-eval]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console

from rl_daytona.eval import EvalConfig, run_eval
from rl_daytona.tasks import get_taskset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=128)
    parser.add_argument("--max-concurrent", type=int, default=64)
    parser.add_argument("--out", type=Path, default=Path("runs/bench-eval"))
    args = parser.parse_args()
    tasks = len(get_taskset("calc").split("all"))
    group = max(1, args.rollouts // tasks)
    summary = run_eval(EvalConfig(out=args.out, taskset="calc", split="all", group=group,
                                  max_concurrent=args.max_concurrent), console=Console(quiet=True))
    figures = {
        "rollouts": summary["rollouts"],
        "wall_seconds": round(summary["wall_seconds"], 2),
        "rollouts_per_second": round(summary["rollouts_per_second"], 2),
        "sandbox_cpu_seconds": round(summary["sandbox_cpu_seconds"], 2),
        "cores": summary["cores"],
        "wall_over_cpu_floor": round(summary["wall_over_cpu_floor"] or 0.0, 3),
        "pass_rate": round(summary["pass_rate"], 3),
        "statuses": summary["counts_by_status"],
    }
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
