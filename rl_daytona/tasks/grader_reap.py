"""Inside the sandbox, before grading: end every process the agent left running (stdlib only).

The host sends this file's source on stdin to `python -I -B -` as a command of its own, before
the grading command, on backends whose processes outlive a command (Daytona). It holds no
secret, so a leftover process that races it learns nothing.

Invariant: when it prints `RLREAP <n>` and exits 0, no process of its uid is left alive but its
own ancestors (the session that runs it) and pid 1: it stops every other one (a stopped process
cannot fork), kills them, and scans /proc again until a scan finds none (zombies aside).
Never run it where its uid owns processes that are not the sandbox's (e.g. on a host).
"""

from __future__ import annotations

import os
import signal

MAX_ROUNDS = 100


def _status(pid: int) -> dict[str, str]:
    fields = {}
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def ancestors() -> set[int]:
    seen, pid = set(), os.getpid()
    while pid > 0 and pid not in seen:
        seen.add(pid)
        try:
            pid = int(_status(pid)["PPid"])
        except (OSError, KeyError, ValueError):
            break
    return seen


def leftovers(uid: int, keep: set[int]) -> list[int]:
    """Live processes of `uid` (real or effective) other than `keep` and pid 1."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in keep or name == "1":
            continue
        try:
            status = _status(int(name))
        except OSError:
            continue  # gone already
        uids = {int(u) for u in status.get("Uid", "").split()[:2]}
        if uid in uids and not status.get("State", "").startswith(("Z", "X")):
            found.append(int(name))
    return found


def reap() -> int:
    uid, keep, ended = os.getuid(), ancestors(), set()
    for _ in range(MAX_ROUNDS):
        found = [pid for pid in leftovers(uid, keep) if pid not in ended]  # killed ones may linger a moment
        if not found:
            return len(ended)
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in found:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        ended.update(found)
    raise SystemExit(f"processes kept appearing after {MAX_ROUNDS} rounds")


if __name__ == "__main__":
    print(f"RLREAP {reap()}", flush=True)
