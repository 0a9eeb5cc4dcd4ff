"""`rl-daytona train`: rollouts -> Learner -> training service, step after step.

    for each step: sample tasks (train split) -> dispatch groups to RolloutActors
                   -> each finished attempt goes to the Learner through Ray
                   -> Learner: complete groups -> advantages -> chunks -> forward_backward, optim_step
    held-out eval (group `eval_group`) before the first step, every `eval_every`, after the last.

The run's parts are composed once by `rl_daytona.run`; the step mechanics are in
`rl_daytona.train_steps`, what a step records in `rl_daytona.step_record`. Each step prints one
line as it finishes (`step 3/10  train 42.2% (27/64)  mixed groups 5/8  ...  31 s`); the run ends
with the held-out pass rate before and after, and its wall time against its CPU floor
(`rl_daytona.cpu_floor`: every rollout's sandbox CPU, train steps and evals alike).

Invariant: training and sampling go through the `tinker` SDK (hosted Tinker, or the local
Tinker-compatible service serving the built-in model: `tinker_run`); after each `optim_step`
the step's sampler weights are handed to the agents' endpoint, so the next step samples the
new weights; every rollout carries the version that sampled it. With
`off_policy = k > 0` the rollouts of step t+1 run while step t trains, and the Learner drops
rollouts more than k versions old. `metrics.jsonl` gets one line per step as it finishes,
after the step's training state is saved (a tinker:// checkpoint the line names), so
`--resume RUNDIR` continues at the step after the last line (see `learn.run_state`). Each
step's tasks are drawn from `(seed, step)`, so a continued run samples what one uninterrupted
would have. Training calls are retried under `retry` (a RetryPolicy); too many failures in a
row stop the run with one line, everything finished until then kept.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from rich.console import Console

from rl_daytona.backends import DaytonaOptions
from rl_daytona.cpu_floor import cpu_floor
from rl_daytona.learn.clients import AdamParams, TrainingCallError
from rl_daytona.learn.learner import LearnerConfig
from rl_daytona.learn.retry import RetryPolicy
from rl_daytona.learn.run_state import INTERRUPTED, RunState, prepare_to_continue, starting_point
from rl_daytona.pool import PoolConfig
from rl_daytona.progress import RunProgress
from rl_daytona.run import PolicySource, Run, backend_summary, open_run, start_actors
from rl_daytona.serving.sampler import use_weights
from rl_daytona.step_record import metrics_line, plot_curve, step_line
from rl_daytona.tinker_run import TinkerTarget
from rl_daytona.train_steps import Steps, TrainingStepFailed
from rl_daytona.types import SandboxLimits, Settings


@dataclass(frozen=True)
class TrainConfig:
    out: Path
    taskset: str = "calc"
    steps: int = 10
    tasks_per_step: int = 16
    group: int = 8
    eval_every: int = 0  # 0: only before the first and after the last step
    eval_group: int = 8
    eval_split: str = "heldout"
    train_split: str = "train"
    lr: float = 0.2
    loss_fn: str = "importance_sampling"
    chunk_bytes: int = 5 * 1024 * 1024
    normalize_std: bool = False
    off_policy: int = 0
    seed: int = 0
    max_concurrent: int = 64
    rollout_actors: int = 2
    rollout_actors_per_node: int = 0  # > 0: this many RolloutActors on every node instead
    rollout_concurrency: int = 0  # rollouts in flight per RolloutActor; 0: max_concurrent / actors
    backend: str = "local"
    isolation: str = "bwrap"
    settings: Settings = field(default_factory=Settings)
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    pool: PoolConfig = field(default_factory=PoolConfig)
    daytona: DaytonaOptions = field(default_factory=DaytonaOptions)
    run_id: str = ""
    # where to train: Tinker through its SDK (no URL: the local Tinker-compatible service, built-in model)
    trainer: TinkerTarget = field(default_factory=TinkerTarget)
    # () -> TrainingClient, built inside the Learner; None: the trainer's
    training_client: Callable[[], Any] | None = None
    # () -> a context manager whose value has `.url` (an OpenAI-compatible endpoint the agents
    # sample from); None: the trainer's (a SamplingClient behind it). Each step's sampler
    # weights path is posted to `<url>/sampler`.
    policy_server: Callable[[], Any] | None = None
    # a previous run's folder: the same as `out` continues that run at its next step; another
    # folder, or a tinker:// checkpoint, starts this run from that state (weights, Adam moments)
    resume: Path | str | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)  # for training calls

    def __post_init__(self) -> None:
        for name in ("steps", "tasks_per_step", "group", "eval_group", "max_concurrent", "rollout_actors"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.group < 2:
            raise ValueError("--group must be at least 2: group-relative advantages need two attempts")
        if self.eval_every < 0 or self.off_policy < 0:
            raise ValueError("--eval-every and --off-policy must be >= 0")
        if not self.lr >= 0 or self.lr == float("inf"):  # NaN fails `>= 0`
            raise ValueError(f"--lr must be a number >= 0, got {self.lr}")
        if self.loss_fn not in ("importance_sampling", "ppo"):
            raise ValueError(f"--loss must be importance_sampling or ppo, got {self.loss_fn!r}")


async def _train(cfg: TrainConfig, run: Run, start: RunState) -> dict[str, Any]:
    import ray

    from rl_daytona import runtime

    async with start_actors(run) as actors:
        learner = runtime.start_learner(run.training_client, _learner_config(cfg), start.version)
        try:
            if start.checkpoint:  # the sampler starts from the checkpoint's weights too
                published = await learner.publish.remote(f"resume-{start.version:06d}")
                problem = await use_weights(run.settings.policy_url, published, start.version) if published else ""
                if problem:
                    raise ValueError(f"--resume {start.checkpoint}: {problem}")
            started = time.monotonic()
            with RunProgress(run.console) as progress:
                steps = Steps(cfg, run, actors.fleet, learner, progress, start)
                await _steps(cfg, steps, actors.pool, start)
            saved = await steps.save_policy()
            await learner.close.remote()
            actor_stats = await actors.fleet.stats()  # sandbox CPU of every rollout, steps and evals
        finally:
            ray.kill(learner, no_restart=True)
    floor = cpu_floor(time.monotonic() - started, actor_stats)
    return {"metrics": steps.metrics, "evals": steps.evals, "wall_seconds": floor.wall_seconds, "floor": floor,
            "policy_saved": saved, "pool": actors.pool_stats, "fleet": actors.fleet.counts,
            "actors": [asdict(a) for a in actor_stats], "sandbox_backend": backend_summary(run, actors)}


def _learner_config(cfg: TrainConfig) -> LearnerConfig:
    return LearnerConfig(loss_fn=cfg.loss_fn, adam=AdamParams(learning_rate=cfg.lr), chunk_bytes=cfg.chunk_bytes,
                         normalize_std=cfg.normalize_std, max_staleness=cfg.off_policy if cfg.off_policy else None,
                         retry=cfg.retry)


async def _steps(cfg: TrainConfig, steps: Steps, pool: Any, start: RunState) -> None:
    """The loop: the untrained eval, then per step rollouts -> train (beside the next step's
    rollouts with --off-policy) -> eval when due -> its metrics line and its terminal line."""
    if not start.initial_eval_done:
        first = await steps.evaluate(-1)
        steps.commit({"step": -1, "heldout_pass_rate": round(first["pass_rate"], 4),
                      "policy_version": start.version, "train_pass_rate": None, "checkpoint": steps.checkpoint})
    await pool.set_demand.remote(cfg.tasks_per_step * cfg.group)
    step_start = time.monotonic()
    rollout_seconds = await steps.collect(start.next_step)
    for step in range(start.next_step, cfg.steps):
        next_task, overlap = None, None
        window_start = time.monotonic()
        if cfg.off_policy and step + 1 < cfg.steps and not steps.wants_eval(step):
            next_task = asyncio.ensure_future(steps.collect(step + 1))
        try:
            report = await steps.train(step)
        except TrainingStepFailed:
            if next_task is not None:
                next_task.cancel()
            raise
        heldout = None
        if next_task is not None:
            next_rollout_seconds = await next_task
            # the overlapped window against the two phases that ran inside it
            overlap = {"window_seconds": round(time.monotonic() - window_start, 3),
                       "rollout_seconds": round(next_rollout_seconds, 3),
                       "train_seconds": round(report.train_seconds, 3)}
        if steps.wants_eval(step):
            heldout = await steps.evaluate(step)
        now = time.monotonic()
        steps.commit(metrics_line(report, rollout_seconds, now - step_start, heldout, overlap, steps.checkpoint))
        steps.progress.print(step_line(report, cfg.steps, heldout, now - step_start))
        if not report.trained:
            steps.progress.print(f"step {step + 1}: skipped ({report.skipped_reason})")
        if step + 1 < cfg.steps:
            step_start = now
            rollout_seconds = next_rollout_seconds if next_task is not None else await steps.collect(step + 1)


def run_train(cfg: TrainConfig, console: Console | None = None) -> dict[str, Any]:
    """Train end to end; writes metrics.jsonl, curve.png, rollouts.jsonl, summary.json, policy.*"""
    console = console or Console()
    start = starting_point(cfg.resume, cfg.out, cfg.steps)
    policy = PolicySource(tinker=cfg.trainer, train=True, resume=start.checkpoint, version=start.version,
                          server=cfg.policy_server, training_client=cfg.training_client)
    prepare = functools.partial(_prepare_folder, cfg, start, console)
    with open_run(cfg, console, policy, (cfg.train_split, cfg.eval_split), prepare) as run:
        try:
            result = asyncio.run(_train(cfg, run, start))
        except TrainingStepFailed as failed:
            raise _keep_what_was_done(cfg, failed, run) from None
    before = next((m["heldout_pass_rate"] for m in result["metrics"] if m["step"] == -1), None)
    after = result["evals"].get(cfg.steps - 1, {}).get("pass_rate")
    floor = result["floor"]
    plot_curve(result["metrics"], cfg.out / "curve.png", f"{cfg.taskset}: lr {cfg.lr}, {cfg.steps} steps")
    summary = {"run_id": run.run_id, "taskset": cfg.taskset, "steps": cfg.steps,
               "tasks_per_step": cfg.tasks_per_step, "group": cfg.group, "lr": cfg.lr, "loss_fn": cfg.loss_fn,
               "off_policy": cfg.off_policy, "heldout_before": before, "heldout_after": after,
               "wall_seconds": result["wall_seconds"], "sandbox_cpu_seconds": floor.sandbox_cpu_seconds,
               "cores": floor.cores, "wall_over_cpu_floor": floor.ratio, "actors": result["actors"],
               "policy_saved": result["policy_saved"], "backend": cfg.backend,
               "sandbox_backend": result["sandbox_backend"], "pool": result["pool"], "fleet": result["fleet"],
               "evals": {str(k): v for k, v in result["evals"].items()}}
    (cfg.out / "summary.json").write_text(json.dumps(summary, indent=2))
    console.print(f"held-out pass rate: {before or 0.0:.1%} before -> {after:.1%} after {cfg.steps} steps "
                  f"({result['wall_seconds']:.0f}s)")
    console.print(floor.line())
    from rl_daytona.report import report_after_run

    report_after_run(cfg.out, console)
    return summary


def _prepare_folder(cfg: TrainConfig, start: RunState, console: Console) -> None:
    """The run folder's training files: a continued run's interrupted step set aside, else a
    fresh metrics.jsonl; the checkpoints folder."""
    (cfg.out / "checkpoints").mkdir(parents=True, exist_ok=True)
    if start.continuing:
        moved = prepare_to_continue(cfg.out, start)
        console.print(f"continuing {cfg.out} at step {start.next_step + 1} of {cfg.steps} (policy version "
                      f"{start.version})" + (f"; {moved} rollouts of the interrupted step moved to {INTERRUPTED}"
                                             if moved else ""))
    else:
        (cfg.out / "metrics.jsonl").write_text("")
        if start.checkpoint:
            console.print(f"starting from {start.checkpoint} (policy version {start.version})")


def _keep_what_was_done(cfg: TrainConfig, failed: TrainingStepFailed, run: Run) -> TrainingCallError:
    """After a failed step: the state of the last completed step is already saved (its metrics
    line names the checkpoint); write the curve and a summary saying where the run stopped;
    return the one-line error."""
    done = failed.completed_steps
    checkpoint = next((m.get("checkpoint") for m in reversed(failed.metrics)), None)
    plot_curve(failed.metrics, cfg.out / "curve.png", f"{cfg.taskset}: lr {cfg.lr}, stopped at step {done + 1}")
    evals = failed.evals
    from rl_daytona.supply import describe

    summary = {"run_id": run.run_id, "taskset": cfg.taskset, "steps": cfg.steps, "completed_steps": done,
               "failed_step": done, "error": str(failed), "policy_saved": checkpoint, "backend": cfg.backend,
               "sandbox_backend": describe(run.spec),
               "heldout_before": next((m["heldout_pass_rate"] for m in failed.metrics if m["step"] == -1), None),
               "evals": {str(k): v for k, v in evals.items()}}
    (cfg.out / "summary.json").write_text(json.dumps(summary, indent=2))
    from rl_daytona.report import report_after_run

    report_after_run(cfg.out)
    if checkpoint:
        kept = f"policy after step {done} kept at {checkpoint}"
    else:
        kept = "no step trained (the policy is the one the run started from)"
    again = f" (--resume {cfg.out} --out {cfg.out} continues it)" if checkpoint else ""
    return TrainingCallError(f"{failed}; {kept}; metrics.jsonl and rollouts.jsonl keep every finished step{again}",
                             retryable=False)
