"""Where a training run stopped, read back from its run folder, so it can continue there.

    metrics.jsonl   one line per completed step (-1: the untrained eval), written after the
                    step's rollouts, training, checkpoint and eval: the commit record
    checkpoints/    the training state saved after each trained step; a line names the one
                    that holds its step's state (`"checkpoint"`; line -1 names the state
                    the run started from, None for fresh weights)
    rollouts.jsonl  every rollout, appended as it finishes

Invariant: a run continued with `--resume RUNDIR` starts at the step after the last complete
metrics line, from that line's checkpoint, with `rollouts.jsonl` holding each rollout of the
completed steps exactly once: what an interrupted step (or its eval) had already written is
moved to `rollouts.interrupted.jsonl`, since that step runs again under the same rollout ids.
A torn last metrics line (the process died mid-write) is dropped.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

INTERRUPTED = "rollouts.interrupted.jsonl"
_TRAIN_GROUP = re.compile(r"^train(\d+)/")
_EVAL_GROUP = re.compile(r"^eval(\d+)/")


@dataclass(frozen=True)
class RunState:
    metrics: tuple[dict[str, Any], ...]  # the complete lines, in order
    next_step: int  # the first step not completed
    checkpoint: str | None  # the training state after the last completed step; None: untrained
    version: int  # its policy version
    continuing: bool = False  # read back from a run folder (so its files are kept and appended to)

    @property
    def initial_eval_done(self) -> bool:
        return bool(self.metrics) and self.metrics[0]["step"] == -1

    @property
    def completed(self) -> frozenset[int]:
        return frozenset(int(m["step"]) for m in self.metrics)


def read_run(out: Path) -> RunState:
    """The run folder's completed steps; ValueError (one line) when it cannot be continued."""
    path = out / "metrics.jsonl"
    if not path.is_file():
        raise ValueError(f"--resume {out}: no metrics.jsonl there (not a train run folder)")
    lines: list[dict[str, Any]] = []
    for text in path.read_text(encoding="utf-8").splitlines():
        try:
            line = json.loads(text)
        except ValueError:
            break  # a torn write: the process died here
        step = line.get("step") if isinstance(line, dict) else None
        if step not in ((lines[-1]["step"] + 1,) if lines else (-1, 0)):
            break
        lines.append(line)
    if not lines:
        return RunState((), 0, None, 0, continuing=True)
    last = lines[-1]
    checkpoint, version = last.get("checkpoint"), int(last.get("policy_version") or 0)
    if version and not checkpoint:
        raise ValueError(f"--resume {out}: its last step names no checkpoint (a run from before checkpoints)")
    return RunState(tuple(lines), last["step"] + 1, checkpoint, version, continuing=True)


def starting_point(resume: Path | str | None, out: Path, steps: int) -> RunState:
    """Where a run starts: fresh weights; or, with --resume, the run folder's next step (when
    it is `out` itself), a previous run's last checkpoint, or a tinker:// checkpoint to start
    a new run from. A clear ValueError when that cannot be done."""
    if resume is None:
        return RunState((), 0, None, 0)
    if str(resume).startswith("tinker://"):
        return RunState((), 0, str(resume), 0)
    if Path(resume).resolve() == Path(out).resolve():
        start = read_run(out)
        if start.next_step >= steps:
            raise ValueError(f"--resume {resume}: its {start.next_step} steps are done; "
                             f"pass --steps above {start.next_step} to train on")
        _tinker_checkpoint(resume, start.checkpoint)
        return start
    prior = read_run(Path(resume))
    if not prior.checkpoint:
        raise ValueError(f"--resume {resume}: no trained step there to start from")
    _tinker_checkpoint(resume, prior.checkpoint)
    return RunState((), 0, prior.checkpoint, prior.version)


def _tinker_checkpoint(resume: Path | str, checkpoint: str | None) -> None:
    if checkpoint and not checkpoint.startswith("tinker://"):
        raise ValueError(f"--resume {resume}: its checkpoint {checkpoint} is not a tinker:// path "
                         "(a run from before training went through Tinker)")


def _completed(record: dict[str, Any], completed: frozenset[int]) -> bool:
    group = str(record.get("group_id", ""))
    if match := _TRAIN_GROUP.match(group):
        return int(match.group(1)) in completed
    if match := _EVAL_GROUP.match(group):  # eval<n> ran after step n-1 (eval0: the untrained eval, line -1)
        return int(match.group(1)) - 1 in completed
    return True


def prepare_to_continue(out: Path, state: RunState) -> int:
    """Rewrite metrics.jsonl to the complete lines and move the rollouts of steps that did not
    complete to rollouts.interrupted.jsonl (both replaced atomically); how many were moved."""
    _replace(out / "metrics.jsonl", "".join(json.dumps(m) + "\n" for m in state.metrics))
    path = out / "rollouts.jsonl"
    if not path.is_file():
        return 0
    kept, moved = [], []
    for text in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(text)
        except ValueError:
            continue  # a torn write
        (kept if _completed(record, state.completed) else moved).append(text + "\n")
    if moved:
        with (out / INTERRUPTED).open("a", encoding="utf-8") as fh:
            fh.writelines(moved)
            fh.flush()
            os.fsync(fh.fileno())
    _replace(path, "".join(kept))
    return len(moved)


def prune_checkpoints(out: Path, keep: str | None) -> None:
    """Delete the files of checkpoints/ other than `keep`'s (the state the last line names)."""
    folder = out / "checkpoints"
    if not folder.is_dir():
        return
    name = Path(keep).name if keep else None
    for file in folder.iterdir():
        if file.stem != name:
            file.unlink(missing_ok=True)


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
