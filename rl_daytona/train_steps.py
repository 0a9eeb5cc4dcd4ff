"""A train run's step mechanics on its actors: collect a step's groups, evaluate, train, commit.

    steps = Steps(cfg, run, fleet, learner, progress, start)
    seconds = await steps.collect(step)      # every attempt to the sink and to the Learner (through Ray)
    report = await steps.train(step)         # optim_step, state saved, the sampler on the new weights
    held = await steps.evaluate(step)        # the held-out split, group `eval_group`
    steps.commit(line)                       # the step's metrics.jsonl line, durably

Invariant: every attempt of a step reaches the sink and then the Learner exactly once (plus the
retries the Learner asks for); a Learner that takes no rollout for LEARNER_ADD_TIMEOUT seconds,
a failed training call or a sampler refusing new weights stops the run with one line
(`TrainingStepFailed`, which carries every committed line); a metrics line is committed only
after its step's state is saved, and then the checkpoints it replaced are dropped.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any, Callable

from rl_daytona.learn.clients import TrainingCallError
from rl_daytona.learn.learner import StepReport
from rl_daytona.learn.run_state import RunState, prune_checkpoints
from rl_daytona.progress import RunProgress
from rl_daytona.run import Run
from rl_daytona.serving.sampler import use_weights
from rl_daytona.sink import RolloutSink
from rl_daytona.source import group_requests, groups_of, step_requests
from rl_daytona.types import Rollout, RolloutRequest, RolloutStatus

LEARNER_ADD_TIMEOUT = 600.0  # seconds the Learner may take to accept one rollout (it may be mid-train_step)


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


def one_line(exc: BaseException) -> str:
    """The original error's first line (Ray's wrapper adds the remote traceback)."""
    cause = getattr(exc, "cause", None) or exc
    lines = str(cause).strip().splitlines()
    first = lines[0] if lines else ""
    return first if isinstance(cause, TrainingCallError) else f"{type(cause).__name__}: {first}"


async def collect(fleet: Any, learner: Any, requests: list[RolloutRequest], sink: RolloutSink,
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


class Steps:
    """The step operations of one train run (see the module docstring)."""

    def __init__(self, cfg: Any, run: Run, fleet: Any, learner: Any, progress: RunProgress,
                 start: RunState) -> None:
        self.cfg, self.run, self.fleet, self.learner, self.progress = cfg, run, fleet, learner, progress
        self.metrics: list[dict[str, Any]] = list(start.metrics)
        self.evals: dict[int, dict[str, Any]] = {}
        self.checkpoint = start.checkpoint

    def failed(self, message: str) -> TrainingStepFailed:
        return TrainingStepFailed(message, self.metrics, self.evals)

    def commit(self, line: dict[str, Any]) -> None:
        """Commit a finished step: its line, durably, then drop the checkpoints it replaced."""
        self.metrics.append(line)
        with (self.run.out / "metrics.jsonl").open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        prune_checkpoints(self.run.out, line.get("checkpoint"))

    def wants_eval(self, step: int) -> bool:
        return step == self.cfg.steps - 1 or (self.cfg.eval_every > 0 and (step + 1) % self.cfg.eval_every == 0)

    async def collect(self, step: int) -> float:
        cfg = self.cfg
        requests = step_requests(self.run.splits[cfg.train_split], cfg.tasks_per_step, cfg.group, cfg.seed, step)
        await self.learner.begin_step.remote(step, groups_of(requests))
        self.progress.phase(f"step {step + 1}/{cfg.steps} rollouts", len(requests))
        return await collect(self.fleet, self.learner, requests, self.run.sink, self.progress.done)

    async def evaluate(self, after_step: int) -> dict[str, Any]:
        cfg = self.cfg
        requests = group_requests(self.run.splits[cfg.eval_split], cfg.eval_group, tag=f"eval{after_step + 1}")
        self.progress.phase(f"eval {cfg.eval_split} after step {after_step + 1}" if after_step >= 0
                            else f"eval {cfg.eval_split} (untrained)", len(requests))
        rollouts = [r for _, r in await asyncio.gather(*(self.fleet.run(r) for r in requests))]
        for r in rollouts:
            self.run.sink.add(r)
            self.progress.done(r)
        scored = [r for r in rollouts if r.status is not RolloutStatus.INFRA_ERROR]
        result = {"pass_rate": sum(r.reward >= 1.0 for r in scored) / len(scored) if scored else 0.0,
                  "rollouts": len(rollouts), "infra_errors": len(rollouts) - len(scored),
                  "versions": sorted({r.trajectory.policy_version for r in rollouts})}
        self.evals[after_step] = result
        return result

    async def train(self, step: int) -> StepReport:
        """The step's optimizer step and its saved state (the run stops with one line if either fails)."""
        try:
            report: StepReport = await self.learner.train_step.remote(
                step, str(self.run.out / "checkpoints" / f"step-{step:06d}"))
        except Exception as exc:  # noqa: BLE001 - a RayTaskError wrapping the Learner's error
            raise self.failed(f"step {step + 1}: training failed: {one_line(exc)}") from None
        self.checkpoint = report.checkpoint or self.checkpoint
        url = self.run.settings.policy_url
        problem = await use_weights(url, report.sampler_path, report.version) if report.sampler_path else ""
        if problem:
            raise self.failed(f"step {step + 1}: training failed: {problem}")
        return report

    async def save_policy(self) -> Any:
        try:
            return await self.learner.save.remote(str(self.run.out / "policy"))
        except Exception as exc:  # noqa: BLE001 - as in train(): the Learner gave up
            raise self.failed(f"saving the final policy failed: {one_line(exc)}") from None
