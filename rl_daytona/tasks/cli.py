"""`rl-daytona tasks list|check|calibrate SPEC`: look at, prove and calibrate a taskset.

Invariant: the taskset is loaded (and a bad one refused with one line, exit 2) before any
sandbox, Ray or policy starts. `check` exits 1 when any instance is broken, 3 when none is but
a sandbox failed, else 0; `calibrate` exits like `eval` (3 when rollouts hit infrastructure errors).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rl_daytona.tasks.calibrate import Band
from rl_daytona.tasks.check import InstanceCheck

SPEC_HELP = "a built-in taskset name ('calc') or 'package.module:ATTRIBUTE' of your own"


def _band(text: str) -> Band:
    try:
        low, high = (float(x.strip().rstrip("%")) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LOW:HIGH like 0.1:0.9, got {text!r}") from None
    low, high = (low / 100, high / 100) if "%" in text else (low, high)
    try:
        return Band(low, high)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_parser(sub: argparse._SubParsersAction, add_run_flags: Any) -> None:  # type: ignore[type-arg]
    tasks = sub.add_parser("tasks", help="list, check and calibrate a taskset before training on it",
                           description="Look at a taskset (list), prove every instance sound in real sandboxes "
                                       "(check), and measure whether a policy can learn from it (calibrate).")
    kinds = tasks.add_subparsers(dest="tasks_command", required=True, metavar="ACTION", parser_class=type(tasks))
    ls = kinds.add_parser("list", help="the taskset's instances and splits, one line each")
    ls.add_argument("spec", help=SPEC_HELP)
    ck = kinds.add_parser("check", help="seed, grade untouched, re-seed and grade the reference fix of every instance",
                          description="For every instance, in real sandboxes: it seeds; the seeded workspace does "
                                      "not already pass; the task's reference solution (if it gives one) pays 1.0; "
                                      "seeding twice gives the same workspace; grading time and CPU. Exit 1 when "
                                      "any instance is broken.")
    ck.add_argument("spec", help=SPEC_HELP)
    ck.add_argument("--split", default="all", help="only this split's instances (default: all)")
    ck.add_argument("--backend", default="local", choices=["local", "daytona"], help="where sandboxes run")
    ck.add_argument("--isolation", default="bwrap", choices=["bwrap", "none"], help="local sandbox isolation")
    ck.add_argument("--snapshot", default="auto", help="daytona: snapshot name, or 'auto' (Dockerfile.hud)")
    ck.add_argument("--max-concurrent", type=int, default=4, help="instances checked at once (default 4)")
    ck.add_argument("--deadline", type=float, default=300.0, help="seconds per attempt (seed + fix + grade)")
    ck.add_argument("--json", type=Path, default=None, help="also write the findings to this JSON file")
    cb = kinds.add_parser("calibrate", help="run each instance GROUP times with a policy: pass rates, spread, band",
                          description="Run every instance of the split GROUP times (as `eval` does, writing the "
                                      "same run folder and report), then show per instance the pass rate and "
                                      "whether its group disagrees, flag instances with no training signal, and "
                                      "check the base pass rate against the band where groups disagree.")
    cb.add_argument("spec", help=SPEC_HELP)
    cb.add_argument("--split", default="all", help="split to calibrate on (default: all)")
    cb.add_argument("--group", type=int, default=8, help="attempts per instance (one group per instance)")
    cb.add_argument("--band", type=_band, default=Band(), help="LOW:HIGH base pass rate band (default 0.1:0.9)")
    add_run_flags(cb, taskset_flag=False)


def run(args: argparse.Namespace, eval_config: Any) -> int:
    from rl_daytona.tasks import get_taskset

    taskset = get_taskset(args.spec)
    if args.tasks_command == "list":
        try:
            print("\n".join(list_lines(taskset)), flush=True)
        except BrokenPipeError:  # `tasks list calc | head`: the reader has all it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    if args.tasks_command == "check":
        return _check(args, taskset.split(args.split))
    taskset.split(args.split)
    args.taskset = args.spec
    return _calibrate(args, eval_config(args))


def list_lines(taskset: Any) -> list[str]:
    """One line per instance (its splits, whether it gives a reference solution), one per split."""
    in_splits: dict[str, list[str]] = {}
    for split, ids in taskset.splits.items():
        for i in ids:
            in_splits.setdefault(i, []).append(split)
    lines = [f"taskset {taskset.name}: {len(taskset.instances)} instances, {len(taskset.splits)} splits"]
    for inst in taskset.instances:
        splits = ",".join(in_splits.get(inst.instance_id, [])) or "-"
        ref = "yes" if inst.task.solution is not None else "no"
        lines.append(f"instance {inst.instance_id}  splits={splits}  reference={ref}")
    for split, ids in taskset.splits.items():
        lines.append(f"split {split} ({len(ids)}): {' '.join(ids)}")
    return lines


def _check(args: argparse.Namespace, instances: list[Any]) -> int:
    from rl_daytona.backends import DaytonaOptions, make_backend
    from rl_daytona.supply import backend_spec, resolve_daytona
    from rl_daytona.tasks.check import check_all
    from rl_daytona.types import SandboxLimits

    if args.max_concurrent < 1 or not args.deadline > 0:
        raise ValueError("--max-concurrent must be at least 1 and --deadline positive")
    console = _console()
    daytona = DaytonaOptions(snapshot=args.snapshot)
    if args.backend == "daytona":
        daytona = resolve_daytona(daytona, console.print)
    run_id = f"check-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory(prefix="rl-daytona-check-") as root:
        backend = make_backend(backend_spec(args.backend, Path(root), args.isolation, SandboxLimits(), daytona))
        results = asyncio.run(_checked(backend, instances, run_id, args, console, check_all))
    console.print(render_check(results, f"tasks check {args.spec} / {args.split} ({args.backend})"))
    if args.json:
        args.json.write_text(json.dumps([_as_json(r) for r in results], indent=2))
    if any(r.verdict == "broken" for r in results):
        return 1
    return 3 if any(r.verdict == "error" for r in results) else 0


async def _checked(backend: Any, instances: list[Any], run_id: str, args: argparse.Namespace, console: Console,
                   check_all: Any) -> list[InstanceCheck]:
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("broken {task.fields[broken]}"), TimeElapsedColumn(), console=console)
    broken = 0
    try:
        with progress:
            bar = progress.add_task("check", total=len(instances), broken=0)

            def done(result: InstanceCheck) -> None:
                nonlocal broken
                broken += result.verdict == "broken"
                progress.update(bar, advance=1, broken=broken)

            return await check_all(backend, instances, run_id, args.max_concurrent, done, args.deadline)
    finally:
        await backend.close()


def _console() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=max(console.width, 120))  # a log: room for tables


def _reward(grade: Any) -> str:
    if grade is None:
        return "-"
    return f"{grade.reward:.1f} {grade.passed}/{grade.expected}"


_VERDICT_STYLE = {"ok": "green", "ok, no reference": "yellow", "broken": "bold red", "error": "red"}


def render_check(results: list[InstanceCheck], title: str) -> Table:
    """One row per instance; the reasons of broken and failed ones as the caption, one line each."""
    table = Table(title=title)
    for name in ("instance", "seed s", "untouched", "reference", "reseed", "grade s", "CPU s", "verdict"):
        table.add_column(name, justify="left" if name in ("instance", "verdict") else "right", no_wrap=True)
    for r in results:
        table.add_row(escape(r.instance_id), _num(r.seed_seconds), _reward(r.untouched),
                      _reward(r.reference) if r.has_reference else "none",
                      {None: "-", True: "same", False: "[red]differs[/]"}[r.same_seed], _num(r.grade_seconds),
                      _num(r.grade_cpu_seconds), f"[{_VERDICT_STYLE[r.verdict]}]{r.verdict}[/]")
    counts = {v: sum(r.verdict == v for r in results) for v in _VERDICT_STYLE}
    lines = [", ".join(f"{n} {v}" for v, n in counts.items() if n) + f" of {len(results)} instances" + _p50s(results)]
    lines += [f"{r.verdict} {escape(r.instance_id)}: {escape('; '.join(r.problems) or r.error)}"
              for r in results if r.problems or r.error]
    table.caption = "\n".join(lines)
    table.caption_justify = "left"
    return table


def _p50s(results: list[InstanceCheck]) -> str:
    walls = sorted(r.grade_seconds for r in results if r.grade_seconds is not None)
    cpus = sorted(r.grade_cpu_seconds for r in results if r.grade_cpu_seconds is not None)
    wall = f"; grading p50 {walls[len(walls) // 2]:.2f} s wall" if walls else ""
    return wall + (f", {cpus[len(cpus) // 2]:.2f} CPU-s" if wall and cpus else "")


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _as_json(r: InstanceCheck) -> dict[str, Any]:
    from dataclasses import asdict

    return {**asdict(r), "verdict": r.verdict}


def _calibrate(args: argparse.Namespace, cfg: Any) -> int:
    from rl_daytona.eval import run_eval
    from rl_daytona.tasks.calibrate import calibrate, render_calibration

    console = _console()
    summary = run_eval(cfg, console)
    cal = calibrate(summary, args.group, args.band)
    (args.out / "calibration.json").write_text(json.dumps(cal.to_json(), indent=2))
    console.print(render_calibration(cal, f"tasks calibrate {args.spec} / {args.split} (group {args.group})"))
    return 3 if summary["counts_by_status"].get("infra_error", 0) else 0
