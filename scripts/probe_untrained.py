"""The untrained built-in policy's pass rate on every variant of a taskset, in process (the
runner of `probe_learn.py`: temp folders, memoised commands, no Ray, no sandboxes).

    python scripts/probe_untrained.py TASKSET ATTEMPTS_PER_VARIANT [GIVE_UP_TURN] [SEED]
    TEMP=0.5 python scripts/probe_untrained.py calc 8      # sample at another temperature
    LOAD=path/policy python scripts/probe_untrained.py calc 8   # a saved policy (PolicyModel.save)

Prints the pass rate over all variants, over the train and held-out splits, mean turns, then the
rate of every variant in taskset order. Used to compare prior changes on hundreds of attempts
(docs/bench/builtin-policy/learning.md).
"""

import os
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

import probe_learn as PL  # noqa: E402
from rl_daytona.policy import prior  # noqa: E402
from rl_daytona.policy.chat import CompletionMemo  # noqa: E402
from rl_daytona.policy.model import PolicyModel  # noqa: E402
from rl_daytona.tasks import get_taskset  # noqa: E402


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    ts, n = get_taskset(sys.argv[1]), int(sys.argv[2])
    if len(sys.argv) > 3:
        prior.GIVE_UP_TURN = int(sys.argv[3])
    model = PolicyModel.load(os.environ["LOAD"]) if os.environ.get("LOAD") else PolicyModel(prior.initial_params())
    temperature = float(os.environ.get("TEMP", "1"))
    sample = model.sample
    model.sample = lambda context, rng, _t, max_tokens: sample(context, rng, temperature, max_tokens)
    args = types.SimpleNamespace(seed=int(sys.argv[4]) if len(sys.argv) > 4 else 0, max_turns=0, workers=3)
    started = time.time()
    results = PL.batch(model, CompletionMemo(), [(inst, a, 0) for inst in ts.instances for a in range(n)], args)
    train = {i.instance_id for i in ts.split("train")}
    rewards = np.array([r[1] for r in results])
    turns = np.array([r[3] for r in results])
    in_train = np.array([r[0] in train for r in results])
    print(f"all {rewards.mean():.3f} train {rewards[in_train].mean():.3f} heldout {rewards[~in_train].mean():.3f} "
          f"turns {turns.mean():.2f} n {len(rewards)} ({time.time() - started:.0f}s)")
    per: dict[str, list[float]] = {}
    for iid, reward, *_ in results:
        per.setdefault(iid, []).append(reward)
    print(" ".join(f"{np.mean(v):.2f}" for v in per.values()))


if __name__ == "__main__":
    main()
