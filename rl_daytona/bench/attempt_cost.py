"""What one attempt costs: sandbox commands, pytest runs, sandbox CPU-s, tokens, bytes per datum.

Invariant: a pure function of finished rollouts (and the run's measured sandbox CPU seconds).
Every attempt that reached grading is charged the grader's own sandbox command and pytest run
(`GRADER_COMMANDS`, `GRADER_PYTEST_RUNS`); the agent's commands are its tool calls, a pytest
run is a command that names pytest, a quick test run one that runs the policy's plain-Python
test caller (`vocab.QUICK_TEST`, about a fifth of pytest's CPU); tokens are the trajectory's whole token sequence (prompt,
observations and completions, stored once); bytes per datum are `Datum.nbytes`, the wire JSON
a training call carries for the attempt (advantage 1.0 stands in for any value).
"""

from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np

from rl_daytona.types import Rollout, RolloutStatus

GRADER_COMMANDS = 1
GRADER_PYTEST_RUNS = 1
QUICK_MARK = "spec_from_file_location"  # a piece of `vocab.QUICK_TEST` no other command holds


def _commands(rollout: Rollout) -> list[str]:
    out = []
    for message in rollout.trajectory.messages:
        for call in message.get("tool_calls") or ():
            try:
                out.append(str(json.loads(call["function"]["arguments"]).get("command", "")))
            except (KeyError, TypeError, ValueError, AttributeError):
                out.append("")
    return out


def _datum_bytes(rollout: Rollout) -> int | None:
    from rl_daytona.learn.datum import Datum

    if not rollout.trajectory.token_ids:
        return None
    return Datum.from_rollout(rollout, 1.0).nbytes


def attempt_costs(rollouts: Sequence[Rollout], sandbox_cpu_seconds: float | None = None) -> dict[str, Any]:
    """Means per attempt over the rollouts that were graded (infra errors left out)."""
    graded = [r for r in rollouts if r.status is not RolloutStatus.INFRA_ERROR]
    if not graded:
        return {"attempts": 0}
    commands = [_commands(r) for r in graded]
    sizes = [b for b in (_datum_bytes(r) for r in graded) if b is not None]
    figures: dict[str, Any] = {
        "attempts": len(graded),
        "turns": _mean([r.trajectory.turns for r in graded]),
        "sandbox_commands": _mean([len(c) + GRADER_COMMANDS for c in commands]),
        "pytest_runs": _mean([sum("pytest" in c for c in cs) + GRADER_PYTEST_RUNS for cs in commands]),
        "quick_test_runs": _mean([sum(QUICK_MARK in c for c in cs) for cs in commands]),
        "tokens": _mean([len(r.trajectory.token_ids) for r in graded]),
        "sampled_tokens": _mean([r.trajectory.sampled_tokens for r in graded]),
        "bytes_per_datum": _mean(sizes) if sizes else None,
        "pass_rate": _mean([float(r.reward >= 1.0) for r in graded]),
    }
    if sandbox_cpu_seconds is not None:
        figures["sandbox_cpu_seconds"] = round(sandbox_cpu_seconds / len(rollouts), 3)
    return figures


def _mean(values: Sequence[float]) -> float:
    return round(float(np.mean(values)), 3) if values else 0.0
