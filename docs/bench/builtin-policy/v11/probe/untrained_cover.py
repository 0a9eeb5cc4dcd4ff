"""Untrained policy: pass rate per variant, N attempts each (episode seed 1000 + 7a + 100003v, as probe_learn runs them).

    OVR="LINE_PRIOR.log_bad_tries=-1.5" .venv/bin/python docs/bench/builtin-policy/v11/probe/untrained_cover.py textkit 12

OVR overrides prior.py values (`DICT.key=value` or `NAME=value`, separated by `;`) before the weights are built."""
import sys, os, numpy as np
sys.path.insert(0, os.environ.get("PROBE_SCRIPTS", os.path.join(os.path.dirname(os.path.abspath(__file__)), *[".."] * 5, "scripts")))
import probe_learn as PL
from concurrent.futures import ThreadPoolExecutor
from rl_daytona.policy import prior as PR
for item in filter(None, os.environ.get("OVR", "").split(";")):
    k, v = item.split("=")
    if "." in k:
        d, key = k.split("."); getattr(PR, d)[key] = float(v)
    else:
        setattr(PR, k, type(getattr(PR, k))(float(v)))
from rl_daytona.policy.model import PolicyModel
from rl_daytona.policy.chat import CompletionMemo
from rl_daytona.tasks import get_taskset
from rl_daytona.types import Settings
ts = get_taskset(sys.argv[1]); n = int(sys.argv[2])
vs = [int(x) for x in sys.argv[3].split(",")] if len(sys.argv) > 3 else range(len(ts.instances))
model, memo = PolicyModel(PR.initial_params()), CompletionMemo()
st = Settings()
jobs = [(v, a) for v in vs for a in range(n)]
def one(j):
    v, a = j
    r, rec, turns, share = PL.episode(model, memo, ts.instances[v], 1000 + a * 7 + v * 100003, st.max_turns, st.output_limit)
    return v, r, turns
with ThreadPoolExecutor(1) as pool:
    res = list(pool.map(one, jobs))
per = {}
for v, r, t in res: per.setdefault(v, []).append(r)
print(os.environ.get("OVR", "base"))
print(" ".join(f"{v}:{int(sum(x))}" for v, x in per.items()))
print(f"mean {np.mean([r for _, r, _ in res]):.3f} zero-variants {sum(1 for x in per.values() if sum(x) == 0)} turns {np.mean([t for *_, t in res]):.2f}")
