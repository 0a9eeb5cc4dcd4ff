"""`rl-daytona bench spinup|rollouts`: the sandbox-supply and rollout-throughput benchmarks.

Invariant: a benchmark prints its figures and writes them under --out (spinup: ladder.csv,
ladder_waves.csv, ladder.png); it never asserts a speed (targets are read off the figures);
every sandbox it made is deleted when it ends, interrupted or not. Bad flags exit 2 with one line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path

from rl_daytona.bench.spinup import MODES
from rl_daytona.bench.targets import BACKENDS


def _widths(text: str) -> list[int]:
    try:
        widths = [int(w) for w in text.split(",") if w.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected widths like 8,32,128, got {text!r}") from None
    if not widths or min(widths) < 1:
        raise argparse.ArgumentTypeError(f"widths must be at least 1, got {text!r}")
    return widths


def _modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if not modes or unknown:
        raise argparse.ArgumentTypeError(f"modes are {', '.join(MODES)} (comma-separated), got {text!r}")
    return modes


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    bench = sub.add_parser("bench", help="benchmarks: sandbox spin-up ladder, rollout throughput",
                           description="Benchmarks that print figures (and write them under --out).")
    kinds = bench.add_subparsers(dest="bench", required=True, metavar="BENCH", parser_class=type(bench))
    sp = kinds.add_parser("spinup", help="time to usable for N sandboxes at each width, by mode",
                          description="Ask the SandboxPool for N sandboxes at once and time each until a command "
                                      "has run in it (see rl_daytona.bench.spinup for the exact definition).")
    sp.add_argument("--backend", default="local", choices=BACKENDS,
                    help="local (this machine), daytona-sim (starts `rl-daytona daytona-sim` with the published "
                         "latency model), or model (that latency model in virtual time: no sandboxes, instant)")
    sp.add_argument("--ladder", type=_widths, default=[8, 32, 128, 256, 512], help="widths, e.g. 8,32,128,256,512")
    sp.add_argument("--mode", type=_modes, default=["auto"],
                    help="cold, warm, fork, auto, or several comma-separated (see the module docstring)")
    sp.add_argument("--reps", type=int, default=3, help="waves per width and mode (default 3)")
    sp.add_argument("--out", type=Path, required=True, help="folder for ladder.csv, ladder_waves.csv, ladder.png")
    sp.add_argument("--warm-on-hand", type=int, default=16,
                    help="auto: idle sandboxes the pool holds when the clock starts (a run's warm queue; default 16)")
    sp.add_argument("--max-creating", type=int, default=256, help="cold creates in flight at most (default 256)")
    sp.add_argument("--time-scale", type=float, default=1.0, help="daytona-sim: multiply every simulated delay")
    sp.add_argument("--fail-rate", type=float, default=0.0,
                    help="daytona-sim/model: fraction of creates that fail (injected, on top of the model's)")
    sp.add_argument("--transport", default="toolbox", choices=["toolbox", "ssh"], help="daytona-sim: command transport")
    sp.add_argument("--seed", type=int, default=0, help="daytona-sim/model: seed of the latency and fault draws")
    ro = kinds.add_parser("rollouts", help="rollouts/s, wall / CPU floor and orchestration overhead per rollout",
                          description="Run N rollouts of the built-in policy on calc (local backend) through "
                                      "the pool, the fleet and a Learner's add(); print the figures.")
    ro.add_argument("--n", type=int, default=1024, help="rollouts (rounded to whole groups over the taskset's tasks)")
    ro.add_argument("--taskset", default="calc", help="a built-in taskset name or package.module:ATTRIBUTE (default calc)")
    ro.add_argument("--max-concurrent", type=int, default=64, help="rollouts in flight (default 64)")
    ro.add_argument("--out", type=Path, default=Path("runs/bench-rollouts"), help="run folder (figures.json)")


def run(args: argparse.Namespace) -> int:
    if args.bench == "spinup":
        return _spinup(args)
    return _rollouts(args)


def _spinup(args: argparse.Namespace) -> int:
    from rl_daytona.bench import ladder
    from rl_daytona.bench.spinup import run_wave
    from rl_daytona.bench.targets import SimSettings, open_target

    if args.reps < 1 or args.warm_on_hand < 0 or args.max_creating < 1 or not 0 <= args.fail_rate <= 1:
        raise ValueError("--reps and --max-creating must be >= 1, --warm-on-hand >= 0, --fail-rate in [0, 1]")
    args.out.mkdir(parents=True, exist_ok=True)
    sim = SimSettings(args.time_scale, args.fail_rate, args.seed, args.transport)
    with open_target(args.backend, args.out / "work", sim) as target:
        for mode in args.mode:
            for width in args.ladder:
                waves = []
                for rep in range(args.reps):
                    wave = _run(args.backend, run_wave(target, mode, width, rep, args.warm_on_hand, args.max_creating))
                    ladder.append_csv(args.out / "ladder_waves.csv", ladder.WAVE_FIELDS, ladder.wave_row(wave))
                    waves.append(wave)
                row = ladder.Level(tuple(waves)).row()
                ladder.append_csv(args.out / "ladder.csv", ladder.LEVEL_FIELDS, row)
                print(json.dumps(row), flush=True)
    sim_log = args.out / "work" / "daytona-sim.log"
    if args.backend == "daytona-sim" and sim_log.exists():  # the sim's own count of failed creates
        print((sim_log.read_text().strip().splitlines() or [""])[-1])
    png = ladder.plot(_latest(ladder.read_levels(args.out / "ladder.csv")), args.out / "ladder.png",
                      "time to usable by width (p50 solid, max dashed)")
    print(f"wrote {args.out / 'ladder.csv'} and {png}")
    return 0


def _run(backend: str, coro: object) -> object:
    if backend == "model":
        from rl_daytona.bench.model import run_virtual

        return run_virtual(coro)  # type: ignore[arg-type]
    return asyncio.run(coro)  # type: ignore[arg-type]


def _latest(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """The last measured row of each (backend, mode, width)."""
    return list({(r["backend"], r["mode"], r["width"]): r for r in rows}.values())


def _rollouts(args: argparse.Namespace) -> int:
    from rl_daytona.bench.rollouts import RolloutBench, run_rollout_bench

    if args.n < 1 or args.max_concurrent < 1:
        raise ValueError("--n and --max-concurrent must be at least 1")
    figures = run_rollout_bench(RolloutBench(n=args.n, max_concurrent=args.max_concurrent, out=args.out,
                                             taskset=args.taskset))
    print(json.dumps(figures, indent=2))
    os.makedirs(args.out, exist_ok=True)
    (args.out / "figures.json").write_text(json.dumps(figures, indent=2))
    return 0
