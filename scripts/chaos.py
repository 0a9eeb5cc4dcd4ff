"""Chaos run: `rl-daytona train` while RolloutActors (and once the SandboxPool) are killed.

    python scripts/chaos.py --out /tmp/chaos [--every 6] [--kills 4] [--seed 0] [-- extra train flags]

Starts a one-machine Ray here, runs `rl-daytona train` in a child process joined to it (small by
default: 3 steps of 4 tasks x 4, held-out group 2, 4 turns, 3 RolloutActors), and about every
`--every` seconds (0.5-1.5x, at random) SIGKILLs the process of a random live RolloutActor (a
crash, not a polite ray.kill), `--kills` times; the SandboxPool's process is killed once, after
the first actor kill. A rollout here takes ~10 s on 2 cores, so the default already has most
rollouts of the first minute see a kill; a request is re-dispatched at most twice, so one
caught by three kills in a row is lost, and counted. Then it reads the run folder:

    steps completed   metrics.jsonl lines of finished steps
    rollouts lost     attempts (group, attempt number) with no scored rollout in rollouts.jsonl:
                      never written, or written only with status infra_error (a train attempt the
                      group policy ran again and finished is not lost; an eval attempt that ended
                      infra_error is)

and prints one line per kill and a closing summary. Exit code 0 only when the train run
succeeded and nothing was lost.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

SMALL = ["--steps", "3", "--tasks-per-step", "4", "--group", "4", "--eval-group", "2", "--max-turns", "4",
         "--rollout-actors", "3", "--max-concurrent", "8"]


def _actors(class_name: str) -> list[dict[str, Any]]:
    import ray._private.state as state  # the GCS's actor table (the state API needs the dashboard)

    return [a for a in state.actors().values() if a["ActorClassName"] == class_name and a["State"] == "ALIVE"
            and a.get("Pid")]


def _kill(actor: dict[str, Any]) -> bool:
    try:
        os.kill(int(actor["Pid"]), signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False


def count_lost(out: Path, group: int, eval_group: int, tasks_per_step: int, steps_done: int,
               evals: int, heldout: int) -> dict[str, int]:
    rows = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    attempts: dict[str, set[int]] = defaultdict(set)
    lost_actor = 0
    for r in rows:
        if r["status"] == "infra_error":
            lost_actor += "no other actor could run it" in r.get("error", "")
            attempts[r["group_id"]]  # the group was dispatched
            continue
        attempts[r["group_id"]].add(r["attempt"])
    train_groups = [g for g in attempts if g.startswith("train")]
    eval_groups = [g for g in attempts if not g.startswith("train")]
    missing = sum(group - len(attempts[g]) for g in train_groups) + sum(eval_group - len(attempts[g]) for g in eval_groups)
    # groups that never showed up at all
    missing += max(0, steps_done * tasks_per_step - len(train_groups)) * group
    missing += max(0, evals * heldout - len(eval_groups)) * eval_group
    infra = sum(1 for r in rows if r["status"] == "infra_error")
    return {"lost": missing, "cut_off": lost_actor, "rows": len(rows),
            "infra_error_rows": infra}


def _flag(args: list[str], name: str, default: int) -> int:
    return int(args[args.index(name) + 1]) if name in args else default


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--every", type=float, default=12.0, help="mean seconds between kills")
    parser.add_argument("--kills", type=int, default=4, help="RolloutActor kills at most")
    parser.add_argument("--no-pool-kill", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("extra", nargs="*", help="train flags after --, replacing the small defaults")
    args = parser.parse_args()
    import ray

    train_flags = args.extra or SMALL
    rng = random.Random(args.seed)
    ray.init(num_cpus=max(2, os.cpu_count() or 2), include_dashboard=False, log_to_driver=False)
    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address,
           "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}
    cmd = [sys.executable, "-m", "rl_daytona.cli", "train", *train_flags, "--out", str(args.out)]
    print("chaos: " + " ".join(cmd[1:]), flush=True)
    started = time.monotonic()
    log = (args.out.parent / f"{args.out.name}.train.log")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as sink:
        proc = subprocess.Popen(cmd, env=env, stdout=sink, stderr=subprocess.STDOUT)
        kills, pool_killed = 0, args.no_pool_kill
        while proc.poll() is None:
            time.sleep(args.every * rng.uniform(0.5, 1.5))  # a child process and the GCS's table: nothing to await
            if proc.poll() is not None:
                break
            if kills < args.kills:
                live = _actors("RolloutActor")
                if live and _kill(victim := rng.choice(live)):
                    kills += 1
                    print(f"chaos: t={time.monotonic() - started:5.1f}s killed RolloutActor pid {victim['Pid']} "
                          f"({len(live) - 1} others alive)", flush=True)
            if kills >= 1 and not pool_killed:
                pools = _actors("SandboxPool")
                if pools and _kill(pools[0]):
                    pool_killed = True
                    print(f"chaos: t={time.monotonic() - started:5.1f}s killed the SandboxPool pid {pools[0]['Pid']}",
                          flush=True)
        code = proc.wait()
    ray.shutdown()
    return report(args.out, train_flags, code, kills, pool_killed and not args.no_pool_kill, log,
                  time.monotonic() - started)


def report(out: Path, flags: list[str], code: int, kills: int, pool_killed: bool, log: Path, seconds: float) -> int:
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()] \
        if (out / "metrics.jsonl").exists() else []
    steps_done = sum(1 for m in metrics if m.get("step", -1) >= 0)
    evals = sum(1 for m in metrics if m.get("heldout_pass_rate") is not None)
    group, eval_group = _flag(flags, "--group", 8), _flag(flags, "--eval-group", 8)
    tasks = _flag(flags, "--tasks-per-step", 16)
    heldout = len(_heldout(flags))
    lost = count_lost(out, group, eval_group, tasks, steps_done, evals, heldout) if (out / "rollouts.jsonl").exists() \
        else {"lost": -1, "rows": 0, "infra_error_rows": 0}
    counts: dict[str, int] = defaultdict(int)
    for m in metrics:
        for k, v in (m.get("counts") or {}).items():
            counts[k] += int(v)
    steps = _flag(flags, "--steps", 10)
    print(f"chaos: train exit {code} after {seconds:.0f}s; RolloutActors killed {kills}, pool killed "
          f"{'once' if pool_killed else 'no'}")
    print(f"chaos: steps completed {steps_done}/{steps}; rollouts in rollouts.jsonl {lost['rows']} "
          f"({lost['infra_error_rows']} infra_error, retried by the group policy: {counts.get('retried', 0)}, "
          f"groups dropped for infra {counts.get('groups_dropped_infra', 0)}; attempts whose actors were all "
          f"lost {lost.get('cut_off', 0)}); rollouts lost {lost['lost']}")
    fleet = json.loads((out / "summary.json").read_text()).get("fleet") if (out / "summary.json").exists() else None
    if fleet:
        print("chaos: fleet " + ", ".join(f"{k} {v}" for k, v in fleet.items() if v))
    if code != 0:
        print(f"chaos: the train run failed; its log: {log}")
    return 0 if code == 0 and lost["lost"] == 0 and steps_done == steps else 1


def _heldout(flags: list[str]) -> list[Any]:
    from rl_daytona.tasks import get_taskset

    taskset = flags[flags.index("--taskset") + 1] if "--taskset" in flags else "calc"
    return get_taskset(taskset).split("heldout")


if __name__ == "__main__":
    sys.exit(main())
