"""In-process RL of the built-in policy on any taskset, for tuning its learning fast: the real
Task API, the agent's prompts, the policy model and the built-in service's Trainer; no Ray, no
sandboxes, no HTTP.

    python scripts/probe_learn.py --taskset calc --steps 5 --tasks-per-step 8 --group 8 \
        --eval-group 8 --lr 0.5 [--seed 0] [--workers 4]

A workspace is a temp folder seeded by the task's own generator; commands run under `sh -c`
there (memoised on the command and the workspace's files: most are deterministic functions of
them); the task's `grade_pytest` runs the pristine tests with pytest in a copy (memoised on the
sources). Each step samples train instances as `rl-daytona train` does, gives every attempt its
group-relative advantage and applies one forward_backward + optim_step. This answers "which lr,
which features, how many steps" in minutes; the figures that count come from `rl-daytona train`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from rl_daytona.agent import BASH_TOOL, SYSTEM_PROMPT, truncate_output  # noqa: F401
from rl_daytona.policy import grammar as G
from rl_daytona.policy.chat import SUBMIT_TEXT, CompletionMemo, encode_prompt
from rl_daytona.policy.model import PolicyModel
from rl_daytona.policy import prior
from rl_daytona.policy.prior import initial_params
from rl_daytona.source import step_requests
from rl_daytona.policy.training import TrainDatum, Trainer, completion_mask
from rl_daytona.tasks import get_taskset as load_taskset
from rl_daytona.tasks.verdict import GradeResult
from rl_daytona.types import Settings

ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
       "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"}
_CMD_CACHE: dict[tuple, tuple[str, dict[str, str]]] = {}
_GRADE_CACHE: dict[tuple, GradeResult] = {}


def snapshot(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts and ".pytest_cache" not in p.parts:
            out[str(p.relative_to(root))] = p.read_text(errors="replace")
    return out


def restore(root: Path, before: dict[str, str], after: dict[str, str]) -> None:
    for name in set(before) - set(after):
        (root / name).unlink(missing_ok=True)
    for name, text in after.items():
        if before.get(name) != text:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)


def run_command(root: Path, command: str, limit: int) -> str:
    before = snapshot(root)
    key = (command, *sorted(before.items()))
    hit = _CMD_CACHE.get(key)
    if hit is None:
        out = _run(root, command, limit)
        _CMD_CACHE[key] = (out, snapshot(root))
        return out
    restore(root, before, hit[1])
    return hit[0]


def _run(root: Path, command: str, limit: int) -> str:
    child = subprocess.Popen(["sh", "-c", command], cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, env=ENV, start_new_session=True)
    try:
        out, _ = child.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        return "command timed out\n[exit code 124]"
    return f"{truncate_output(out, limit)}\n[exit code {child.returncode}]"


class FolderEnv:
    """The TaskEnv surface a task function uses, over a temp folder."""

    def __init__(self, root: Path) -> None:
        self.root = root

    async def write_files(self, files: Mapping[str, bytes | str]) -> None:
        for name, data in files.items():
            path = self.root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data.encode() if isinstance(data, str) else data)

    async def read_file(self, path: str) -> bytes:
        return (self.root / path).read_bytes()

    async def grade_pytest(self, *, sources: list[str], tests: Mapping[str, str], expected_passed: int,
                           timeout: float = 60.0) -> GradeResult:
        files = {s: (self.root / s).read_text(errors="replace") if (self.root / s).exists() else None
                 for s in sources}
        key = (tuple(sorted(files.items(), key=lambda kv: kv[0])), tuple(sorted(tests.items())), expected_passed)
        if key not in _GRADE_CACHE:
            _GRADE_CACHE[key] = _grade(files, tests, expected_passed, timeout)
        return _GRADE_CACHE[key]


def _grade(files: dict[str, str | None], tests: Mapping[str, str], expected: int, timeout: float) -> GradeResult:
    with tempfile.TemporaryDirectory(prefix="probe-grade-") as tmp:
        for name, text in {**{k: v for k, v in files.items() if v is not None}, **tests}.items():
            (Path(tmp) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / name).write_text(text)
        try:
            out = subprocess.run([sys.executable, "-m", "pytest", "-q", "--tb=no", "-p", "no:cacheprovider"],
                                 cwd=tmp, env=ENV, capture_output=True, text=True, timeout=timeout).stdout
        except subprocess.TimeoutExpired:
            return GradeResult(reward=0.0, passed=0, expected=expected, timed_out=True)
    passed = failed = 0
    for part in out.strip().splitlines()[-1:][0].split(",") if out.strip() else []:
        words = part.split()
        if len(words) >= 2 and words[0].isdigit():
            passed += int(words[0]) if words[1].startswith("passed") else 0
            failed += int(words[0]) if words[1].startswith(("failed", "error")) else 0
    return GradeResult(reward=float(passed == expected and failed == 0), passed=passed, expected=expected, failed=failed)


def episode(model: PolicyModel, memo: CompletionMemo, instance, seed: int, max_turns: int, limit: int):
    """One attempt: (reward, [(context ids, completion ids, logprobs)] per turn, turns, commands)."""
    rng = np.random.default_rng(seed)
    root = Path(tempfile.mkdtemp(prefix="probe-learn-"))
    record: list = []
    loop = asyncio.new_event_loop()
    try:
        env = FolderEnv(root)
        run = instance.start(env)
        prompt = loop.run_until_complete(run.prompt())
        messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT},
                                          {"role": "user", "content": prompt}]
        for _ in range(max_turns):
            context = encode_prompt(messages, memo)
            ids, lps = model.sample(context, rng, 1.0, 256)
            record.append((context, ids, lps))
            if G.is_complete(ids) and ids[0] == G.V.SUBMIT:
                messages.append({"role": "assistant", "content": SUBMIT_TEXT})
                break
            call_id = f"call_{rng.integers(1 << 62):x}"
            memo.remember(call_id, ids)
            command = G.render(ids)
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]})
            messages.append({"role": "tool", "tool_call_id": call_id, "content": run_command(root, command, limit)})
        grade = loop.run_until_complete(run.reward())
        return grade.reward, record, len(record), grade.passed / max(grade.expected, 1)
    finally:
        loop.close()
        shutil.rmtree(root, ignore_errors=True)


def datum_of(record: list, advantage: float) -> TrainDatum:
    context, ids, _ = record[-1]
    tokens = list(context) + list(ids)
    sampler = np.zeros(len(tokens))
    for ctx, comp, lps in record:
        sampler[len(ctx): len(ctx) + len(comp)] = lps
    mask = np.asarray(completion_mask(tokens), dtype=float)
    return TrainDatum(tokens=tuple(tokens), sampler_logprobs=sampler[1:], advantages=(mask * advantage)[1:])


def batch(model, memo, jobs, args):
    settings = Settings()

    def one(job):
        inst, attempt, tag = job
        seed = (args.seed * 1_000_003 + tag * 7919 + zlib.crc32(inst.instance_id.encode()) % 100_003 * 13 + attempt) % (1 << 63)
        reward, record, turns, share = episode(model, memo, inst, seed, args.max_turns or settings.max_turns,
                                               settings.output_limit)
        return inst.instance_id, reward, record, turns, share

    with ThreadPoolExecutor(args.workers) as pool:
        return list(pool.map(one, jobs))


def evaluate(model, memo, heldout, args, tag) -> tuple[float, int]:
    jobs = [(inst, a, tag) for inst in heldout for a in range(args.eval_group)]
    results = batch(model, memo, jobs, args)
    per = {inst.instance_id: [r for iid, r, *_ in results if iid == inst.instance_id] for inst in heldout}
    share = np.mean([s for *_, s in results])
    for iid, reward, record, _, _ in [r for r in results if r[1] < 1.0][:getattr(args, "show", 0)]:
        print(f"  -- failed {iid}:")
        for _, ids, _ in record:
            print("     ", G.render(ids) if not (G.is_complete(ids) and ids[0] == G.V.SUBMIT) else "<submit>")
    print("  heldout by instance:", " ".join(f"{k.split('=')[-1].rstrip(']')}:{np.mean(v):.2f}" for k, v in per.items()),
          f"| tests passed {share:.2f} | turns {np.mean([t for *_, t, _ in results]):.1f}", flush=True)
    return float(np.mean([r for _, r, *_ in results])), len(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--taskset", default="calc")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--tasks-per-step", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--eval-group", type=int, default=8)
    parser.add_argument("--eval-every", type=int, default=0)
    parser.add_argument("--lr", type=float, default=0.2)
    parser.add_argument("--beta2", type=float, default=0.95)
    parser.add_argument("--max-turns", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--give-up", type=int, default=0, help="the prior's give-up turn (default: prior.GIVE_UP_TURN)")
    parser.add_argument("--stop-turn", type=int, default=0, help="the prior's last turn even when progressing (default: prior.STOP_TURN)")
    parser.add_argument("--show", type=int, default=0, help="print the commands of this many failed held-out attempts per eval")
    parser.add_argument("--sharpness", type=float, default=0, help="prior.SHARPNESS (default: as committed)")
    parser.add_argument("--save", default="", help="save the trained policy here (PolicyModel.save)")
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()

    if args.give_up:
        prior.GIVE_UP_TURN = args.give_up
    if args.sharpness:
        prior.SHARPNESS = args.sharpness
    if args.stop_turn:
        prior.STOP_TURN = args.stop_turn
    taskset = load_taskset(args.taskset)
    train, heldout = taskset.split("train"), taskset.split("heldout")
    model, memo = PolicyModel(initial_params()), CompletionMemo()
    trainer = Trainer(model)
    train_passed: dict[str, list[float]] = {}
    started = time.time()
    rate, n = evaluate(model, memo, heldout, args, 0)
    curve = [(0, rate)]
    print(f"step 0 heldout {rate:.3f} ({n}) ({time.time() - started:.0f}s)", flush=True)
    for step in range(1, args.steps + 1):
        requests = step_requests(train, args.tasks_per_step, 1, args.seed, step - 1)  # as `rl-daytona train` draws
        by_id = {inst.instance_id: inst for inst in train}
        picked = [by_id[r.task_id] for r in requests]
        jobs = [(inst, a, slot) for slot, inst in enumerate(picked) for a in range(args.group)]
        results = batch(model, memo, [(inst, a + 100 * slot, step * 131) for inst, a, slot in jobs], args)
        datums, mixed = [], 0
        for slot, inst in enumerate(picked):
            group = [(r, rec) for (iid, r, rec, *_), (_, _, s) in zip(results, jobs) if s == slot]
            rewards = np.array([r for r, _ in group])
            if rewards.min() == rewards.max():
                continue
            mixed += 1
            datums += [datum_of(rec, a) for (_, rec), a in zip(group, rewards - rewards.mean())]
        for iid, reward, *_ in results:
            train_passed.setdefault(iid, []).append(reward)
        turns = np.mean([t for *_, t, _ in results])
        if datums:
            trainer.forward_backward(datums, "importance_sampling")
            trainer.optim_step({"learning_rate": args.lr, "beta1": 0.9, "beta2": args.beta2, "eps": 1e-12,
                                "weight_decay": 0.0})
        line = (f"step {step} train {np.mean([r for _, r, *_ in results]):.3f} mixed {mixed}/{len(picked)} "
                f"turns {turns:.1f}")
        if step == args.steps or (args.eval_every and step % args.eval_every == 0):
            rate, n = evaluate(model, memo, heldout, args, step)
            curve.append((step, rate))
            line += f" heldout {rate:.3f}"
        print(f"{line} ({time.time() - started:.0f}s)", flush=True)
    print("train passed by instance:", " ".join(f"{k.split('=')[-1].rstrip(']')}:{int(sum(v))}/{len(v)}"
                                                  for k, v in sorted(train_passed.items(), key=lambda kv: kv[0])))
    print("curve", " ".join(f"{s}:{r:.3f}" for s, r in curve))
    if args.save:
        model.save(args.save)


if __name__ == "__main__":
    main()
