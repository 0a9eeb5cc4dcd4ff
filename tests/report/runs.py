"""Run folders built from the real dataclasses and writers (Rollout.to_json, summarize,
train's metrics line): an eval run, a train run, a half-written train run."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rl_daytona.learn.learner import StepReport
from rl_daytona.summary import summarize
from rl_daytona.step_record import metrics_line
from rl_daytona.types import PhaseTimings, PoolStats, Rollout, RolloutStatus, Trajectory

T0 = 1_800_000_000.0


def rollout(group_id: str, variant: str, attempt: int, passed: bool, start: float,
            status: RolloutStatus = RolloutStatus.OK) -> Rollout:
    timings = PhaseTimings(claim=0.01 + 0.01 * attempt, seed=0.05, agent=2.0 + attempt, grade=0.5, total=2.56 + attempt)
    return Rollout(rollout_id=f"{group_id}/{attempt}", task_id=f"calc[variant={variant}]", variant=variant,
                   group_id=group_id, attempt=attempt, reward=1.0 if passed and status is RolloutStatus.OK else 0.0,
                   status=status, timings=timings, trajectory=Trajectory(token_ids=(1, 2), logprobs=(0.0, -0.5),
                                                                          loss_mask=(0, 1), turns=1),
                   sandbox_id=f"sb-{attempt}", started_at=start)


def write_rollouts(path: Path, rollouts: list[Rollout]) -> None:
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in rollouts))


def eval_rollouts() -> list[Rollout]:
    """Variants 0..3, group 2: variant 0 all pass, 1 mixed, 2 and 3 all fail (3 with an infra error)."""
    plan = {"0": (True, True), "1": (True, False), "2": (False, False), "3": (False, False)}
    out = []
    for i, (variant, results) in enumerate(plan.items()):
        for a, passed in enumerate(results):
            status = RolloutStatus.INFRA_ERROR if (variant, a) == ("3", 1) else RolloutStatus.OK
            out.append(rollout(f"eval/calc[variant={variant}]", variant, a, passed, T0 + i + a, status))
    return out


def make_eval_run(rundir: Path) -> Path:
    rundir.mkdir(parents=True, exist_ok=True)
    rollouts = eval_rollouts()
    write_rollouts(rundir / "rollouts.jsonl", rollouts)
    summary = summarize(rollouts, run_id="eval-test", taskset="calc", split="heldout", group=2, policy="builtin",
                        backend="local", wall_seconds=4.0, rollouts_per_second=2.0,
                        pool=asdict(PoolStats(created=8, forked=3, deleted=8)),
                        sandbox_backend={"kind": "daytona", "api_url": "https://sim.test/api", "snapshot": "rl-abc123",
                                         "transport": "ssh", "warm_pool": "wp-7"})
    (rundir / "summary.json").write_text(json.dumps(summary))
    return rundir


def _report(step: int, datums: int, chunks: int, bytes_sent: int, mixed: int, all_pass: int, all_fail: int) -> StepReport:
    counts = {"groups_complete": mixed + all_pass + all_fail, "groups_mixed": mixed, "groups_all_pass": all_pass,
              "groups_all_fail": all_fail}
    return StepReport(step=step, trained=True, skipped_reason="", version=step + 1, datums=datums, chunks=chunks,
                      bytes_sent=bytes_sent, chunk_bytes=(bytes_sent,), loss=1.0, train_seconds=0.5, counts=counts,
                      rollouts_ok=6, train_pass_rate=0.5, mean_turns=1.0, rollout_bytes=((1, 100),))


def train_rollouts() -> list[Rollout]:
    """Two steps of three groups of 2 on variants 4, 5, 6 (step 1) and 4, 7, 7 (step 2), and two evals."""
    out = []
    steps = {0: (("4", (True, False)), ("5", (True, True)), ("6", (False, False))),
             1: (("4", (True, True)), ("7", (True, False)), ("7", (False, False)))}
    for step, groups in steps.items():
        for slot, (variant, results) in enumerate(groups):
            gid = f"train{step}/{slot}/calc[variant={variant}]"
            out += [rollout(gid, variant, a, p, T0 + 10 * step + a) for a, p in enumerate(results)]
    for after in (0, 2):
        out += [rollout(f"eval{after}/calc[variant=24]", "24", a, after == 2, T0 + 30 + after + a) for a in range(2)]
    return out


def metrics_lines() -> list[dict[str, Any]]:
    first = {"step": -1, "heldout_pass_rate": 0.0, "policy_version": 0, "train_pass_rate": None}
    one = metrics_line(_report(0, 2, 1, 1000, 1, 1, 1), 3.0, 4.0, None, None, None)
    two = metrics_line(_report(1, 2, 2, 3000, 1, 1, 1), 3.0, 4.0, {"pass_rate": 1.0}, None, None)
    return [first, one, two]


def make_train_run(rundir: Path) -> Path:
    rundir.mkdir(parents=True, exist_ok=True)
    write_rollouts(rundir / "rollouts.jsonl", train_rollouts())
    (rundir / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics_lines()))
    summary = {"run_id": "train-test", "taskset": "calc", "steps": 2, "tasks_per_step": 3, "group": 2,
               "heldout_before": 0.0, "heldout_after": 1.0, "wall_seconds": 40.0,
               "pool": asdict(PoolStats(created=5, forked=7, deleted=12)),
               "evals": {"-1": {"pass_rate": 0.0}, "1": {"pass_rate": 1.0}}}
    (rundir / "summary.json").write_text(json.dumps(summary))
    return rundir


def make_half_run(rundir: Path) -> Path:
    """A train run stopped mid-write: no summary.json, no rollouts.jsonl, a truncated metrics line."""
    rundir.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(m) for m in metrics_lines()]
    (rundir / "metrics.jsonl").write_text(lines[0] + "\n" + lines[1] + "\n" + lines[2][: len(lines[2]) // 2])
    return rundir
