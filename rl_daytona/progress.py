"""The run's progress on the terminal: one rich bar per phase (attempts done, the pass rate so far).

Invariant: the pass rate shown counts only scored attempts (an infrastructure failure is not a
fail); a new phase replaces the previous bar; lines printed with `print` appear above the bar.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rl_daytona.types import Rollout, RolloutStatus


class RunProgress:
    """`with RunProgress(console) as progress:` then `phase(...)`, `done(rollout)` per attempt."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("pass {task.fields[rate]}"), TimeElapsedColumn(), console=console)
        self.bar: Any = None
        self._passed: list[bool] = []

    def phase(self, description: str, total: int) -> None:
        if self.bar is not None:
            self.progress.remove_task(self.bar)
        self._passed = []
        self.bar = self.progress.add_task(description, total=total, rate="-")

    def done(self, rollout: Rollout) -> None:
        if rollout.status is not RolloutStatus.INFRA_ERROR:
            self._passed.append(rollout.reward >= 1.0)
        rate = f"{sum(self._passed) / len(self._passed):.0%}" if self._passed else "-"
        self.progress.update(self.bar, advance=1, rate=rate)

    def print(self, line: str) -> None:
        """One line above the bar, written at once."""
        self.console.print(line)
        self.console.file.flush()

    def __enter__(self) -> "RunProgress":
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)
