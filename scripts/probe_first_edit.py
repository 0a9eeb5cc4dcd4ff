"""Probe: how often does the untrained policy's first edit fix a bug? (a tuning tool, not a test)

    .venv/bin/python scripts/probe_first_edit.py [--samples 200] [--seed 7]

For each bug of the calc catalogue alone in calc.py, the agent has run
the look (`vocab.LOOK_VERB`: every source numbered, then the tests) and seen the real output; the policy then samples
`--samples` next commands. Printed per bug: the fraction of samples that are an edit putting the
bug's line back (`fix`) and the fraction that do so touching nothing else (`clean`). Far less
noisy than whole episodes, so a change to the prior can be judged in a minute.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import probe_builtin as PB  # noqa: E402

from rl_daytona.agent import SYSTEM_PROMPT  # noqa: E402
from rl_daytona.policy import grammar as G  # noqa: E402
from rl_daytona.policy.chat import CompletionMemo, encode_prompt  # noqa: E402
from rl_daytona.policy.model import PolicyModel  # noqa: E402
from rl_daytona.policy.prior import initial_params  # noqa: E402
from rl_daytona.tasks.calc import bugs  # noqa: E402

from rl_daytona.policy import vocab as V  # noqa: E402

FIRST = V.LOOK_VERB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    model = PolicyModel(initial_params())
    pristine = bugs.pristine_source().split("\n")
    results: dict[str, tuple[float, float]] = {}
    for bug in bugs.BUGS:
        workdir = PB.seed_workspace(0)
        try:
            source = bugs.apply_bugs(bugs.pristine_source(), (bug.bug_id,))
            (workdir / "calc.py").write_text(source)
            call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": FIRST})}}
            messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": PB.PROMPT},
                        {"role": "assistant", "content": None, "tool_calls": [call]},
                        {"role": "tool", "tool_call_id": "c1", "content": PB._run_command(workdir, FIRST)}]
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        context = encode_prompt(messages, CompletionMemo())
        rng = np.random.default_rng(args.seed)
        line = source.split("\n").index(bug.new)
        verdicts: dict[str, tuple[bool, bool]] = {}
        fixed = clean = 0
        for _ in range(args.samples):
            ids, _ = model.sample(context, rng, 1.0, 256)
            edit = re.fullmatch(r"f=calc\.py; sed -i '(.*)' \"\$f\"(?: && .*)?", G.render(ids), re.DOTALL)
            if not edit:
                continue
            script = edit.group(1)
            if script not in verdicts:
                after = subprocess.run(["sh", "-c", f"sed '{script}'"], input=source, capture_output=True,
                                       text=True).stdout.split("\n")
                ok = len(after) == len(pristine) and after[line] == bug.old
                verdicts[script] = (ok, ok and after == pristine)
            fixed += verdicts[script][0]
            clean += verdicts[script][1]
        results[bug.bug_id] = (fixed / args.samples, clean / args.samples)
        print(f"{bug.bug_id:32s} fix {fixed / args.samples:.3f} clean {clean / args.samples:.3f}", flush=True)
    cleans = np.array([c for _, c in results.values()])
    print(f"mean clean {cleans.mean():.4f} over {len(cleans)} bugs; {(cleans == 0).sum()} never fixed cleanly")


if __name__ == "__main__":
    main()
