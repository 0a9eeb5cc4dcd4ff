"""What grading one calc attempt costs in CPU on the local backend (bubblewrap), sequentially.

    python scripts/probe_grade_cost.py [--n 20] [--buggy]

Each round seeds one sandbox with calc's pristine files (or a buggy variant with `--buggy`),
grades it with `grade_pytest` (the real grader), and deletes it. CPU is what the grading
commands' processes used (RUSAGE_CHILDREN: bwrap, the bootstrap, pytest, the worker) plus this
process's own, per grading; the median wall time per grading is printed too. A tuning tool,
not a benchmark: figures move with the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import tempfile
import time
from pathlib import Path

from rl_daytona.backends.local import LocalBackend
from rl_daytona.tasks.calc import N_TESTS, TEST_SOURCE, buggy_source, pristine_source
from rl_daytona.tasks.grader import grade_pytest


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


async def probe(n: int, buggy: bool) -> None:
    backend = LocalBackend(Path(tempfile.mkdtemp(prefix="probe-grade-")), isolation="bwrap")
    source = buggy_source(0) if buggy else pristine_source()
    walls, children, parent, rewards = [], 0.0, 0.0, []
    for _ in range(n):
        sandbox = await backend.create("probe-grade")
        await backend.write_files(sandbox, {"calc.py": source, "test_calc.py": TEST_SOURCE})
        c0, p0, t0 = _cpu(resource.RUSAGE_CHILDREN), _cpu(resource.RUSAGE_SELF), time.monotonic()
        result = await grade_pytest(backend, sandbox, sources=["calc.py"], tests={"test_calc.py": TEST_SOURCE},
                                    expected_passed=N_TESTS)
        walls.append(time.monotonic() - t0)
        children += _cpu(resource.RUSAGE_CHILDREN) - c0
        parent += _cpu(resource.RUSAGE_SELF) - p0
        rewards.append(result.reward)
        await backend.delete(sandbox)
    print(f"gradings {n}  rewards {sorted(set(rewards))}  CPU per grading {1000 * (children + parent) / n:.0f} ms "
          f"(children {1000 * children / n:.0f} ms, this process {1000 * parent / n:.0f} ms)  "
          f"wall p50 {1000 * statistics.median(walls):.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20, help="gradings to run (default 20)")
    parser.add_argument("--buggy", action="store_true", help="grade a buggy calc.py (variant 0) instead")
    args = parser.parse_args()
    asyncio.run(probe(args.n, args.buggy))


if __name__ == "__main__":
    main()
