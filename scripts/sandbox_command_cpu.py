"""Sandbox CPU of each kind of command the built-in policy runs, and of one grading.

    python scripts/sandbox_command_cpu.py [--n 10] [--rounds 2] [--taskset calc] [--ab-hidden]

One local (bubblewrap) sandbox seeded with the taskset's first train task; each kind runs
`--n` times in a row and prints the mean CPU-ms of the processes it started (RUSAGE_CHILDREN:
bwrap, the pid-1 helper, the shell and everything under it). `--ab-hidden` alternates, round by
round, the sandbox as it is and one that sees rl_daytona's own editable-install .pth (the
hidden file of `PythonLayout`), so both are measured in the same minutes: this machine's speed
drifts by tens of percent within an hour.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from dataclasses import replace
from pathlib import Path

from rl_daytona.backends.local import LocalBackend
from rl_daytona.policy import vocab
from rl_daytona.tasks import TaskEnv, get_taskset

KINDS = {
    "true": "true",
    "python -c pass": "python -c pass",
    "quick test": vocab.QUICK_TEST,
    "look": vocab.LOOK_VERB,
    "edit + quick test": "f={source}; sed -i 's/@@never@@/x/' \"$f\" && " + vocab.QUICK_TEST,
    "compact pytest": vocab.PYTEST_COMPACT,
}


async def measure(backend: LocalBackend, taskset: str, n: int, label: str) -> None:
    instance = get_taskset(taskset).split("train")[0]
    sandbox = await backend.create("cpu-bench")
    env = TaskEnv(backend, sandbox)
    run = instance.start(env)
    await run.prompt()
    listing = (await backend.exec(sandbox, vocab.SOURCES_FIND)).stdout.split()
    source = listing[0] if listing else "x.py"
    for name, command in KINDS.items():
        command = command.replace("{source}", source)
        start = backend.cpu_seconds()
        for _ in range(n):
            result = await backend.exec(sandbox, command)
        print(f"{label:8s} {name:18s} {1000 * (backend.cpu_seconds() - start) / n:7.1f} CPU-ms  (exit {result.exit_code})")
    start = backend.cpu_seconds()
    for _ in range(n):
        graded = await run.reward()
        run = instance.start(env)
        await run.prompt()
    print(f"{label:8s} {'grading':18s} {1000 * (backend.cpu_seconds() - start) / n:7.1f} CPU-ms  (reward {graded.reward})")
    await backend.delete(sandbox)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--taskset", default="calc")
    parser.add_argument("--ab-hidden", action="store_true")
    args = parser.parse_args()
    backend = LocalBackend(Path(tempfile.mkdtemp(prefix="rl-daytona-cpu-")))
    layouts = [("as is", backend._python)]
    if args.ab_hidden:
        layouts.append(("unhidden", replace(backend._python, hidden=())))
    for _ in range(args.rounds):
        for label, layout in layouts:
            backend._python = layout
            asyncio.run(measure(backend, args.taskset, args.n, label))


if __name__ == "__main__":
    main()
