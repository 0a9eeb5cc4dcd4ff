"""The built-in policy's own CPU, in process (the runner of `probe_learn.py`: temp folders,
memoised commands, no Ray, no sandboxes, no HTTP):

    python scripts/probe_policy_cpu.py [TASKSET] [ATTEMPTS_PER_INSTANCE] [INSTANCES]
    NO_MEMO=1 python scripts/probe_policy_cpu.py ...   # sample without the turn memo too

Samples ATTEMPTS_PER_INSTANCE attempts on each of the first INSTANCES train instances with the
untrained policy (one thread; `time.thread_time` around every `model.sample`), then scores the
attempts' datums the way the trainer does (`sequence_logprobs` + `logprob_grads`) twice: with
the process's turn memo, as the service does right after sampling, and with a memo that keeps
nothing. Prints ms per sample, a sha-256 of every sampled completion and its logprobs (equal
before and after a change that must not alter the policy), and the scoring CPU of both.
"""

import hashlib
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
from rl_daytona.policy.model import PolicyModel, TurnMemo  # noqa: E402
from rl_daytona.policy.training import completion_mask  # noqa: E402
from rl_daytona.tasks import get_taskset  # noqa: E402


def main() -> None:
    taskset = get_taskset(sys.argv[1] if len(sys.argv) > 1 else "calc")
    attempts = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    instances = taskset.split("train")[: int(sys.argv[3]) if len(sys.argv) > 3 else 16]
    model = PolicyModel(prior.initial_params(), memo=TurnMemo(size=0) if os.environ.get("NO_MEMO") else None)
    spent = [0.0, 0]
    sample = model.sample

    fingerprint = hashlib.sha256()

    def timed(*a, **k):  # noqa: ANN002, ANN003, ANN202
        t = time.thread_time()
        out = sample(*a, **k)
        spent[0] += time.thread_time() - t
        spent[1] += 1
        fingerprint.update(repr((out[0], [round(x, 9) for x in out[1]])).encode())
        return out

    model.sample = timed  # type: ignore[method-assign]
    args = types.SimpleNamespace(seed=0, max_turns=0, workers=1)
    results = PL.batch(model, CompletionMemo(), [(i, a, 0) for i in instances for a in range(attempts)], args)
    datums = []
    for _, _, record, _, _ in results:
        tokens = list(PL.datum_of(record, 1.0).tokens)
        datums.append((tokens, completion_mask(tokens)))

    def score(m: PolicyModel) -> float:
        t = time.thread_time()
        for tokens, mask in datums:
            m.sequence_logprobs(tokens, mask)
            m.logprob_grads(tokens, mask, np.asarray(mask, dtype=float))
        return time.thread_time() - t

    warm = score(model)
    cold = score(PolicyModel(model.params, memo=TurnMemo(size=0)))
    print(f"{taskset.name}: {len(results)} attempts, pass {np.mean([r[1] for r in results]):.3f}, "
          f"{spent[1]} samples, {1000 * spent[0] / spent[1]:.1f} ms per sample (memo hits {model.memo.hits}, "
          f"misses {model.memo.misses})")
    print(f"samples sha-256 {fingerprint.hexdigest()[:16]} (equal before and after a change: the same samples)")
    print(f"scoring {len(datums)} datums (logprobs + gradients): {warm:.2f} CPU-s from the memo, "
          f"{cold:.2f} CPU-s without it")


if __name__ == "__main__":
    main()
