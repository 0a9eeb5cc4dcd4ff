"""Turning a list of rollouts into `summary.json` and the pass-rate table.

Invariant: infrastructure failures are counted but never enter a pass rate; every other
attempt (ok, agent_error, timeout) counts, so a broken model cannot look good by failing.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Iterable

import numpy as np
from rich.markup import escape
from rich.table import Table

from rl_daytona.types import Rollout, RolloutStatus

PHASES = ("claim", "seed", "agent", "grade", "total")


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p95": 0.0, "max": 0.0}
    arr = np.asarray(values)
    return {"p50": float(np.percentile(arr, 50)), "p95": float(np.percentile(arr, 95)),
            "max": float(arr.max())}


def counted(rollout: Rollout) -> bool:
    """Does this attempt count towards a pass rate?"""
    return rollout.status is not RolloutStatus.INFRA_ERROR


def per_task(rollouts: Iterable[Rollout]) -> dict[str, dict[str, Any]]:
    rollouts_by_task: dict[str, list[Rollout]] = defaultdict(list)
    for r in rollouts:
        rollouts_by_task[r.task_id].append(r)
    table = {}
    for task_id in sorted(rollouts_by_task):
        attempts = sorted(rollouts_by_task[task_id], key=lambda r: r.attempt)
        rewards = [r.reward for r in attempts if counted(r)]
        passes = sum(1 for x in rewards if x >= 1.0)
        table[task_id] = {
            "variant": attempts[0].variant, "passes": passes, "attempts": len(rewards),
            "infra_errors": len(attempts) - len(rewards),
            "pass_rate": passes / len(rewards) if rewards else 0.0,
            "reward_std": float(np.std(rewards)) if rewards else 0.0,
            "mixed": 0 < passes < len(rewards), "rewards": rewards,
        }
    return table


def summarize(rollouts: list[Rollout], **extra: Any) -> dict[str, Any]:
    scored = [r for r in rollouts if counted(r)]
    passes = sum(1 for r in scored if r.reward >= 1.0)
    tasks = per_task(rollouts)
    return {
        "pass_rate": passes / len(scored) if scored else 0.0,
        "passes": passes,
        "rollouts": len(rollouts),
        "scored_rollouts": len(scored),
        "counts_by_status": dict(Counter(r.status.value for r in rollouts)),
        "groups": {"total": len(tasks), "mixed": sum(t["mixed"] for t in tasks.values()),
                   "all_pass": sum(t["attempts"] > 0 and t["passes"] == t["attempts"] for t in tasks.values()),
                   "all_fail": sum(t["passes"] == 0 for t in tasks.values())},
        "per_task": tasks,
        "timings": {p: _percentiles([getattr(r.timings, p) for r in rollouts]) for p in PHASES},
        **extra,
    }


def _glyphs(rewards: list[float]) -> str:
    return "".join("[green]✓[/]" if x >= 1.0 else "[red]✗[/]" for x in rewards)


def render_table(summary: dict[str, Any], title: str) -> Table:
    table = Table(title=title)
    for name, justify in (("task", "left"), ("passes/attempts", "right"), ("pass rate", "right"),
                          ("spread (std)", "right"), ("attempts", "left")):
        table.add_column(name, justify=justify, no_wrap=name == "task")  # type: ignore[arg-type]
    for task_id, row in summary["per_task"].items():
        table.add_row(escape(task_id), f"{row['passes']}/{row['attempts']}", f"{row['pass_rate']:.0%}",
                      f"{row['reward_std']:.2f}", _glyphs(row["rewards"]))
    groups = summary["groups"]
    table.caption = (f"pass rate {summary['pass_rate']:.1%} over {summary['scored_rollouts']} attempts; "
                     f"groups mixed {groups['mixed']}, all pass {groups['all_pass']}, "
                     f"all fail {groups['all_fail']}; statuses {summary['counts_by_status']}")
    return table
