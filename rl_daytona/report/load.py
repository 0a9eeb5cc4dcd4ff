"""Tolerant readers for a run folder: summary.json, metrics.jsonl, rollouts.jsonl.

Invariant: loading never raises for a damaged or older run folder; every file that is absent,
unreadable or partly unreadable becomes one human-readable note in `RunData.missing`. Only a
path that is not a run folder at all (none of the three files) raises `NotARunFolder`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RUN_FILES = ("summary.json", "metrics.jsonl", "rollouts.jsonl")
_TRAIN_GROUP = re.compile(r"^train(\d+)/")
_EVAL_GROUP = re.compile(r"^eval(\d*)/")


class NotARunFolder(ValueError):
    """The path holds none of summary.json, metrics.jsonl, rollouts.jsonl."""


@dataclass(frozen=True)
class RolloutRow:
    """The light part of one rollouts.jsonl line (no tokens, no messages)."""

    rollout_id: str
    task_id: str
    variant: str
    group_id: str
    status: str
    reward: float
    claim: float
    seed: float
    agent: float
    grade: float
    total: float
    started_at: float

    @property
    def usable(self) -> float:
        """Seconds from asking for a sandbox to having it seeded and ready for the agent."""
        return self.claim + self.seed

    @property
    def phase(self) -> tuple[str, int]:
        """("train", step) for a training attempt, ("eval", after_step) for a held-out one
        (after_step 0 = untrained), ("eval", -1) for an `rl-daytona eval` attempt."""
        m = _TRAIN_GROUP.match(self.group_id)
        if m:
            return "train", int(m.group(1))
        m = _EVAL_GROUP.match(self.group_id)
        if m:
            return "eval", int(m.group(1)) if m.group(1) else -1
        return "other", -1


@dataclass(frozen=True)
class RunData:
    rundir: Path
    kind: str  # "train", "eval" or "unknown"
    summary: dict[str, Any] | None
    metrics: tuple[dict[str, Any], ...]
    rollouts: tuple[RolloutRow, ...]
    missing: tuple[str, ...]

    @property
    def taskset(self) -> str:
        return str((self.summary or {}).get("taskset") or "")


def _row(data: dict[str, Any]) -> RolloutRow:
    t = data.get("timings") or {}
    return RolloutRow(
        rollout_id=str(data.get("rollout_id", "")), task_id=str(data.get("task_id", "")),
        variant=str(data.get("variant", "")), group_id=str(data.get("group_id", "")),
        status=str(data.get("status", "")), reward=float(data.get("reward") or 0.0),
        claim=float(t.get("claim") or 0.0), seed=float(t.get("seed") or 0.0), agent=float(t.get("agent") or 0.0),
        grade=float(t.get("grade") or 0.0), total=float(t.get("total") or 0.0),
        started_at=float(data.get("started_at") or 0.0))


def read_jsonl(path: Path, missing: list[str]) -> list[dict[str, Any]]:
    """Every line of `path` that parses as a JSON object; a note for each problem."""
    if not path.exists():
        missing.append(f"{path.name} is missing")
        return []
    rows, bad = [], 0
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    bad += 1
                    continue
                if isinstance(obj, dict):
                    rows.append(obj)
                else:
                    bad += 1
    except OSError as exc:
        missing.append(f"{path.name} could not be read ({exc.strerror or exc})")
        return []
    if bad:
        missing.append(f"{path.name}: {bad} unreadable line(s) skipped (a half-written or truncated file?)")
    return rows


def read_summary(path: Path, missing: list[str]) -> dict[str, Any] | None:
    if not path.exists():
        missing.append("summary.json is missing (the run did not finish, or was stopped)")
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, json.JSONDecodeError) as exc:
        missing.append(f"summary.json is unreadable ({type(exc).__name__})")
        return None
    if not isinstance(data, dict):
        missing.append("summary.json is not a JSON object")
        return None
    return data


def _rows(raw: list[dict[str, Any]], missing: list[str]) -> list[RolloutRow]:
    rows, bad = [], 0
    for item in raw:
        try:
            rows.append(_row(item))
        except (TypeError, ValueError, AttributeError):
            bad += 1
    if bad:
        missing.append(f"rollouts.jsonl: {bad} line(s) without the expected fields skipped")
    return rows


def _kind(rundir: Path, summary: dict[str, Any] | None, rows: list[RolloutRow]) -> str:
    if (rundir / "metrics.jsonl").exists() or (summary and "steps" in summary) \
            or any(r.phase[0] == "train" for r in rows):
        return "train"
    if (summary and "split" in summary) or any(r.phase == ("eval", -1) for r in rows):
        return "eval"
    return "unknown"


def load_run(rundir: Path) -> RunData:
    """Read what there is of a run folder; raises NotARunFolder when there is nothing."""
    rundir = Path(rundir)
    if not rundir.is_dir():
        raise NotARunFolder(f"{rundir} is not a directory")
    if not any((rundir / name).exists() for name in RUN_FILES):
        raise NotARunFolder(f"{rundir} is not a run folder (no {', '.join(RUN_FILES)})")
    missing: list[str] = []
    summary = read_summary(rundir / "summary.json", missing)
    rows = _rows(read_jsonl(rundir / "rollouts.jsonl", missing), missing)
    kind = _kind(rundir, summary, rows)
    metrics: list[dict[str, Any]] = []
    if kind == "train":
        metrics = [m for m in read_jsonl(rundir / "metrics.jsonl", missing) if isinstance(m.get("step"), int)]
    return RunData(rundir=rundir, kind=kind, summary=summary, metrics=tuple(metrics),
                   rollouts=tuple(rows), missing=tuple(missing))
