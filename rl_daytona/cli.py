"""`rl-daytona`: one CLI with subcommands. YAML/flags stop here; everything below is dataclasses.

Invariant: a bad flag, config or environment ends the command with exit code 2 and one line
saying what to fix; a run that finished with infrastructure errors exits 3.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
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


def _positive_float(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def _temperature(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text}")
    return value


def _policy(text: str) -> str:
    if text != "builtin" and not text.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"must be 'builtin' or an http(s):// base URL, got {text!r}")
    return text


def _add_run_flags(p: argparse.ArgumentParser, taskset_flag: bool = True) -> None:
    if taskset_flag:
        p.add_argument("--taskset", default="calc",
                       help="taskset name ('calc') or 'package.module:ATTRIBUTE' of your own")
    p.add_argument("--backend", default="local", choices=["local", "daytona"],
                   help="where sandboxes run: local (bubblewrap on this machine, the default) or daytona "
                        "(Daytona's cloud through the daytona SDK; needs DAYTONA_API_KEY, reads DAYTONA_API_URL, "
                        "DAYTONA_TARGET and DAYTONA_SSH_GATEWAY)")
    p.add_argument("--isolation", default="bwrap", choices=["bwrap", "none"],
                   help="local sandbox isolation: bubblewrap (default) or none (explicit opt-out, no isolation)")
    p.add_argument("--policy", default="builtin", type=_policy,
                   help="'builtin' (the built-in CPU model, started for the run) or an OpenAI-compatible base URL")
    p.add_argument("--model", default="builtin", help="model name sent to the policy endpoint")
    p.add_argument("--max-concurrent", type=_positive_int, default=64, help="rollouts in flight at once (whole cluster)")
    p.add_argument("--rollout-actors", type=_positive_int, default=2,
                   help="RolloutActors (each runs many rollouts), dealt round-robin over the Ray nodes")
    p.add_argument("--rollout-actors-per-node", type=_positive_int, default=None,
                   help="instead: this many RolloutActors on every node, and on each node that joins mid-run")
    p.add_argument("--rollout-concurrency", type=_positive_int, default=None,
                   help="rollouts in flight per RolloutActor (default: --max-concurrent / --rollout-actors)")
    p.add_argument("--max-turns", type=_positive_int, default=Settings().max_turns, help="agent turns per attempt")
    p.add_argument("--temperature", type=_temperature, default=1.0, help="sampling temperature")
    p.add_argument("--deadline", type=_positive_float, default=Settings().rollout_deadline, help="wall-clock seconds per rollout")
    p.add_argument("--exec-timeout", type=_positive_float, default=30.0, help="seconds per shell command")
    p.add_argument("--warm-size", type=int, default=16, help="sandboxes the pool keeps ready ahead of demand")
    p.add_argument("--cpu-seconds", type=_positive_int, default=30, help="CPU seconds per sandbox command")
    p.add_argument("--memory-mb", type=_positive_int, default=1024, help="address-space limit per command (MB)")
    p.add_argument("--max-processes", type=_positive_int, default=64, help="processes per sandbox command")
    p.add_argument("--out", type=Path, required=True,
                   help="run folder (summary.json, rollouts.jsonl, sandboxes.jsonl ledger, sandboxes/)")
    p.add_argument("--address", default=None,
                   help="Ray cluster to join (host:port; default: RAY_ADDRESS, else a live `ray start` cluster on "
                        "this machine, else a fresh local Ray); an address that does not answer in 30 s is refused")
    d = p.add_argument_group("daytona backend (with --backend daytona)")
    d.add_argument("--snapshot", default="auto",
                   help="snapshot to create sandboxes from; 'auto' (default) builds Dockerfile.hud into a snapshot "
                        "named by a hash of its content, reusing it while nothing that shapes it changed")
    d.add_argument("--daytona-transport", default="ssh", choices=["ssh", "toolbox"],
                   help="how commands reach a sandbox: ssh (asyncssh, one connection per sandbox) or toolbox "
                        "(the SDK's process exec)")
    d.add_argument("--creates-per-minute", type=_positive_int, default=300,
                   help="sandbox creates per minute, shared by every actor of the run (your Daytona tier's limit)")
    d.add_argument("--max-creating", type=_positive_int, default=256,
                   help="sandbox creates in flight at once (past 256 Daytona's published failure rate rises)")
    d.add_argument("--no-warm-pool", action="store_true",
                   help="do not size a Daytona warm pool to the batch (cold creates only)")


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
    tr = sub.add_parser("train", help="train the built-in policy on a taskset's train split with group-relative RL",
                        description="Sample tasks from the train split each step, run GROUP attempts of each, "
                                    "train on complete groups, and evaluate the held-out split before the "
                                    "first step, every --eval-every steps and after the last.")
    tr.add_argument("--steps", type=_positive_int, default=10, help="optimizer steps")
    tr.add_argument("--tasks-per-step", type=_positive_int, default=16, help="task instances sampled per step")
    tr.add_argument("--group", type=_positive_int, default=8, help="attempts per task instance (one group)")
    tr.add_argument("--eval-every", type=int, default=0, help="also evaluate held-out every K steps (0: first/last only)")
    tr.add_argument("--eval-group", type=_positive_int, default=8, help="attempts per held-out task")
    tr.add_argument("--lr", type=float, default=0.2, help="Adam learning rate")
    tr.add_argument("--loss", default="importance_sampling", choices=["importance_sampling", "ppo"],
                    help="policy-gradient loss sent to forward_backward")
    tr.add_argument("--chunk-mb", type=float, default=5.0, help="byte budget per forward_backward call (MB)")
    tr.add_argument("--std-normalize", action="store_true", help="divide group advantages by the group's std")
    tr.add_argument("--off-policy", type=int, default=0,
                    help="overlap step t+1's rollouts with step t's training; drop rollouts older than this many versions")
    tr.add_argument("--seed", type=int, default=0, help="seed for task sampling and the policy's sampler")
    tr.add_argument("--resume", type=Path, default=None,
                    help="continue a stopped run: with --out the same RUNDIR, pick up at the step after the last one "
                         "in RUNDIR/metrics.jsonl (its checkpoint, appending to its files; --steps is the total); "
                         "with another --out, start a new run from RUNDIR's saved policy (weights, Adam state, version)")
    _add_run_flags(tr)
    rp = sub.add_parser("report", help="write RUNDIR/report.html: curves, variants, group spread, timings",
                        description="Write RUNDIR/report.html (one self-contained page, figures inline) and "
                                    "the figures as RUNDIR/report-*.png, from whatever the run folder holds.")
    rp.add_argument("rundir", type=Path, help="a run folder written by eval or train")
    sh = sub.add_parser("show", help="print one rollout as the model saw it, spans marked trained / not trained",
                        description="Print one rollout of RUNDIR/rollouts.jsonl: its stored token ids decoded span "
                                    "by span, each marked trained (sampled) or not trained (prompt, tool output), "
                                    "one block per datum, and the reward.")
    sh.add_argument("rundir", type=Path, help="a run folder written by eval or train")
    sh.add_argument("--rollout", default=None, help="rollout id (default: the first one with token ids)")
    sh.add_argument("--tokenizer", default=None,
                    help="tokenizer to decode with: a Hugging Face model name or a local folder (default: the "
                         "built-in vocabulary for a built-in run)")
    from rl_daytona.daytona_sim.cli import add_parser as add_daytona_sim_parser
    add_daytona_sim_parser(sub)
    _add_reap(sub)
    from rl_daytona.tasks.cli import add_parser as add_tasks_parser
    add_tasks_parser(sub, _add_run_flags)
    from rl_daytona.bench.cli import add_parser as add_bench_parser
    add_bench_parser(sub)
    return parser


def _add_reap(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    rp = sub.add_parser("reap", help="list and delete sandboxes left by runs (by the run label)",
                        description="List sandboxes carrying rl-daytona's run label and delete them: one run's "
                                    "(--run), those older than --older-than minutes, or (with neither) every "
                                    "run's. --dry-run only lists.")
    rp.add_argument("--backend", default="daytona", choices=["local", "daytona"], help="where to look (default: daytona)")
    rp.add_argument("--root", type=Path, default=None, help="local backend: a run folder's sandboxes/ directory")
    rp.add_argument("--run", default=None, help="only this run id (see summary.json's run_id)")
    rp.add_argument("--older-than", type=float, default=None, help="only sandboxes created more than this many minutes ago")
    rp.add_argument("--dry-run", action="store_true", help="list, do not delete")


def _daytona_options(args: argparse.Namespace) -> "DaytonaOptions":
    from rl_daytona.backends import DaytonaOptions

    return DaytonaOptions(snapshot=args.snapshot, transport=args.daytona_transport,
                          creates_per_minute=args.creates_per_minute, max_creating=args.max_creating,
                          warm_pool=not args.no_warm_pool)


def _settings(args: argparse.Namespace) -> Settings:
    return Settings(model=args.model, max_turns=args.max_turns, temperature=args.temperature,
                    exec_timeout=args.exec_timeout, rollout_deadline=args.deadline)


def _limits(args: argparse.Namespace) -> SandboxLimits:
    return SandboxLimits(cpu_seconds=args.cpu_seconds, memory_mb=args.memory_mb, max_processes=args.max_processes)


def _eval_config(args: argparse.Namespace) -> "EvalConfig":
    from rl_daytona.endpoint_check import preflight
    from rl_daytona.eval import EvalConfig
    from rl_daytona.pool import PoolConfig

    preflight(args.policy, args.model, need_token_ids=False)  # a dead URL or unknown model: one line, exit 2
    return EvalConfig(out=args.out, taskset=args.taskset, split=args.split, group=args.group,
                      max_concurrent=args.max_concurrent, backend=args.backend, isolation=args.isolation,
                      policy=args.policy, rollout_actors=args.rollout_actors, settings=_settings(args),
                      rollout_actors_per_node=args.rollout_actors_per_node or 0,
                      rollout_concurrency=args.rollout_concurrency or 0,
                      limits=_limits(args), pool=PoolConfig(warm_size=args.warm_size),
                      daytona=_daytona_options(args))


def _eval(args: argparse.Namespace) -> int:
    from rl_daytona.eval import run_eval

    summary = run_eval(_eval_config(args))
    infra = summary["counts_by_status"].get("infra_error", 0)
    if infra:
        print(f"rl-daytona: {infra} of {summary['rollouts']} rollouts hit infrastructure errors "
              f"(see {args.out / 'rollouts.jsonl'})", file=sys.stderr)
        return 3
    return 0


def _train(args: argparse.Namespace) -> int:
    from rl_daytona.endpoint_check import preflight
    from rl_daytona.pool import PoolConfig
    from rl_daytona.train import TrainConfig, run_train

    preflight(args.policy, args.model, need_token_ids=True)  # no token ids: refuse before any sandbox
    if args.policy != "builtin":
        raise ValueError("train drives the built-in model service (sampling and training); --policy must be builtin")
    if not (math.isfinite(args.chunk_mb) and args.chunk_mb > 0):
        raise ValueError(f"--chunk-mb must be positive, got {args.chunk_mb}")
    cfg = TrainConfig(out=args.out, taskset=args.taskset, steps=args.steps, tasks_per_step=args.tasks_per_step,
                      group=args.group, eval_every=args.eval_every, eval_group=args.eval_group, lr=args.lr,
                      loss_fn=args.loss, chunk_bytes=int(args.chunk_mb * 1024 * 1024),
                      normalize_std=args.std_normalize, off_policy=args.off_policy, seed=args.seed,
                      max_concurrent=args.max_concurrent, rollout_actors=args.rollout_actors,
                      rollout_actors_per_node=args.rollout_actors_per_node or 0,
                      rollout_concurrency=args.rollout_concurrency or 0,
                      backend=args.backend, isolation=args.isolation, settings=_settings(args),
                      limits=_limits(args), pool=PoolConfig(warm_size=args.warm_size), resume=args.resume,
                      daytona=_daytona_options(args))
    run_train(cfg)
    return 0


def _daytona_sim(args: argparse.Namespace) -> int:
    from rl_daytona.daytona_sim.cli import run

    return run(args)


def _bench(args: argparse.Namespace) -> int:
    from rl_daytona.bench.cli import run

    return run(args)


def _tasks(args: argparse.Namespace) -> int:
    from rl_daytona.tasks.cli import run

    return run(args, _eval_config)


def _reap(args: argparse.Namespace) -> int:
    from rl_daytona.reap import ReapQuery, reap

    query = ReapQuery(backend=args.backend, root=args.root, run_id=args.run, older_than_minutes=args.older_than,
                      dry_run=args.dry_run)
    for line in reap(query):
        print(line)
    return 0


def _show(args: argparse.Namespace) -> int:
    from rl_daytona.show import show

    show(args.rundir, args.rollout, args.tokenizer)
    return 0


def _report(args: argparse.Namespace) -> int:
    from rl_daytona.report import write_report

    print(write_report(args.rundir))
    return 0


def main(argv: Sequence[str] | None = None) -> None:
    from rl_daytona.backends import BackendAuthError, IsolationUnavailableError
    from rl_daytona.learn.clients import TrainingCallError
    from rl_daytona.tasks import TaskError

    args = build_parser().parse_args(argv)
    if getattr(args, "address", None):
        os.environ["RAY_ADDRESS"] = args.address  # ray_join and Ray itself read it
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM cleans up like Ctrl-C (again after ray.init)
    commands = {"eval": _eval, "train": _train, "report": _report, "show": _show, "daytona-sim": _daytona_sim,
                "reap": _reap, "bench": _bench, "tasks": _tasks}
    try:
        code = commands[args.command](args)
    except BackendAuthError as exc:  # Ray wraps it when it came from an actor: print the cause's one line
        print(f"rl-daytona {args.command}: error: {getattr(exc, 'cause', None) or exc}", file=sys.stderr)
        code = 2
    except TrainingCallError as exc:  # the training service failed after retries: not the user's input
        print(f"rl-daytona {args.command}: error: {exc}", file=sys.stderr)
        code = 4
    except (TaskError, ValueError, IsolationUnavailableError, FileNotFoundError) as exc:
        print(f"rl-daytona {args.command}: error: {exc}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        print(f"rl-daytona {args.command}: interrupted; sandboxes of the run were deleted", file=sys.stderr)
        code = 130
    raise SystemExit(code)


if __name__ == "__main__":
    main()
