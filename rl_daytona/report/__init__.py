"""`rl-daytona report RUNDIR`: RUNDIR/report.html plus the figures as PNGs beside it.

Invariant: a run folder that exists and holds any run file always gets a report; a figure that
cannot be drawn (or fails to draw) becomes a note on the page, never a traceback.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from rl_daytona.report.html import page, section
from rl_daytona.report.load import NotARunFolder, RunData, load_run
from rl_daytona.report.plots import NoData, figures_for
from rl_daytona.report.table import summary_rows

__all__ = ["NotARunFolder", "report_after_run", "write_report"]


def _render(data: RunData, stem: str, fn: object) -> tuple[bytes | None, str]:
    """The figure's PNG bytes (also saved as report-STEM.png), or None and why not."""
    (data.rundir / f"report-{stem}.png").unlink(missing_ok=True)  # no stale figure from an earlier report
    try:
        fig = fn(data)  # type: ignore[operator]
    except NoData as why:
        return None, str(why)
    except Exception as exc:  # noqa: BLE001 - an odd old run folder must not stop the report
        return None, f"could not be drawn ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"
    try:
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
    finally:
        plt.close(fig)
    png = buf.getvalue()
    (data.rundir / f"report-{stem}.png").write_bytes(png)
    return png, ""


def write_report(rundir: Path) -> Path:
    """Write RUNDIR/report.html (and RUNDIR/report-*.png); returns the page's path."""
    data = load_run(Path(rundir))
    sections = [section(title, *_render(data, stem, fn)) for stem, title, fn in figures_for(data)]
    out = data.rundir / "report.html"
    out.write_text(page(data, sections, summary_rows(data)), encoding="utf-8")
    return out


def report_after_run(rundir: Path, console: Any = None) -> Path | None:
    """The end-of-run report for eval and train: prints where it is, or one line saying why
    there is none; never raises, so a report problem cannot fail the run or lose its data."""
    def say(line: str) -> None:
        if console is not None:
            console.print(line, markup=False, highlight=False)
        else:
            print(line)

    try:
        path = write_report(rundir)
    except Exception as exc:  # noqa: BLE001 - the run's own files are already written
        say(f"report not written: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
        return None
    say(f"report: {path}")
    return path
