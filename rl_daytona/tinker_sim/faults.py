"""Injectable faults of tinker-sim: what a hosted service does to a client on a bad day.

    Faults(rate_limit=2)     the next 2 calls of a matching route answer 429 with Retry-After
    Faults(server_error=3)   the next 3 answer 500 (before doing anything)
    Faults(lost_reply=1)     the next one is APPLIED, then answered 500 as if the reply was lost
    Faults(slow_future=4, slow_futures=1)  the next future answers `try_again` to its first 4 retrievals
    Faults(failed_future=2)  the next 2 calls are NOT applied and their futures fail (the SDK
                             raises RequestFailedError; the caller's retry is a new call)

Invariant: a fault fires on the routes `routes` names (default: the training and sampling
calls), each counter is spent one call at a time, and `fired` counts what fired, so a test
can show every injected fault was met and every call still applied once.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

TRAINING_ROUTES = ("forward_backward", "optim_step", "save_weights", "save_weights_for_sampler",
                   "load_weights", "asample")


@dataclass
class Faults:
    rate_limit: int = 0
    server_error: int = 0
    lost_reply: int = 0
    failed_future: int = 0
    slow_future: int = 0  # try_again answers per affected future
    slow_futures: int = 0  # how many futures are slow
    retry_after: float = 0.05  # seconds, in the Retry-After of a 429 or an injected 500
    routes: tuple[str, ...] = TRAINING_ROUTES
    fired: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, kind: str, route: str) -> bool:
        """Spend one `kind` fault on a call of `route`, if one is left and the route matches."""
        if route not in self.routes:
            return False
        with self.lock:
            left = getattr(self, kind)
            if left <= 0:
                return False
            setattr(self, kind, left - 1)
            self.fired[kind] = self.fired.get(kind, 0) + 1
            return True

    def slow_polls(self, route: str) -> int:
        return self.slow_future if self.take("slow_futures", route) else 0
