"""In-process RL on calc for tuning the learning rate fast: the probe's episodes, the Trainer's
update, no Ray, no sandboxes, no HTTP.

    python scripts/probe_train.py --steps 10 --tasks-per-step 16 --group 8 --lr 0.2 [--seed 0]

Each step samples train variants (as `rl-daytona train` does), runs `group` attempts of each
with the same chat loop as `scripts/probe_builtin.py`, gives each attempt's sampled tokens the
group-relative advantage, and applies one `Trainer.forward_backward` + `optim_step` (the same
code the built-in service runs). Held-out pass rate is measured before step 1 and after the
last step (and every `--eval-every` steps). The real loop is `rl-daytona train`; this only
answers "which lr, how many steps" in minutes instead of an hour.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import probe_builtin as P  # noqa: E402

from rl_daytona.policy.chat import CompletionMemo  # noqa: E402
from rl_daytona.policy.model import PolicyModel  # noqa: E402
from rl_daytona.policy.prior import initial_params  # noqa: E402
from rl_daytona.policy.training import Trainer, TrainDatum, completion_mask  # noqa: E402
from rl_daytona.tasks.calc import bugs  # noqa: E402


def run_batch(model, memo, jobs, max_turns, workers, seed):
    def run(job):
        variant, attempt, tag = job
        record: list = []
        s = seed * 1_000_003 + tag * 7919 + variant * 1009 + attempt
        ok, _ = P.episode(P.local_policy(model, memo, s, record), variant, max_turns)
        return variant, attempt, ok, record

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(run, jobs))


def evaluate(model, memo, args, tag) -> float:
    jobs = [(v, a, tag) for v in bugs.HELDOUT_VARIANTS for a in range(args.eval_group)]
    results = run_batch(model, memo, jobs, args.max_turns, args.workers, args.seed + 17)
    per = {v: sum(ok for var, _, ok, _ in results if var == v) for v in bugs.HELDOUT_VARIANTS}
    print("   heldout per variant:", " ".join(f"{v}:{n}" for v, n in per.items()), flush=True)
    return sum(ok for _, _, ok, _ in results) / len(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--tasks-per-step", type=int, default=16)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--eval-group", type=int, default=8)
    parser.add_argument("--eval-every", type=int, default=0)
    parser.add_argument("--lr", type=float, default=0.2)
    parser.add_argument("--loss", default="importance_sampling")
    parser.add_argument("--std-normalize", action="store_true")
    parser.add_argument("--max-turns", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--beta2", type=float, default=0.95)
    args = parser.parse_args()

    model = PolicyModel(initial_params())
    trainer = Trainer(model)
    memo = CompletionMemo()
    rng = np.random.default_rng(args.seed)
    started = time.time()
    curve = [(0, evaluate(model, memo, args, 0))]
    print(f"step 0 heldout {curve[-1][1]:.3f} ({time.time() - started:.0f}s)", flush=True)
    for step in range(1, args.steps + 1):
        picked = rng.choice(bugs.TRAIN_VARIANTS, size=args.tasks_per_step, replace=False)
        jobs = [(int(v), a, step * 131) for v in picked for a in range(args.group)]
        results = run_batch(model, memo, jobs, args.max_turns, args.workers, args.seed)
        datums, mixed = [], 0
        for v in picked:
            group = [(ok, rec) for var, _, ok, rec in results if var == v]
            rewards = np.array([float(ok) for ok, _ in group])
            if rewards.min() == rewards.max():
                continue
            mixed += 1
            adv = rewards - rewards.mean()
            if args.std_normalize:
                adv = adv / (rewards.std() + 1e-6)
            datums += [_make_from(rec, a) for (_, rec), a in zip(group, adv)]
        train_rate = np.mean([ok for _, _, ok, _ in results])
        if datums:
            trainer.forward_backward(datums, args.loss)
            out = trainer.optim_step({"learning_rate": args.lr, "beta1": 0.9, "beta2": args.beta2,
                                      "eps": 1e-12, "weight_decay": 0.0})
            norm = out["metrics"]["grad_norm"]
        else:
            norm = 0.0
        line = f"step {step} train {train_rate:.3f} mixed {mixed}/{len(picked)} datums {len(datums)} |g| {norm:.2f}"
        if step == args.steps or (args.eval_every and step % args.eval_every == 0):
            curve.append((step, evaluate(model, memo, args, step)))
            line += f" heldout {curve[-1][1]:.3f}"
        print(f"{line} ({time.time() - started:.0f}s)", flush=True)
    print("curve", curve)


def _make_from(record: list, advantage: float) -> TrainDatum:
    """One attempt as the Learner would send it: the last turn's full sequence, the sampler's
    logprobs on every sampled token, the group-relative advantage on those tokens."""
    context, ids, _ = record[-1]
    tokens = list(context) + list(ids)
    sampler = np.zeros(len(tokens))
    for ctx, comp, lps in record:
        if tokens[: len(ctx)] != list(ctx):
            raise AssertionError("prefix property broken between turns")
        sampler[len(ctx): len(ctx) + len(comp)] = lps
    mask = np.asarray(completion_mask(tokens), dtype=float)
    return TrainDatum(tokens=tuple(tokens), sampler_logprobs=sampler[1:], advantages=(mask * advantage)[1:])


if __name__ == "__main__":
    main()
