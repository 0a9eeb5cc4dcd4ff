"""What one local sandbox costs: create, one command (`echo usable`), delete, in CPU and wall.

    python scripts/probe_exec_cost.py [--n 200] [--concurrency 4] [--ballast-mb 0]
        [--launcher helper|prlimit|preexec] [--command 'echo usable'] [--calc]

`--calc` seeds each sandbox with calc's (unbroken) files first, e.g. to time
`--command 'python -m pytest -q --tb=no'`, the command a calc attempt runs most.

CPU is split into this process (`parent`: the backend's own Python, asyncio's subprocess
machinery, the disk-quota watch) and its reaped children (`children`: bwrap, the sandbox's pid 1
and the shells inside it). Launchers: `helper` (the default: the compiled pid-1 helper sets the
limits and drops to the sandbox user), `prlimit` (the fallback without a C compiler: util-linux
prlimit, setpriv and a pid-1 sh), `preexec` (the fallback without prlimit either: a Python
`preexec_fn`). `--ballast-mb` grows this process first (touched pages), to show what a big
parent such as a Ray worker pays per command: a `preexec_fn` makes Python fork() the whole
process, the others let it vfork(). Kernel work done outside the process tree (a network
namespace's teardown) is in neither figure. A tuning tool, not a benchmark: figures move with
the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import tempfile
import time
from pathlib import Path

from rl_daytona.backends import bwrap as bw
from rl_daytona.backends.local import LocalBackend
from rl_daytona.tasks.calc import bugs as calc_bugs


CALC_FILES = {path.name: path.read_bytes() for path in (Path(calc_bugs.__file__).parent / "files").iterdir()
              if path.is_file()}


def _cpu() -> tuple[float, float]:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


async def _measure(n: int, concurrency: int, command: str, calc: bool, helper: bool) -> None:
    backend = LocalBackend(Path(tempfile.mkdtemp(prefix="exec-cost-")), pid1_helper=helper)
    slots = asyncio.Semaphore(concurrency)
    handles: list = []

    async def create() -> None:
        async with slots:
            handle = await backend.create("probe")
            if calc:
                await backend.write_files(handle, CALC_FILES)
            handles.append(handle)

    async def run(handle: object) -> None:
        async with slots:
            result = await backend.exec(handle, command)  # type: ignore[arg-type]
            if result.exit_code != 0:
                raise SystemExit(f"command failed in the sandbox: {result.stderr.strip()}")

    async def delete(handle: object) -> None:
        async with slots:
            await backend.delete(handle)  # type: ignore[arg-type]

    phases = (("create", lambda: [create() for _ in range(n)]),
              ("command", lambda: [run(h) for h in handles]),
              ("delete", lambda: [delete(h) for h in list(handles)]))
    for name, coros in phases:
        (own0, kids0), started = _cpu(), time.monotonic()
        await asyncio.gather(*coros())
        (own1, kids1), wall = _cpu(), time.monotonic() - started
        print(f"{name:8s} per sandbox: parent {1000 * (own1 - own0) / n:6.2f} ms CPU, "
              f"children {1000 * (kids1 - kids0) / n:6.2f} ms CPU, wall {1000 * wall / n:6.2f} ms "
              f"({concurrency} at once)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--ballast-mb", type=int, default=0, help="grow this process first (MB, touched)")
    parser.add_argument("--launcher", choices=("helper", "prlimit", "preexec"), default="helper")
    parser.add_argument("--command", default="echo usable")
    parser.add_argument("--calc", action="store_true", help="seed calc's files into each sandbox first")
    args = parser.parse_args()
    if args.launcher == "preexec":
        bw._PRLIMIT = None
    elif args.launcher == "prlimit" and bw._PRLIMIT is None:
        raise SystemExit("no prlimit on this machine (util-linux)")
    ballast = bytearray(args.ballast_mb << 20)
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    print(f"launcher {args.launcher}, this process grown by {args.ballast_mb} MB")
    asyncio.run(_measure(args.n, args.concurrency, args.command, args.calc, args.launcher == "helper"))


if __name__ == "__main__":
    main()
