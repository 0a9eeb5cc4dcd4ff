"""`rl-daytona`: one CLI with subcommands. YAML/flags stop here; everything below is dataclasses.

Invariant: a bad flag, config or environment ends the command with exit code 2 and one line
saying what to fix; a run that finished with infrastructure errors exits 3.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from rl_daytona.types import SandboxLimits, Settings


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit code 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _add_run_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--taskset", default="calc", help="taskset name ('calc') or 'package.module:ATTRIBUTE' of your own")
    p.add_argument("--backend", default="local", choices=["local"], help="where sandboxes run (default: local)")
    p.add_argument("--isolation", default="bwrap", choices=["bwrap", "none"],
                   help="local sandbox isolation: bubblewrap (default) or none (explicit opt-out, no isolation)")
    p.add_argument("--policy", default="builtin",
                   help="'builtin' (the built-in CPU model, started for the run) or an OpenAI-compatible base URL")
    p.add_argument("--model", default="builtin", help="model name sent to the policy endpoint")
    p.add_argument("--max-concurrent", type=_positive_int, default=64, help="rollouts in flight at once")
    p.add_argument("--rollout-actors", type=_positive_int, default=2, help="RolloutActors (each runs many rollouts)")
    p.add_argument("--max-turns", type=_positive_int, default=8, help="agent turns per attempt")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    p.add_argument("--deadline", type=float, default=300.0, help="wall-clock seconds per rollout")
    p.add_argument("--exec-timeout", type=float, default=30.0, help="seconds per shell command")
    p.add_argument("--warm-size", type=int, default=16, help="sandboxes the pool keeps ready ahead of demand")
    p.add_argument("--cpu-seconds", type=_positive_int, default=30, help="CPU seconds per sandbox command")
    p.add_argument("--memory-mb", type=_positive_int, default=1024, help="address-space limit per command (MB)")
    p.add_argument("--max-processes", type=_positive_int, default=64, help="processes per sandbox command")
    p.add_argument("--out", type=Path, required=True, help="run folder (summary.json, rollouts.jsonl, sandboxes/)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rl-daytona", description=(
        "Run reinforcement-learning coding environments at scale: sandboxes, agents, pytest graders."))
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    ev = sub.add_parser("eval", help="run every task of a split GROUP times and report pass rates",
                        description="Run every task of a split GROUP times in isolated sandboxes and "
                                    "print pass rates per task with the spread inside each group.")
    ev.add_argument("--split", default="heldout", help="split of the taskset ('train', 'heldout', 'all')")
    ev.add_argument("--group", type=_positive_int, default=8, help="attempts per task (one group per task)")
    _add_run_flags(ev)
    return parser


def _eval(args: argparse.Namespace) -> int:
    from rl_daytona.eval import EvalConfig, run_eval
    from rl_daytona.pool import PoolConfig

    settings = Settings(model=args.model, max_turns=args.max_turns, temperature=args.temperature,
                        exec_timeout=args.exec_timeout, rollout_deadline=args.deadline)
    limits = SandboxLimits(cpu_seconds=args.cpu_seconds, memory_mb=args.memory_mb,
                           max_processes=args.max_processes)
    cfg = EvalConfig(out=args.out, taskset=args.taskset, split=args.split, group=args.group,
                     max_concurrent=args.max_concurrent, backend=args.backend, isolation=args.isolation,
                     policy=args.policy, rollout_actors=args.rollout_actors, settings=settings,
                     limits=limits, pool=PoolConfig(warm_size=args.warm_size))
    summary = run_eval(cfg)
    infra = summary["counts_by_status"].get("infra_error", 0)
    if infra:
        print(f"rl-daytona: {infra} of {summary['rollouts']} rollouts hit infrastructure errors "
              f"(see {args.out / 'rollouts.jsonl'})", file=sys.stderr)
        return 3
    return 0


def main(argv: Sequence[str] | None = None) -> None:
    from rl_daytona.backends import IsolationUnavailableError
    from rl_daytona.tasks import TaskError

    args = build_parser().parse_args(argv)
    try:
        code = {"eval": _eval}[args.command](args)
    except (TaskError, ValueError, IsolationUnavailableError, FileNotFoundError) as exc:
        print(f"rl-daytona {args.command}: error: {exc}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        print(f"rl-daytona {args.command}: interrupted; sandboxes of the run were deleted", file=sys.stderr)
        code = 130
    raise SystemExit(code)


if __name__ == "__main__":
    main()
