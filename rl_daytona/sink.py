"""The run's sink: every finished rollout, appended to `rollouts.jsonl` as it arrives.

Invariant: each rollout id is written exactly once, flushed before `add` returns, so a run
that dies keeps every rollout it finished; `rollouts` holds them in arrival order.
"""

from __future__ import annotations

import json
from pathlib import Path

from rl_daytona.types import Rollout


class RolloutSink:
    """Appends each rollout to rollouts.jsonl as it completes, flushed, exactly once."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("a", encoding="utf-8")
        self._seen: set[str] = set()
        self.rollouts: list[Rollout] = []

    def add(self, rollout: Rollout) -> None:
        if rollout.rollout_id in self._seen:
            return
        self._seen.add(rollout.rollout_id)
        self.rollouts.append(rollout)
        self._file.write(json.dumps(rollout.to_json()) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()
