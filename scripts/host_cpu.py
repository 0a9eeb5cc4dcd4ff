"""Where a run's host CPU goes besides its sandboxes: sample the machine, then sum by process.

    python scripts/host_cpu.py sample DIR &          # every 10 s: /proc/stat and `ps` CPU times
    .venv/bin/rl-daytona train ... ; kill %1
    python scripts/host_cpu.py report DIR [T0 T1]    # the window's busy/idle CPU-s, then CPU-s by process

A run's wall against its CPU floor (`rl_daytona.cpu_floor`) counts only sandbox CPU; what the
driver, the policy service and the RolloutActors use on the same cores is the rest of the wall.
`ps` times cover long-lived processes only (a sandbox command is gone before the next sample),
so busy minus their sum is about the sandboxes' share. T0/T1: unix seconds (the sample files'
suffixes) bounding the window, e.g. Ray's start and the run's end.
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
import time
from pathlib import Path


def sample(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    while True:
        t = int(time.time())
        (out / f"stat.{t}").write_text(Path("/proc/stat").read_text().splitlines()[0] + "\n")
        ps = subprocess.run(["ps", "-eo", "pid,ppid,cputimes,args", "--no-headers"], capture_output=True, text=True)
        (out / f"ps.{t}").write_text(ps.stdout)
        time.sleep(10)


def _stat(path: Path) -> tuple[int, int]:
    v = [int(x) for x in path.read_text().split()[1:9]]
    return sum(v), v[3] + v[4]  # all jiffies, idle + iowait


def report(out: Path, t0: int | None, t1: int | None) -> None:
    stamps = sorted(int(p.name.split(".")[1]) for p in out.glob("stat.*"))
    stamps = [t for t in stamps if (t0 is None or t >= t0) and (t1 is None or t <= t1)]
    if len(stamps) < 2:
        sys.exit(f"host_cpu: fewer than two samples in {out} for that window")
    (a_all, a_idle), (b_all, b_idle) = _stat(out / f"stat.{stamps[0]}"), _stat(out / f"stat.{stamps[-1]}")
    hz = 100
    total, idle = (b_all - a_all) / hz, (b_idle - a_idle) / hz
    print(f"window {stamps[-1] - stamps[0]} s: busy {total - idle:.0f} CPU-s, idle {idle:.0f} CPU-s")
    first: dict[tuple[str, str], int] = {}
    last: dict[tuple[str, str], int] = {}
    for t in stamps:
        for line in (out / f"ps.{t}").read_text().splitlines():
            parts = line.split(None, 3)
            if len(parts) < 4:
                continue
            key = (parts[0], parts[3].strip()[:60])
            first.setdefault(key, int(parts[2]))
            last[key] = int(parts[2])
    by = collections.Counter()
    for key, cpu in last.items():
        found = re.match(r"(ray::\S+|\S*raylet|\S*gcs_server|\S+python\S* -m \S+|\S+)", key[1])
        by[found.group(1) if found else key[1]] += cpu - first[key]
    for name, cpu in by.most_common(12):
        if cpu:
            print(f"{cpu:6d}  {name}")


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("sample", "report"):
        sys.exit(__doc__)
    if sys.argv[1] == "sample":
        sample(Path(sys.argv[2]))
    else:
        bounds = [int(x) for x in sys.argv[3:5]]
        report(Path(sys.argv[2]), *(bounds if len(bounds) == 2 else (None, None)))
