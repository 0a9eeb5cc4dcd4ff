"""Secrets never reach a sandbox, a log or the run folder: a real `rl-daytona eval` in a
subprocess (its own one-machine Ray, `RAY_ADDRESS=local`) with DAYTONA_API_KEY, TINKER_API_KEY
and OPENAI_API_KEY set to random canaries. The policy endpoint plays an agent that dumps every
environment it can see inside the sandbox (`env`, /proc/*/environ, os.environ), so the
sandbox's view ends up in the trajectories. Then the canaries are searched for in the
command's stdout and stderr, every file of the run folder, and everything the endpoint was
sent; none is found. The endpoint did receive OPENAI_API_KEY as its bearer token, which
proves the canaries reached the Ray actors that ran the rollouts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from tests.fakes.scripted_llm import Reply, ScriptedAgents

SECRETS = ("DAYTONA_API_KEY", "TINKER_API_KEY", "OPENAI_API_KEY")
DUMP = [Reply(command="env; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done"),
        Reply(command="python -c 'import os; print(dict(os.environ))'; cat /proc/self/environ | tr '\\0' '\\n'; "
                      "ls -a / /workspace /tmp"),
        Reply(content="done")]


def test_no_secret_reaches_a_sandbox_a_log_or_the_run_folder(tmp_path: Path) -> None:
    canaries = {name: f"canary-{name.lower()}-{uuid.uuid4().hex}" for name in SECRETS}
    out = tmp_path / "run"
    env = {**os.environ, **canaries, "RAY_ADDRESS": "local", "RAY_AUTH_MODE": "disabled",
           "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}
    with ScriptedAgents([DUMP]) as llm:
        proc = subprocess.run([sys.executable, "-m", "rl_daytona.cli", "eval", "--taskset",
                               "tests.tasks.example_task:EXAMPLE_TASKSET", "--split", "all", "--group", "2",
                               "--max-turns", "3", "--max-concurrent", "4", "--policy", llm.url, "--out", str(out)],
                              env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert llm.opened == 6 and len(llm.requests) == 18
    # the sandbox's view of its environment is in the trajectories, and the endpoint saw it
    rollouts = (out / "rollouts.jsonl").read_text()
    assert rollouts.count("HOME=/workspace") >= 6 and "'PATH':" in rollouts
    sent = "\n".join(str(body) for body in llm.requests)
    assert sent.count("HOME=/workspace") >= 6
    # the actors had the secrets: the endpoint's key arrived as its bearer token, and only there
    assert set(llm.authorizations) == {f"Bearer {canaries['OPENAI_API_KEY']}"}
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {"rollouts.jsonl", "summary.json"} <= {p.name for p in files}
    for name, canary in canaries.items():
        assert canary not in proc.stdout and canary not in proc.stderr, f"{name} in the command's output"
        assert canary not in sent, f"{name} reached the policy through a sandbox"
        for path in files:
            assert canary.encode() not in path.read_bytes(), f"{name} in {path.relative_to(out)}"
