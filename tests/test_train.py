"""`rl-daytona train` end to end: Ray actors, real bwrap sandboxes, the built-in model trained
and sampled through the real tinker SDK on the local Tinker-compatible service (tinker-sim),
the Learner actor in between; plus the CLI's refusal of bad flags.

The taskset is a two-variant slice of calc (tests/learn/small_calc.py): the built-in policy's
grammar only knows calc.py, so on `wordcount` every attempt fails and no step could ever train.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from rich.console import Console

from rl_daytona.learn.retry import RetryPolicy
from rl_daytona.tinker_run import local_state_dir
from rl_daytona.train import TrainConfig, run_train
from rl_daytona.types import Settings

TASKSET = "tests.learn.small_calc:SMALL_CALC"
STEP_KEYS = {
    "step", "train_pass_rate", "heldout_pass_rate", "frac_groups_mixed", "frac_groups_all_pass",
    "frac_groups_all_fail", "datums", "chunks", "bytes_sent", "rollout_seconds", "train_seconds", "step_seconds",
    "policy_version", "trained", "skipped_reason", "loss", "mean_turns", "overlapped", "overlap", "counts",
    "bytes_per_rollout_by_turns", "training_calls", "checkpoint",
}
FAST_RETRY = RetryPolicy(max_consecutive_failures=10, backoff=0.01)


def checkpoint_file(state_dir: Path, path: str) -> Path:
    """The file a tinker-sim on `state_dir` wrote a `tinker://run/kind/name` checkpoint to."""
    run, kind, name = path[len("tinker://"):].split("/")
    return state_dir / run.replace(":", "_") / kind / f"{name}.json"


@pytest.mark.usefixtures("ray_session")
def test_train_end_to_end_trains_the_served_policy(tmp_path: Path) -> None:
    steps, tasks_per_step, group, eval_group = 3, 2, 4, 2
    out, terminal = tmp_path / "run", io.StringIO()
    summary = run_train(TrainConfig(out=out, taskset=TASKSET, steps=steps, tasks_per_step=tasks_per_step,
                                    group=group, eval_group=eval_group, max_concurrent=8, seed=0,
                                    settings=Settings(max_turns=3)), Console(file=terminal, width=200))

    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [-1, *range(steps)]
    assert lines[0]["policy_version"] == 0 and 0.0 <= lines[0]["heldout_pass_rate"] <= 1.0
    step_lines = lines[1:]
    trained_before = 0
    versions_at_step = []
    for m in step_lines:
        assert set(m) == STEP_KEYS, set(m) ^ STEP_KEYS
        counts = m["counts"]
        assert counts["dispatched"] == tasks_per_step * group, counts  # every attempt reached the learner
        assert counts["completed"] + counts["dropped"] == counts["dispatched"] and counts["pending"] == 0
        assert counts["groups_complete"] == tasks_per_step and counts["retried"] == 0
        assert 0.0 <= m["train_pass_rate"] <= 1.0 and 1.0 <= m["mean_turns"] <= 3.0
        versions_at_step.append(trained_before)
        if m["trained"]:
            trained_before += 1
            assert m["skipped_reason"] == "" and m["frac_groups_mixed"] > 0
            assert m["datums"] == group * round(m["frac_groups_mixed"] * tasks_per_step)
            assert m["chunks"] >= 1 and m["bytes_sent"] > 0 and m["bytes_per_rollout_by_turns"]
        else:
            assert m["skipped_reason"] == "no complete group had differing rewards"
            assert m["frac_groups_mixed"] == 0 and m["datums"] == m["bytes_sent"] == 0
        assert m["policy_version"] == trained_before
        calls = m["training_calls"]
        assert calls == ({"attempts": m["chunks"] + 2, "failures": 0, "retries": 0} if m["trained"]
                         else {"attempts": 0, "failures": 0, "retries": 0})
        if m["trained"]:  # each trained step's state is saved before its line is written
            assert m["checkpoint"].startswith("tinker://") and m["checkpoint"].endswith(f"/weights/step-{m['step']:06d}")
    assert trained_before >= 1, "no step trained: every group agreed in every step"
    last = step_lines[-1]["checkpoint"]
    assert json.loads(checkpoint_file(local_state_dir(), last).read_text())["version"] == trained_before
    assert step_lines[-1]["heldout_pass_rate"] is not None
    assert all(m["heldout_pass_rate"] is None for m in step_lines[:-1])

    # the curve on the terminal, a line per step as it finished: the metrics lines' figures as counts
    printed = [line for line in terminal.getvalue().splitlines() if re.match(r"step \d+/", line)]
    assert len(printed) == steps, terminal.getvalue()
    for m, line in zip(step_lines, printed):
        rate, mixed = m["heldout_pass_rate"], round(m["frac_groups_mixed"] * tasks_per_step)
        held = "" if rate is None else f"  held-out {rate:.1%} ({round(rate * eval_group)}/{eval_group})"
        expect = (f"step {m['step'] + 1}/{steps}  train {m['train_pass_rate']:.1%} "
                  f"({round(m['train_pass_rate'] * tasks_per_step * group)}/{tasks_per_step * group})  "
                  f"mixed groups {mixed}/{tasks_per_step}{held}")
        assert re.fullmatch(re.escape(expect) + r"  \d+ s", line), (line, expect)

    # the saved policy is the trained one after the last step, a checkpoint of the local Tinker service
    assert summary["policy_saved"].startswith("tinker://") and summary["policy_saved"].endswith("/weights/policy")
    assert json.loads(checkpoint_file(local_state_dir(), summary["policy_saved"]).read_text())["version"] == trained_before

    # every rollout carries the version that sampled it: the weights of the step it belongs to
    records = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    by_step: dict[int, set[int]] = defaultdict(set)
    evals: dict[str, set[int]] = defaultdict(set)
    for r in records:
        assert r["status"] == "ok", r["error"]
        assert r["trajectory"]["token_ids"] and sum(r["trajectory"]["loss_mask"])
        if r["group_id"].startswith("train"):
            by_step[int(r["group_id"][len("train"):].split("/")[0])].add(r["trajectory"]["policy_version"])
        else:
            evals[r["group_id"].split("/")[0]].add(r["trajectory"]["policy_version"])
    assert sum(r["group_id"].startswith("train") for r in records) == steps * tasks_per_step * group
    assert dict(by_step) == {s: {v} for s, v in enumerate(versions_at_step)}
    assert dict(evals) == {"eval0": {0}, f"eval{steps}": {trained_before}}

    saved = json.loads((out / "summary.json").read_text())
    assert saved == summary
    assert saved["heldout_before"] == lines[0]["heldout_pass_rate"]
    assert saved["heldout_after"] == step_lines[-1]["heldout_pass_rate"]
    assert saved["evals"]["-1"]["rollouts"] == saved["evals"][str(steps - 1)]["rollouts"] == eval_group
    assert saved["evals"][str(steps - 1)]["versions"] == [trained_before]
    assert (saved["steps"], saved["group"], saved["taskset"]) == (steps, group, TASKSET)
    assert saved["backend"] == "local" and saved["sandbox_backend"]["kind"] == "local"  # as eval's summary
    assert saved["sandbox_backend"]["isolation"] == "bwrap"
    assert (out / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list((out / "sandboxes").glob("sb-*")), "every sandbox of the run was deleted"

    # wall time against the CPU floor, as eval reports it: the sandbox CPU of the RolloutActors that
    # ran every rollout in rollouts.jsonl (train steps and evals), taken once they were all done
    actors = saved["actors"]
    assert sum(a["rollouts"] for a in actors) == len(records) and all(a["in_flight"] == 0 for a in actors)
    cpu, cores, wall = saved["sandbox_cpu_seconds"], saved["cores"], saved["wall_seconds"]
    assert cpu == pytest.approx(sum(a["sandbox_cpu_seconds"] for a in actors)) and cores == (os.cpu_count() or 1)
    # each rollout's sandbox commands run inside its own clock: the CPU is real, and bounded by it
    assert 0 < cpu <= sum(r["timings"]["total"] for r in records)
    assert saved["wall_over_cpu_floor"] == pytest.approx(wall / (cpu / cores))
    floor_line = f"wall {wall:.0f} s = {saved['wall_over_cpu_floor']:.2f} x the CPU floor ({cpu:.0f} sandbox CPU-s / {cores} cores)"
    final = terminal.getvalue().splitlines()
    held = next(i for i, line in enumerate(final) if line.startswith("held-out pass rate:"))
    assert final[held + 1] == floor_line, final[held:]


@pytest.mark.usefixtures("ray_session")
def test_off_policy_overlaps_next_rollouts_with_training_and_bounds_staleness(tmp_path: Path) -> None:
    steps, tasks_per_step, group = 3, 2, 4
    out = tmp_path / "run"
    run_train(TrainConfig(out=out, taskset=TASKSET, steps=steps, tasks_per_step=tasks_per_step, group=group,
                          eval_group=2, max_concurrent=8, seed=1, off_policy=1, settings=Settings(max_turns=3)))
    step_lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()][1:]
    assert [m["step"] for m in step_lines] == list(range(steps))
    # steps 0 and 1 train beside the next step's rollouts; the last step is followed by the eval
    assert [m["overlapped"] for m in step_lines] == [True, True, False]
    assert step_lines[-1]["overlap"] is None
    for m in step_lines[:-1]:
        window = m["overlap"]
        assert window["window_seconds"] + 0.05 >= max(window["rollout_seconds"], window["train_seconds"]) > 0
        assert window["train_seconds"] == m["train_seconds"]
    trained_after: list[int] = []  # policy version once step s has trained
    for m in step_lines:
        assert m["counts"]["completed"] + m["counts"]["dropped"] == m["counts"]["dispatched"] == tasks_per_step * group
        trained_after.append(m["policy_version"])
    records = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    for r in records:
        if not r["group_id"].startswith("train"):
            continue
        step = int(r["group_id"][len("train"):].split("/")[0])
        current = trained_after[step - 1] if step else 0  # the version step `step` trains on top of
        sampled = r["trajectory"]["policy_version"]
        assert current - 1 <= sampled <= current, (step, sampled, current)  # staleness bound 1
    assert sum(r["group_id"].startswith("train") for r in records) == steps * tasks_per_step * group


@pytest.mark.parametrize("args, message", [
    (["--group", "1"], "--group must be at least 2"),
    (["--lr", "-1"], "--lr must be a number >= 0"),
    (["--lr", "nan"], "--lr must be a number >= 0"),
    (["--chunk-mb", "inf"], "--chunk-mb must be positive"),
    (["--deadline", "0"], "argument --deadline: must be a positive number"),
    (["--chunk-mb", "0"], "--chunk-mb must be positive"),
    (["--policy", "http://127.0.0.1:9/v1"], "does not answer"),  # the endpoint preflight, before anything
    (["--steps", "0"], "must be at least 1"),
    (["--loss", "cross_entropy"], "invalid choice"),
    (["--taskset", "nowhere.module:X"], "nowhere"),
    (["--resume", "/nonexistent/run"], "no metrics.jsonl there"),
    (["--tinker-url", "http://127.0.0.1:9"], "cannot reach the Tinker service at http://127.0.0.1:9"),
    (["--base-model", "Qwen/Qwen3-8B"], "TINKER_API_KEY is not set: the Tinker service at http://127.0.0.1:9/hosted"),
    (["--renderer", "chatml"], "unknown renderer 'chatml'; choose one of: auto, builtin, qwen3"),
    (["--lora-rank", "0"], "--lora-rank: must be at least 1"),
    (["--backend", "daytona"], "DAYTONA_API_KEY is not set"),
])
def test_train_cli_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("TINKER_API_KEY", "DAYTONA_API_KEY")}
    env["TINKER_BASE_URL"] = "http://127.0.0.1:9/hosted"  # hosted Tinker stand-in: never dialled without a key
    proc = subprocess.run([sys.executable, "-m", "rl_daytona.cli", "train", "--out", str(tmp_path / "o"), *args],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2, proc.stderr
    assert not (tmp_path / "o").exists(), "refused before a run folder is made"
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


class FailAfterTwoSteps:
    """tinker-sim faults: a few 429s and lost replies, then (once two steps are in metrics.jsonl)
    every training call's future fails."""

    def __new__(cls, metrics: Path):  # type: ignore[no-untyped-def]
        from rl_daytona.tinker_sim import Faults

        class Plan(Faults):
            def take(self, kind: str, route: str) -> bool:
                if kind == "failed_future":
                    done = sum(1 for m in _lines(metrics) if m["step"] >= 0) if metrics.exists() else 0
                    if done < 2 or route not in ("forward_backward", "optim_step", "save_weights"):
                        return False
                return super().take(kind, route)

        return Plan(rate_limit=2, lost_reply=2, failed_future=10, retry_after=0.01)


@pytest.mark.usefixtures("ray_session")
def test_a_run_on_a_tinker_url_stopped_by_failures_keeps_its_steps_and_resume_continues_it(tmp_path: Path) -> None:
    """Training through the tinker SDK at a URL (tinker-sim here): the SDK absorbs 429s and lost
    replies, the request log shows its own calls. After two steps every training call fails:
    the run stops after ten failures in a row, in one line, with the metrics, rollouts and
    tinker:// checkpoint of every finished step kept. `--resume RUNDIR` into the same folder
    then continues at the next step from that checkpoint, to 4 steps: each step's metrics line
    appears once, no rollout id twice, and the interrupted step's rollouts are set aside."""
    from rl_daytona.learn.clients import TrainingCallError
    from rl_daytona.learn.run_state import INTERRUPTED
    from rl_daytona.tinker_run import TinkerTarget
    from rl_daytona.tinker_sim import SimConfig, run_sim_in_thread

    out, state, log = tmp_path / "run", tmp_path / "sim", tmp_path / "requests.jsonl"
    faults = FailAfterTwoSteps(out / "metrics.jsonl")
    common = dict(taskset=TASKSET, tasks_per_step=2, group=4, eval_group=2, max_concurrent=8, seed=0,
                  settings=Settings(max_turns=3), retry=FAST_RETRY)
    with run_sim_in_thread(SimConfig(state_dir=state, log_path=log, faults=faults)) as sim:
        target = TinkerTarget(url=sim.url, base_model="builtin", lora_rank=8)
        with pytest.raises(TrainingCallError) as info:
            run_train(TrainConfig(out=out, steps=3, trainer=target, **common))
        message = str(info.value)
        first = _lines(out / "metrics.jsonl")
        done = first[-1]["step"] + 1  # 2, or 3 when step 2 had nothing to train and the final save failed
        assert len(message.splitlines()) == 1 and "(10 failures in a row, giving up)" in message, message
        assert "RequestFailedError" in message and faults.fired["failed_future"] == 10
        assert faults.fired["rate_limit"] == 2 and faults.fired["lost_reply"] == 2
        assert [m["step"] for m in first] == list(range(-1, done))
        trained = [m for m in first[1:] if m["trained"]]
        checkpoint = first[-1]["checkpoint"]
        if trained:  # the state of the last finished step is kept, named by its line
            assert checkpoint.startswith("tinker://") and checkpoint.endswith(f"/weights/step-{trained[-1]['step']:06d}")
            assert json.loads(checkpoint_file(state, checkpoint).read_text())["version"] == len(trained)
            assert f"kept at {checkpoint}" in message
        summary = json.loads((out / "summary.json").read_text())
        assert summary["completed_steps"] == done and summary["error"] in message
        assert summary["sandbox_backend"] == {"kind": "local", "isolation": "bwrap"}
        paths = {json.loads(line)["path"] for line in log.read_text().splitlines()}
        for call in ("forward_backward", "optim_step", "save_weights_for_sampler", "asample", "retrieve_future"):
            assert f"/api/v1/{call}" in paths, call

        run_train(TrainConfig(out=out, steps=4, resume=out, trainer=target, **common))
    lines = _lines(out / "metrics.jsonl")
    assert [m["step"] for m in lines] == list(range(-1, 4)) and lines[:len(first)] == first
    records = _lines(out / "rollouts.jsonl")
    ids = [r["rollout_id"] for r in records]
    assert len(ids) == len(set(ids)), "a rollout recorded twice"
    assert all(sum(r["group_id"].startswith(f"train{s}/") for r in records) == 8 for s in range(4))
    resumed = {r["trajectory"]["policy_version"] for r in records if r["group_id"].startswith(f"train{done}/")}
    assert resumed == {first[-1]["policy_version"]}, "the continued run samples the checkpoint's weights"
    aside = _lines(out / INTERRUPTED) if (out / INTERRUPTED).exists() else []
    assert {r["group_id"].split("/")[0] for r in aside} <= {f"train{done}"}
    final = json.loads((out / "summary.json").read_text())
    assert final["policy_saved"].startswith("tinker://") and final["heldout_before"] == lines[0]["heldout_pass_rate"]
    assert lines[-1]["policy_version"] == sum(m["trained"] for m in lines[1:])
