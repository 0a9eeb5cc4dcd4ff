"""Probe the untrained built-in policy on calc variants: pass rate per variant and overall, and
per bug how often its function's tests pass at the end of an episode.

    python scripts/probe_builtin.py --split heldout --group 8 [--max-turns N (default: the agent's)] [--seed 0]
        [--scale 1.0] [--server] [--show 1]

Each episode copies the buggy workspace into a temp dir, runs the same chat loop as
`rl_daytona.agent` (system + user prompt, `bash` tool calls, output + `[exit code N]`),
executing commands with `sh -c` in that dir, then grades with the pristine tests. By default
the policy is called in-process (fast, for tuning the prior); `--server` goes through a real
`start_builtin_server` over HTTP with the openai client instead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from rl_daytona.agent import BASH_TOOL, SYSTEM_PROMPT
from rl_daytona.policy import grammar as G
from rl_daytona.policy.chat import SUBMIT_TEXT, CompletionMemo, encode_prompt
from rl_daytona.policy.model import PolicyModel
from rl_daytona.tasks.calc import bugs
from rl_daytona.types import Settings

sys.path.insert(0, str(Path(__file__).parent))
import probe_learn  # noqa: E402  (its memoised command runner)

FILES = Path(bugs.__file__).parent / "files"
PROMPT = ("The tests in test_calc.py fail. Fix the bugs in calc.py so every test passes. "
          "Do not edit the tests.")
ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
       "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # as in the sandbox's clean env


def run_command(workdir: Path, command: str, limit: int = 4000) -> str:
    """A command in the workspace, memoised on (workspace files, command) by probe_learn's runner:
    most episodes start by running the same tests on the same source."""
    return probe_learn.run_command(workdir, command, limit)


def _run_command(workdir: Path, command: str, limit: int = 4000) -> str:
    """One command under `sh -c`, unmemoised (probe_learn's runner: its process group is killed
    after 20 s, as the sandbox would)."""
    return probe_learn._run(workdir, command, limit)


def seed_workspace(variant: int) -> Path:
    workdir = Path(tempfile.mkdtemp(prefix="probe-calc-"))
    (workdir / "calc.py").write_text(bugs.buggy_source(variant))
    shutil.copy(FILES / "test_calc.py", workdir / "test_calc.py")
    return workdir


_TEST_RESULTS: dict[str, dict[str, bool]] = {}


def outcomes_of(source: str) -> dict[str, bool]:
    """Each pristine test's outcome (name -> passed) on `source`, memoised on the source."""
    if source not in _TEST_RESULTS:
        with tempfile.TemporaryDirectory(prefix="probe-tests-") as tmp:
            (Path(tmp) / "calc.py").write_text(source)
            shutil.copy(FILES / "test_calc.py", Path(tmp) / "test_calc.py")
            try:
                out = subprocess.run([sys.executable, "-m", "pytest", "-q", "--tb=no", "-rA", "-p", "no:cacheprovider"],
                                     cwd=tmp, env=ENV, capture_output=True, text=True, timeout=60).stdout
            except subprocess.TimeoutExpired:
                out = ""
        _TEST_RESULTS[source] = {line.split("::")[1].split()[0]: line.startswith("PASSED")
                                 for line in out.splitlines() if line.startswith(("PASSED", "FAILED", "ERROR")) and "::" in line}
    return _TEST_RESULTS[source]


def grade(source: str) -> bool:
    """The grader's verdict on `source`: every pristine test passes (a timeout pays 0)."""
    outcomes = outcomes_of(source)
    return bool(outcomes) and all(outcomes.values())


def local_policy(model: PolicyModel, memo: CompletionMemo, seed: int, record: list | None = None):
    """A `complete(messages) -> assistant message` over the in-process model; with `record`,
    every turn's (context ids, completion ids, logprobs) is appended to it."""
    rng = np.random.default_rng(seed)

    def complete(messages: list[dict[str, Any]]) -> dict[str, Any]:
        context = encode_prompt(messages, memo)
        ids, lps = model.sample(context, rng, 1.0, 256)
        if record is not None:
            record.append((context, ids, lps))
        if G.is_complete(ids) and ids[0] == G.V.SUBMIT:
            return {"role": "assistant", "content": SUBMIT_TEXT}
        call_id = f"call_{rng.integers(1 << 62):x}"
        memo.remember(call_id, ids)
        call = {"id": call_id, "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": G.render(ids)})}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}

    return complete


def episode(complete, variant: int, max_turns: int) -> tuple[bool, list[dict[str, Any]], str]:
    workdir = seed_workspace(variant)
    try:
        messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT},
                                          {"role": "user", "content": PROMPT}]
        for _ in range(max_turns):
            message = complete(messages)
            messages.append(message)
            if not message.get("tool_calls"):
                break
            call = message["tool_calls"][0]
            command = json.loads(call["function"]["arguments"])["command"]
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": run_command(workdir, command)})
        source = (workdir / "calc.py").read_text(errors="replace")
        return grade(source), messages, source
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def server_policy(url: str, seed: int):
    import openai

    client = openai.OpenAI(base_url=url, api_key="none")
    counter = iter(range(1 << 62))

    def complete(messages: list[dict[str, Any]]) -> dict[str, Any]:
        resp = client.chat.completions.create(model="builtin", messages=messages, tools=[BASH_TOOL],
                                              temperature=1.0, logprobs=True, seed=seed * 100003 + next(counter),
                                              extra_body={"return_token_ids": True})
        msg = resp.choices[0].message
        if not msg.tool_calls:
            return {"role": "assistant", "content": msg.content or ""}
        calls = [{"id": c.id, "type": "function", "function": {"name": c.function.name,
                                                               "arguments": c.function.arguments}}
                 for c in msg.tool_calls]
        return {"role": "assistant", "content": None, "tool_calls": calls}

    return complete


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", default="heldout", choices=["train", "heldout", "all"])
    parser.add_argument("--group", type=int, default=8, help="attempts per variant")
    parser.add_argument("--max-turns", type=int, default=Settings().max_turns)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scale", type=float, default=None, help="override prior.PRIOR_SCALE")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--server", action="store_true", help="go through the HTTP server and openai client")
    parser.add_argument("--show", type=int, default=0, help="print this many transcripts")
    parser.add_argument("--variants", type=str, default="", help="comma-separated variants (overrides --split)")
    args = parser.parse_args()
    variants = {"train": bugs.TRAIN_VARIANTS, "heldout": bugs.HELDOUT_VARIANTS,
                "all": bugs.TRAIN_VARIANTS + bugs.HELDOUT_VARIANTS}[args.split]
    if args.variants:
        variants = tuple(int(v) for v in args.variants.split(","))
    asyncio.run(probe(args, variants))


async def probe(args: argparse.Namespace, variants: tuple[int, ...]) -> None:
    from rl_daytona.policy.prior import initial_params

    jobs = [(v, a) for v in variants for a in range(args.group)]
    server = None
    if args.server:
        from rl_daytona.serving.launch import start_builtin_server

        server = start_builtin_server()
    model = PolicyModel(initial_params(args.scale))
    memo = CompletionMemo()
    started = time.time()

    def run(job: tuple[int, int]) -> tuple[int, bool, list[dict[str, Any]], str]:
        variant, attempt = job
        seed = args.seed * 1_000_003 + variant * 1009 + attempt
        complete = server_policy(server.url, seed) if server else local_policy(model, memo, seed)
        return variant, *episode(complete, variant, args.max_turns)

    try:
        with ThreadPoolExecutor(args.workers) as pool:
            results = list(pool.map(run, jobs))
    finally:
        if server:
            server.close()
    report(results, variants, args, time.time() - started)


def report(results, variants, args, seconds: float) -> None:
    for _, ok, messages, _ in results[: args.show]:
        print(f"--- transcript (passed={ok})")
        for m in messages[2:]:
            if m.get("tool_calls"):
                print("$", json.loads(m["tool_calls"][0]["function"]["arguments"])["command"])
            elif m["role"] == "tool":
                lines = [x for x in (m.get("content") or "").splitlines() if x.strip()]
                keep = [x for x in lines if x.startswith(("FAILED", "ERROR", "E "))] + lines[-2:]
                print("   " + "\n   ".join(dict.fromkeys(keep)))
            else:
                print(m.get("content"))
    total = 0
    for v in variants:
        passed = [ok for var, ok, _, _ in results if var == v]
        total += sum(passed)
        print(f"variant {v:2d} {','.join(bugs.variant_bugs(v)):75s} {sum(passed)}/{len(passed)}")
    groups_mixed = sum(0 < sum(ok for var, ok, _, _ in results if var == v) < args.group for v in variants)
    report_bugs(results)
    print(f"split={args.split} group={args.group} pass_rate={total / len(results):.3f} "
          f"({total}/{len(results)}) mixed_groups={groups_mixed}/{len(variants)} in {seconds:.1f}s")


def report_bugs(results) -> None:
    """Per bug: how often, at the end of an episode, every test of its function passed
    (fixed, by any edit), whatever became of the variant's other bugs."""
    fixed: dict[str, list[bool]] = {}
    for variant, _, _, source in results:
        outcome = outcomes_of(source)
        for bug_id in bugs.variant_bugs(variant):
            fn = bug_id.split(".")[0]
            mine = [ok for name, ok in outcome.items() if name.startswith(f"test_{fn}_")]
            fixed.setdefault(bug_id, []).append(bool(mine) and all(mine))
    for bug_id, hits in sorted(fixed.items(), key=lambda kv: sum(kv[1]) / len(kv[1])):
        print(f"bug {bug_id:32s} fixed {sum(hits):3d}/{len(hits):3d} ({sum(hits) / len(hits):.0%})")


if __name__ == "__main__":
    main()
