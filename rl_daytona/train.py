"""`rl-daytona train`: rollouts -> Learner -> training service, step after step.

    for each step: sample tasks (train split) -> dispatch groups to RolloutActors
                   -> each finished attempt goes to the Learner through Ray
                   -> Learner: complete groups -> advantages -> chunks -> forward_backward, optim_step
    held-out eval (group `eval_group`) before the first step, every `eval_every`, after the last.

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
import json
import os
import time
import uuid
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rl_daytona.backends import BackendSpec, DaytonaOptions
from rl_daytona.eval import RolloutSink, fleet_plan, requests_for, sigterm_interrupts
from rl_daytona.fleet import RolloutFleet as Fleet
from rl_daytona.learn.clients import AdamParams, TrainingCallError
from rl_daytona.learn.learner import LearnerConfig, StepReport
from rl_daytona.learn.retry import RetryPolicy
from rl_daytona.learn.run_state import INTERRUPTED, RunState, prepare_to_continue, prune_checkpoints, read_run
from rl_daytona.pool import PoolConfig
from rl_daytona.tasks import get_taskset
from rl_daytona.tinker_run import TinkerTarget, check_target, open_trainer
from rl_daytona.types import Rollout, RolloutRequest, RolloutStatus, SandboxLimits, Settings


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


LEARNER_ADD_TIMEOUT = 600.0  # seconds the Learner may take to accept one rollout (it may be mid-train_step)


async def _collect(fleet: Fleet, learner: Any, requests: list[RolloutRequest], sink: RolloutSink,
                   on_done: Callable[[Rollout], None]) -> float:
    """Dispatch a step's attempts (and any retries the Learner asks for); returns seconds."""
    started = time.monotonic()

    async def one(request: RolloutRequest) -> None:
        ref, rollout = await fleet.run(request)
        sink.add(rollout)
        on_done(rollout)
        try:  # the rollout itself travels by Ray's object store
            retries = await asyncio.wait_for(learner.add.remote(ref), LEARNER_ADD_TIMEOUT)
        except TimeoutError:  # wedged, or its node gone without Ray noticing
            raise TrainingCallError(
                f"the Learner took no rollout for {LEARNER_ADD_TIMEOUT:g} s ({request.rollout_id} is in "
                "rollouts.jsonl); the run stops here: continue it with --resume", retryable=False) from None
        await asyncio.gather(*(one(r) for r in retries))

    await asyncio.gather(*(one(r) for r in requests))
    return time.monotonic() - started


async def _evaluate(fleet: Fleet, cfg: TrainConfig, tag: str, sink: RolloutSink,
                    on_done: Callable[[Rollout], None]) -> dict[str, Any]:
    requests = requests_for(cfg.taskset, cfg.eval_split, cfg.eval_group, tag=tag)
    results = await asyncio.gather(*(fleet.run(r) for r in requests))
    rollouts = [r for _, r in results]
    for r in rollouts:
        sink.add(r)
        on_done(r)
    scored = [r for r in rollouts if r.status is not RolloutStatus.INFRA_ERROR]
    return {"pass_rate": sum(r.reward >= 1.0 for r in scored) / len(scored) if scored else 0.0,
            "rollouts": len(rollouts), "infra_errors": len(rollouts) - len(scored),
            "versions": sorted({r.trajectory.policy_version for r in rollouts})}


def _step_requests(cfg: TrainConfig, step: int) -> list[RolloutRequest]:
    rng = np.random.default_rng([cfg.seed, step])  # per step: a continued run draws the same tasks
    instances = get_taskset(cfg.taskset).split(cfg.train_split)
    replace_ = cfg.tasks_per_step > len(instances)
    picked = rng.choice(len(instances), size=cfg.tasks_per_step, replace=replace_)
    out = []
    for slot, index in enumerate(picked):
        inst = instances[int(index)]
        group_id = f"train{step}/{slot}/{inst.instance_id}"
        out += [RolloutRequest(rollout_id=f"{group_id}/{a}", task_id=inst.instance_id, group_id=group_id, attempt=a)
                for a in range(cfg.group)]
    return out


def _groups_of(requests: list[RolloutRequest]) -> dict[str, int]:
    groups: dict[str, int] = {}
    for r in requests:
        groups[r.group_id] = groups.get(r.group_id, 0) + 1
    return groups


class _Display:
    """Rich progress: the step, rollouts done, the current pass rate."""

    def __init__(self, console: Console, cfg: TrainConfig) -> None:
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("pass {task.fields[rate]}"), TimeElapsedColumn(), console=console)
        self.cfg = cfg
        self.bar: Any = None
        self._done: list[bool] = []

    def phase(self, description: str, total: int) -> None:
        if self.bar is not None:
            self.progress.remove_task(self.bar)
        self._done = []
        self.bar = self.progress.add_task(description, total=total, rate="-")

    def done(self, rollout: Rollout) -> None:
        if rollout.status is not RolloutStatus.INFRA_ERROR:
            self._done.append(rollout.reward >= 1.0)
        rate = f"{sum(self._done) / len(self._done):.0%}" if self._done else "-"
        self.progress.update(self.bar, advance=1, rate=rate)


def _metrics_line(report: StepReport, rollout_seconds: float, step_seconds: float,
                  heldout: dict[str, Any] | None, overlap: dict[str, float] | None,
                  checkpoint: str | None) -> dict[str, Any]:
    """One metrics.jsonl line. `step_seconds` runs from the start of this step's rollouts (or,
    overlapped, from the end of the previous step) to the end of its training (and eval);
    `overlap`, when step t's training ran beside step t+1's rollouts, is that window's length
    and the two phases inside it, so `window / max(phases)` is the overlap figure."""
    counts = report.counts
    complete = max(counts.get("groups_complete", 0), 1)
    line = {
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
        "bytes_per_rollout_by_turns": _bytes_by_turns(report.rollout_bytes),
        "training_calls": asdict(report.calls), "checkpoint": checkpoint,
    }
    return line


def _bytes_by_turns(pairs: tuple[tuple[int, int], ...]) -> dict[str, float]:
    by: dict[int, list[int]] = {}
    for turns, nbytes in pairs:
        by.setdefault(turns, []).append(nbytes)
    return {str(t): round(sum(v) / len(v), 1) for t, v in sorted(by.items())}


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


async def _train(cfg: TrainConfig, supply: tuple[BackendSpec, PoolConfig], url: str, console: Console,
                 metrics_path: Path, sink: RolloutSink, start: RunState = RunState((), 0, None, 0),
                 training: Callable[[], Any] | None = None) -> dict[str, Any]:
    import ray

    from rl_daytona import runtime

    spec, pool_cfg = supply
    settings = Settings(**{**asdict(cfg.settings), "policy_url": url})
    pool = runtime.start_pool(spec, cfg.run_id, pool_cfg)
    await pool.start.remote()
    fleet = runtime.start_fleet(pool, spec, cfg.taskset, settings, fleet_plan(cfg))
    await fleet.start()
    learner_cfg = LearnerConfig(loss_fn=cfg.loss_fn, adam=AdamParams(learning_rate=cfg.lr),
                                chunk_bytes=cfg.chunk_bytes, normalize_std=cfg.normalize_std,
                                max_staleness=cfg.off_policy if cfg.off_policy else None, retry=cfg.retry)
    learner = runtime.start_learner(cfg.training_client or training, learner_cfg, start.version)
    if start.checkpoint:  # the sampler starts from the checkpoint's weights too
        published = await learner.publish.remote(f"resume-{start.version:06d}")
        problem = await _use_sampler(url, published, start.version) if published else ""
        if problem:
            raise ValueError(f"--resume {start.checkpoint}: {problem}")
    display = _Display(console, cfg)
    metrics: list[dict[str, Any]] = list(start.metrics)
    evals: dict[int, dict[str, Any]] = {}
    started = time.monotonic()
    checkpoint = start.checkpoint

    def write(line: dict[str, Any]) -> None:
        """Commit a finished step: its line, durably, then drop the checkpoints it replaced."""
        metrics.append(line)
        with metrics_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        prune_checkpoints(cfg.out, line.get("checkpoint"))

    async def train(step: int) -> StepReport:
        """The step's optimizer step and its saved state (the run stops with one line if either fails)."""
        nonlocal checkpoint
        try:
            report: StepReport = await learner.train_step.remote(step, str(cfg.out / "checkpoints" /
                                                                           f"step-{step:06d}"))
        except Exception as exc:  # noqa: BLE001 - a RayTaskError wrapping the Learner's error
            raise TrainingStepFailed(f"step {step + 1}: training failed: {_one_line(exc)}", metrics, evals) from None
        checkpoint = report.checkpoint or checkpoint
        problem = await _use_sampler(url, report.sampler_path, report.version) if report.sampler_path else ""
        if problem:
            raise TrainingStepFailed(f"step {step + 1}: training failed: {problem}", metrics, evals)
        return report

    async def evaluate(after_step: int) -> dict[str, Any]:
        display.phase(f"eval {cfg.eval_split} after step {after_step + 1}" if after_step >= 0
                      else f"eval {cfg.eval_split} (untrained)", len(requests_for(cfg.taskset, cfg.eval_split,
                                                                                   cfg.eval_group)))
        result = await _evaluate(fleet, cfg, f"eval{after_step + 1}", sink, display.done)
        evals[after_step] = result
        return result

    def wants_eval(step: int) -> bool:
        return step == cfg.steps - 1 or (cfg.eval_every > 0 and (step + 1) % cfg.eval_every == 0)

    async def collect(step: int, requests: list[RolloutRequest]) -> float:
        await learner.begin_step.remote(step, _groups_of(requests))
        display.phase(f"step {step + 1}/{cfg.steps} rollouts", len(requests))
        return await _collect(fleet, learner, requests, sink, display.done)

    try:
        with display.progress:
            if not start.initial_eval_done:
                first = await evaluate(-1)
                write({"step": -1, "heldout_pass_rate": round(first["pass_rate"], 4),
                       "policy_version": start.version, "train_pass_rate": None, "checkpoint": checkpoint})
            await pool.set_demand.remote(cfg.tasks_per_step * cfg.group)
            step_start = time.monotonic()
            rollout_seconds = await collect(start.next_step, _step_requests(cfg, start.next_step))
            for step in range(start.next_step, cfg.steps):
                next_task, overlap = None, None
                window_start = time.monotonic()
                if cfg.off_policy and step + 1 < cfg.steps and not wants_eval(step):
                    next_task = asyncio.ensure_future(collect(step + 1, _step_requests(cfg, step + 1)))
                try:
                    report = await train(step)
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
                if wants_eval(step):
                    heldout = await evaluate(step)
                now = time.monotonic()
                write(_metrics_line(report, rollout_seconds, now - step_start, heldout, overlap, checkpoint))
                if not report.trained:
                    console.print(f"step {step + 1}: skipped ({report.skipped_reason})")
                if step + 1 < cfg.steps:
                    step_start = now
                    if next_task is not None:
                        rollout_seconds = next_rollout_seconds
                    else:
                        rollout_seconds = await collect(step + 1, _step_requests(cfg, step + 1))
        try:
            saved = await learner.save.remote(str(cfg.out / "policy"))
        except Exception as exc:  # noqa: BLE001 - as in train(): the Learner gave up
            raise TrainingStepFailed(f"saving the final policy failed: {_one_line(exc)}", metrics, evals) from None
        await fleet.close()
        await learner.close.remote()
    finally:
        pool_stats = await pool.shutdown.remote()
        ray.kill(learner, no_restart=True)
    return {"metrics": metrics, "evals": evals, "wall_seconds": time.monotonic() - started, "policy_saved": saved,
            "pool": asdict(pool_stats), "fleet": fleet.counts}


class TrainingStepFailed(TrainingCallError):
    """Training calls failed past the Learner's retry policy; the run stops there. `metrics`
    holds every completed step's line (the previous session's too when continued)."""

    def __init__(self, message: str, metrics: list[dict[str, Any]], evals: dict[int, Any]) -> None:
        super().__init__(message, retryable=False)
        self.metrics, self.evals = metrics, evals

    @property
    def completed_steps(self) -> int:
        return max((int(m["step"]) + 1 for m in self.metrics), default=0)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.metrics, self.evals))


def _one_line(exc: BaseException) -> str:
    """The original error's first line (Ray's wrapper adds the remote traceback)."""
    cause = getattr(exc, "cause", None) or exc
    lines = str(cause).strip().splitlines()
    first = lines[0] if lines else ""
    return first if isinstance(cause, TrainingCallError) else f"{type(cause).__name__}: {first}"


def run_train(cfg: TrainConfig, console: Console | None = None) -> dict[str, Any]:
    """Train end to end; writes metrics.jsonl, curve.png, rollouts.jsonl, summary.json, policy.*"""
    from rl_daytona import runtime

    console = console or Console()
    if cfg.policy_server is None:
        check_target(cfg.trainer)  # a missing key, unreachable service, unknown model: before anything starts
    get_taskset(cfg.taskset).split(cfg.train_split)
    get_taskset(cfg.taskset).split(cfg.eval_split)
    start = _starting_point(cfg)
    (cfg.out / "checkpoints").mkdir(parents=True, exist_ok=True)
    run_id = cfg.run_id or f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    cfg = replace(cfg, run_id=run_id)
    metrics_path = cfg.out / "metrics.jsonl"
    if start.continuing:
        moved = prepare_to_continue(cfg.out, start)
        console.print(f"continuing {cfg.out} at step {start.next_step + 1} of {cfg.steps} (policy version "
                      f"{start.version})" + (f"; {moved} rollouts of the interrupted step moved to {INTERRUPTED}"
                                             if moved else ""))
    else:
        metrics_path.write_text("")
        if start.checkpoint:
            console.print(f"starting from {start.checkpoint} (policy version {start.version})")
    from rl_daytona.supply import supply_for

    supply = supply_for(cfg, console.print)
    runtime.ensure_ray()
    sigterm_interrupts()
    with ExitStack() as stack:
        training = cfg.training_client
        if cfg.policy_server is not None:
            server = stack.enter_context(cfg.policy_server())
        else:
            server = stack.enter_context(open_trainer(cfg.trainer))
            training = training or server.training_client(start.checkpoint, start.version)
        sink = RolloutSink(cfg.out / "rollouts.jsonl")
        stack.callback(sink.close)
        try:
            result = asyncio.run(_train(cfg, supply, server.url, console, metrics_path, sink, start, training))
        except TrainingStepFailed as failed:
            raise _keep_what_was_done(cfg, failed, run_id) from None
    before = next((m["heldout_pass_rate"] for m in result["metrics"] if m["step"] == -1), None)
    after = result["evals"].get(cfg.steps - 1, {}).get("pass_rate")
    plot_curve(result["metrics"], cfg.out / "curve.png", f"{cfg.taskset}: lr {cfg.lr}, {cfg.steps} steps")
    summary = {"run_id": run_id, "taskset": cfg.taskset, "steps": cfg.steps, "tasks_per_step": cfg.tasks_per_step,
               "group": cfg.group, "lr": cfg.lr, "loss_fn": cfg.loss_fn, "off_policy": cfg.off_policy,
               "heldout_before": before, "heldout_after": after, "wall_seconds": result["wall_seconds"],
               "cores": os.cpu_count() or 1, "policy_saved": result["policy_saved"],
               "pool": result["pool"], "fleet": result["fleet"],
               "evals": {str(k): v for k, v in result["evals"].items()}}
    (cfg.out / "summary.json").write_text(json.dumps(summary, indent=2))
    console.print(f"held-out pass rate: {before or 0.0:.1%} before -> {after:.1%} after {cfg.steps} steps "
                  f"({result['wall_seconds']:.0f}s)")
    from rl_daytona.report import report_after_run

    report_after_run(cfg.out, console)
    return summary


def _starting_point(cfg: TrainConfig) -> RunState:
    """Fresh weights; or, with --resume, the run folder's next step (when it is `out` itself),
    a previous run's last checkpoint, or a tinker:// checkpoint to start a new run from.
    A clear ValueError when that cannot be done."""
    if cfg.resume is None:
        return RunState((), 0, None, 0)
    if str(cfg.resume).startswith("tinker://"):
        return RunState((), 0, str(cfg.resume), 0)
    if Path(cfg.resume).resolve() == Path(cfg.out).resolve():
        start = read_run(cfg.out)
        if start.next_step >= cfg.steps:
            raise ValueError(f"--resume {cfg.resume}: its {start.next_step} steps are done; "
                             f"pass --steps above {start.next_step} to train on")
        _tinker_checkpoint(cfg.resume, start.checkpoint)
        return start
    prior = read_run(Path(cfg.resume))
    if not prior.checkpoint:
        raise ValueError(f"--resume {cfg.resume}: no trained step there to start from")
    _tinker_checkpoint(cfg.resume, prior.checkpoint)
    return RunState((), 0, prior.checkpoint, prior.version)


def _tinker_checkpoint(resume: Path | str, checkpoint: str | None) -> None:
    if checkpoint and not checkpoint.startswith("tinker://"):
        raise ValueError(f"--resume {resume}: its checkpoint {checkpoint} is not a tinker:// path "
                         "(a run from before training went through Tinker)")


def _keep_what_was_done(cfg: TrainConfig, failed: TrainingStepFailed, run_id: str) -> TrainingCallError:
    """After a failed step: the state of the last completed step is already saved (its metrics
    line names the checkpoint); write the curve and a summary saying where the run stopped;
    return the one-line error."""
    done = failed.completed_steps
    checkpoint = next((m.get("checkpoint") for m in reversed(failed.metrics)), None)
    plot_curve(failed.metrics, cfg.out / "curve.png", f"{cfg.taskset}: lr {cfg.lr}, stopped at step {done + 1}")
    evals = failed.evals
    summary = {"run_id": run_id, "taskset": cfg.taskset, "steps": cfg.steps, "completed_steps": done,
               "failed_step": done, "error": str(failed), "policy_saved": checkpoint,
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


async def _use_sampler(url: str, model_path: str, version: int) -> str:
    """Point the sampling endpoint at the weights a step saved; "" when it took them, else why
    not (the run stops: later rollouts would sample the old policy)."""
    import aiohttp

    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
            async with session.post(f"{url}/sampler", json={"model_path": model_path, "version": version}) as resp:
                if resp.status == 200:
                    return ""
                try:
                    reason = (await resp.json())["error"]["message"]
                except Exception:  # noqa: BLE001 - any non-JSON answer
                    reason = f"HTTP {resp.status}"
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        reason = f"{type(exc).__name__}: {exc}"
    return f"the sampler did not take the new weights {model_path}: {reason}"
