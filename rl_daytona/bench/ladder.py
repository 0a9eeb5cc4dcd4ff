"""A spin-up ladder: every mode at every width, `reps` waves each, written as CSV and a plot.

Invariant: `ladder.csv` has one row per (mode, width) summarising all its waves (time to
usable percentiles over every delivered sandbox of every rep, counts summed over reps, wall
time the median and the worst rep, CPU seconds the median rep, the machine's 1-minute load
average the highest seen), `ladder_waves.csv` one row per
wave, and `ladder.png` one
line per mode of time to usable (p50, with the max as a dashed line of the same colour) by
width, the walkthrough's published figures drawn as grey marks beside them. `handed_p50` is
the median time until the pool handed a sandbox out, before the command that makes it usable
(on the local backend that command, a bwrap launch, is most of the time to usable). Rows are appended
to the CSVs as waves finish, so an interrupted ladder keeps what it measured.
"""

from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rl_daytona.bench.spinup import WaveResult

PUBLISHED_COLD = {8: 2.8, 32: 3.3, 128: 5.1, 256: 9.9}  # p50 seconds, the walkthrough
PUBLISHED_WARM = {128: 4.4, 256: 7.3}
PUBLISHED_COLD_WORST_256 = 15.1

WAVE_FIELDS = ("backend", "mode", "width", "rep", "requested", "delivered", "lost", "on_hand", "created",
               "forked", "failed", "hedged", "discarded", "usable_p50", "usable_p95", "usable_max", "wall_s", "cpu_s", "load_1m", "handed_p50")
LEVEL_FIELDS = ("backend", "mode", "width", "reps", "requested", "delivered", "lost", "on_hand", "created",
                "forked", "failed", "hedged", "discarded", "usable_p50", "usable_p95", "usable_max",
                "wall_p50_s", "wall_max_s", "cpu_p50_s", "load_1m_max", "handed_p50")


@dataclass(frozen=True)
class Level:
    """All waves of one mode at one width."""

    waves: tuple[WaveResult, ...]

    def row(self) -> dict[str, object]:
        first = self.waves[0]
        usable = np.asarray([t for w in self.waves for t in w.usable] or [float("nan")])
        walls = [w.wall for w in self.waves]
        total = {name: sum(getattr(w, name) for w in self.waves)
                 for name in ("lost", "on_hand", "created", "forked", "failed", "hedged", "discarded")}
        return {"backend": first.backend, "mode": first.mode, "width": first.width, "reps": len(self.waves),
                "requested": first.width * len(self.waves), "delivered": sum(len(w.usable) for w in self.waves),
                **total, **_percentiles(usable), "wall_p50_s": round(statistics.median(walls), 3),
                "wall_max_s": round(max(walls), 3),
                "cpu_p50_s": round(statistics.median(w.cpu for w in self.waves), 2),
                "load_1m_max": round(max(w.load for w in self.waves), 2),
                "handed_p50": _p50([t for w in self.waves for t in w.handed])}


def wave_row(wave: WaveResult) -> dict[str, object]:
    usable = np.asarray(wave.usable or [float("nan")])
    return {"backend": wave.backend, "mode": wave.mode, "width": wave.width, "rep": wave.rep,
            "requested": wave.width, "delivered": len(wave.usable), "lost": wave.lost, "on_hand": wave.on_hand,
            "created": wave.created, "forked": wave.forked, "failed": wave.failed, "hedged": wave.hedged,
            "discarded": wave.discarded, **_percentiles(usable), "wall_s": round(wave.wall, 3),
            "cpu_s": round(wave.cpu, 2), "load_1m": round(wave.load, 2), "handed_p50": _p50(list(wave.handed))}


def _p50(times: list[float]) -> float:
    """Median seconds to handed out (nan when none was recorded)."""
    return round(float(np.percentile(times, 50)), 3) if times else float("nan")


def _percentiles(usable: np.ndarray) -> dict[str, float]:
    return {"usable_p50": round(float(np.percentile(usable, 50)), 3),
            "usable_p95": round(float(np.percentile(usable, 95)), 3), "usable_max": round(float(usable.max()), 3)}


def append_csv(path: Path, fields: tuple[str, ...], row: dict[str, object]) -> None:
    new = not path.exists()
    with path.open("a", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=fields)
        if new:
            writer.writeheader()
        writer.writerow(row)


def read_levels(path: Path) -> list[dict[str, str]]:
    with path.open() as rows:
        return list(csv.DictReader(rows))


def plot(levels: list[dict[str, str]], out: Path, title: str) -> Path:
    """ladder.png: time to usable by width, one line per (backend, mode)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    series: dict[tuple[str, str], list[dict[str, str]]] = {}
    for row in levels:
        series.setdefault((row["backend"], row["mode"]), []).append(row)
    for (backend, mode), rows in sorted(series.items()):
        rows.sort(key=lambda r: int(r["width"]))
        widths = [int(r["width"]) for r in rows]
        line, = ax.plot(widths, [float(r["usable_p50"]) for r in rows], marker="o", label=f"{backend} {mode} p50")
        ax.plot(widths, [float(r["usable_max"]) for r in rows], linestyle="--", color=line.get_color(),
                linewidth=1, label=f"{backend} {mode} max")
    ax.scatter(list(PUBLISHED_COLD), list(PUBLISHED_COLD.values()), marker="x", color="grey",
               label="published cold p50")
    ax.scatter(list(PUBLISHED_WARM), list(PUBLISHED_WARM.values()), marker="+", s=80, color="grey",
               label="published warm p50")
    ax.scatter([256], [PUBLISHED_COLD_WORST_256], marker="v", color="grey", label="published cold worst")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sandboxes requested at once")
    ax.set_ylabel("seconds to usable")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
