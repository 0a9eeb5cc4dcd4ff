"""The report's summary table: (label, value) rows computed from a RunData.

Invariant: a value the run folder does not record is shown as "not recorded (...)", never as 0.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from rl_daytona.report.load import RunData


def _pct(x: Any) -> str:
    return f"{float(x):.1%}" if isinstance(x, (int, float)) else "not recorded"


def _num(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:,.2f}"
    return f"{x:,}" if isinstance(x, int) else "not recorded"


def _bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _run_rows(data: RunData) -> list[tuple[str, str]]:
    s = data.summary or {}
    rows = [("run folder", str(data.rundir)), ("kind", data.kind), ("run id", str(s.get("run_id", "not recorded"))),
            ("taskset", data.taskset or "not recorded")]
    if data.kind == "train":
        rows += [("steps (finished / planned)", f"{sum(m['step'] >= 0 for m in data.metrics)} / {s.get('steps', '?')}"),
                 ("held-out pass rate before -> after", f"{_pct(s.get('heldout_before'))} -> {_pct(s.get('heldout_after'))}")]
        if s.get("error"):
            rows.append(("stopped", str(s["error"])))
    else:
        rows += [("split, group", f"{s.get('split', '?')}, {s.get('group', '?')}"),
                 ("pass rate", _pct(s.get("pass_rate")))]
    return rows


def _rollout_rows(data: RunData) -> list[tuple[str, str]]:
    s = data.summary or {}
    statuses = dict(Counter(r.status for r in data.rollouts)) or s.get("counts_by_status")
    count = len(data.rollouts) or s.get("rollouts")
    wall = s.get("wall_seconds")
    starts = [r.started_at for r in data.rollouts if r.started_at > 0]
    if not isinstance(wall, (int, float)) and starts:
        wall = max(r.started_at + r.total for r in data.rollouts if r.started_at > 0) - min(starts)
    rate = s.get("rollouts_per_second") or (count / wall if count and isinstance(wall, (int, float)) and wall else None)
    return [("rollouts", _num(count)),
            ("statuses", ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())) if statuses else "not recorded"),
            ("wall seconds", _num(float(wall)) if isinstance(wall, (int, float)) else "not recorded"),
            ("throughput (rollouts/s)", _num(float(rate)) if rate else "not recorded")]


def _backend_row(data: RunData) -> tuple[str, str]:
    """Where the sandboxes ran: backend, isolation or snapshot, warm pool."""
    spec = (data.summary or {}).get("sandbox_backend")
    if not isinstance(spec, dict):
        return ("sandboxes ran on", "not recorded (summary.json names no backend)")
    if spec.get("kind") != "daytona":
        return ("sandboxes ran on", f"{spec.get('kind', '?')} (isolation {spec.get('isolation', '?')})")
    warm = spec.get("warm_pool") or "none"
    return ("sandboxes ran on", f"daytona at {spec.get('api_url', '?')}, snapshot {spec.get('snapshot') or 'none'}, "
                                f"warm pool {warm}, transport {spec.get('transport', '?')}")


def _pool_rows(data: RunData) -> list[tuple[str, str]]:
    pool = (data.summary or {}).get("pool")
    if not isinstance(pool, dict):
        why = "not recorded (summary.json has no pool stats)"
        return [("sandboxes created / forked / deleted", why)]
    return [("sandboxes created / forked / deleted",
             f"{_num(pool.get('created'))} / {_num(pool.get('forked'))} / {_num(pool.get('deleted'))}"),
            ("sandbox creates failed", _num(pool.get("failed")))]


def _learner_rows(data: RunData) -> list[tuple[str, str]]:
    if data.kind != "train":
        return [("datums / chunks / bytes sent", "none (an eval run does not train)")]
    steps = [m for m in data.metrics if m["step"] >= 0 and "datums" in m]
    if not steps:
        return [("datums / chunks / bytes sent", "not recorded (no finished step in metrics.jsonl)")]
    return [("datums", _num(sum(int(m.get("datums") or 0) for m in steps))),
            ("chunks (forward_backward calls)", _num(sum(int(m.get("chunks") or 0) for m in steps))),
            ("bytes sent", _bytes(sum(int(m.get("bytes_sent") or 0) for m in steps)))]


def _timing_rows(data: RunData) -> list[tuple[str, str]]:
    rows = [r for r in data.rollouts if r.total > 0]
    if not rows:
        return []
    out = []
    for name in ("usable", "claim", "seed", "agent", "grade", "total"):
        values = np.asarray([getattr(r, name) for r in rows])
        label = "time to usable (claim + seed)" if name == "usable" else f"{name} seconds"
        out.append((f"{label} p50 / p95", f"{np.percentile(values, 50):.3f} / {np.percentile(values, 95):.3f}"))
    return out


def summary_rows(data: RunData) -> list[tuple[str, str]]:
    return _run_rows(data) + _rollout_rows(data) + [_backend_row(data)] + _pool_rows(data) + _learner_rows(data) + _timing_rows(data)
