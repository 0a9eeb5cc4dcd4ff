"""Which Ray cluster a run joins, decided before `ray.init` and bounded in time.

Invariant: an address the user gave (`--address` or RAY_ADDRESS) is joined only once its port
answers, within `join_timeout_s`, else the run is refused in one line; with no address, a live
cluster that `ray start` left on this machine is joined and named, and a dead one (its head
killed without `ray stop`) is passed over with one line and a fresh local Ray is started,
instead of Ray's own ~14-minute wait on the stale address.
"""

from __future__ import annotations

import os
import re
import socket
import time
from dataclasses import dataclass
from typing import Callable

JOIN_TIMEOUT_S = 30.0
_HOST_PORT = re.compile(r"^(?:ray://)?\[?(?P<host>[^\]/]+?)\]?:(?P<port>\d+)$")


@dataclass(frozen=True)
class JoinPlan:
    """What to pass to `ray.init(address=...)` and the line to print about it (or "")."""

    address: str | None
    note: str = ""


def port_answers(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """True when something accepts a TCP connection at host:port within timeout_s."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def split_address(address: str) -> tuple[str, int] | None:
    """(host, port) of a `host:port` or `ray://host:port` address; None for other forms."""
    match = _HOST_PORT.match(address.strip())
    return (match["host"], int(match["port"])) if match else None


def wait_for_address(address: str, timeout_s: float, probe: Callable[[str, int], bool] = port_answers) -> None:
    """Return once the address answers; raise ValueError (one line) after timeout_s."""
    parts = split_address(address)
    if parts is None:
        return  # a form we cannot probe ('auto', a job-server URL): Ray decides
    deadline = time.monotonic() + timeout_s
    while not probe(*parts):
        if time.monotonic() >= deadline:
            raise ValueError(f"cannot join the Ray cluster at {address}: nothing answers there after "
                             f"{timeout_s:.0f} s; start it (`ray start --head`) or unset RAY_ADDRESS / --address "
                             f"to run on a fresh local Ray")
        time.sleep(1.0)


def last_started_cluster() -> str | None:
    """The address `ray start` last recorded on this machine (Ray's ray_current_cluster file)."""
    from ray._private.utils import read_ray_address

    return read_ray_address() or None


def plan_join(explicit: str | None = None, recorded: str | None = None,
              probe: Callable[[str, int], bool] = port_answers,
              join_timeout_s: float = JOIN_TIMEOUT_S) -> JoinPlan:
    """The join decision. `explicit` is the user's address (flag or RAY_ADDRESS); `recorded` the
    address of the last `ray start` here (read from Ray's file when not given)."""
    if explicit:
        wait_for_address(explicit, join_timeout_s, probe)
        return JoinPlan(explicit)
    recorded = recorded if recorded is not None else last_started_cluster()
    parts = split_address(recorded) if recorded else None
    if parts is None:
        return JoinPlan(None)
    if probe(*parts):
        return JoinPlan(recorded, f"joining the Ray cluster running on this machine at {recorded}")
    return JoinPlan("local", f"the Ray cluster last started on this machine ({recorded}) is not running; "
                             f"starting a fresh local Ray (`ray stop` clears the stale record)")


def plan_from_environment() -> JoinPlan:
    """`plan_join` for this process: RAY_ADDRESS is the explicit address when set."""
    return plan_join(os.environ.get("RAY_ADDRESS") or None)
