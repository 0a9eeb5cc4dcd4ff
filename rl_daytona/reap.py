"""`rl-daytona reap`: find sandboxes that runs left behind, by their run label, and delete them.

Invariant: only sandboxes carrying rl-daytona's run label are ever listed or deleted (a
sandbox of anything else on the same account is never touched); `--run` narrows to one run,
`--older-than` to sandboxes whose creation time (the `rl-daytona-created` label the pool sets,
else the provider's own `created_at`) is older; `--dry-run` deletes nothing. Each line printed
names one sandbox and what happened to it; the last line counts them.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from rl_daytona.backends import Backend, BackendSpec, DaytonaOptions, SandboxHandle, make_backend

CREATED_LABEL = "rl-daytona-created"


@dataclass(frozen=True)
class ReapQuery:
    backend: str = "daytona"
    root: Path | None = None
    run_id: str | None = None
    older_than_minutes: float | None = None
    dry_run: bool = False

    def __post_init__(self) -> None:
        if self.backend == "local" and self.root is None:
            raise ValueError("reap --backend local needs --root RUNDIR/sandboxes")
        if self.older_than_minutes is not None and self.older_than_minutes < 0:
            raise ValueError(f"--older-than must be >= 0 minutes, got {self.older_than_minutes}")


def _created_at(handle: SandboxHandle) -> float | None:
    text = handle.labels.get(CREATED_LABEL)
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def selected(handles: list[SandboxHandle], query: ReapQuery, now: float) -> list[SandboxHandle]:
    """The handles the query names (the run label is already required by the listing)."""
    out = [h for h in handles if query.run_id is None or h.run_id == query.run_id]
    if query.older_than_minutes is not None:
        cutoff = now - query.older_than_minutes * 60
        out = [h for h in out if (_created_at(h) or now) <= cutoff]
    return out


async def reap_with(backend: Backend, query: ReapQuery, now: float | None = None) -> list[str]:
    """List by label, delete what the query selects; returns the lines to print."""
    try:
        found = selected(await backend.list_sandboxes(query.run_id), query, now or time.time())
        lines = []
        for handle in found:
            if not query.dry_run:
                await backend.delete(handle)
            lines.append(f"{'would delete' if query.dry_run else 'deleted'} {handle.sandbox_id} (run {handle.run_id})")
        verb = "would be deleted" if query.dry_run else "deleted"
        return [*lines, f"{len(found)} sandbox{'es' if len(found) != 1 else ''} {verb}"]
    finally:
        await backend.close()


def reap(query: ReapQuery) -> list[str]:
    """Run a reap against the backend the query names (Daytona: from the environment)."""
    if query.backend == "daytona":
        from rl_daytona.backends.daytona_options import api_key

        api_key()
        spec = BackendSpec(kind="daytona", daytona=DaytonaOptions().resolved())
    else:
        spec = BackendSpec(kind="local", root=str(query.root), isolation="none")
    return asyncio.run(reap_with(make_backend(spec), query))
