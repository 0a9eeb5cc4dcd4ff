"""The SandboxPool's configuration: how far ahead of demand it provisions and how it treats failed
creates. A leaf module, so that the pool and its stock both import it and neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass

from rl_daytona.planner import PlannerConfig


@dataclass(frozen=True)
class PoolConfig:
    """How far ahead of demand the pool provisions, and how it treats failed creates."""

    warm_size: int = 16
    max_creating: int = 32
    create_retries: int = 3
    retry_backoff: float = 0.25
    claim_timeout: float = 120.0
    probe: bool = True
    reprobe_after: float = 30.0  # a sandbox probed on arrival is handed out unprobed within this many seconds
    ledger: str = ""  # append-only JSON lines of sandbox ids (created / forked / deleted); "" = none
    forking: str = "auto"  # auto: fork when the backend's first sandbox can; never; always
    planner: PlannerConfig = PlannerConfig()

    def __post_init__(self) -> None:
        if self.warm_size < 0 or self.max_creating < 1 or self.create_retries < 0:
            raise ValueError("pool needs warm_size >= 0, max_creating >= 1 and create_retries >= 0")
        if self.forking not in ("auto", "never", "always"):
            raise ValueError(f"forking must be auto, never or always, got {self.forking!r}")
