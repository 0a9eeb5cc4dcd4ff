"""`rl-daytona show`: a rollout's tokens decoded span by span, marked trained / not trained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rl_daytona.cli import main
from rl_daytona.learn.segments import SegmentedTokens
from rl_daytona.renderers import load_tokenizer
from rl_daytona.renderers.qwen3 import Qwen3Renderer
from rl_daytona.types import PhaseTimings, Rollout, RolloutStatus, Trajectory
from tests.renderers.tokenizer_folders import write_tokenizer_folder


def _write_run(rundir: Path, tokens: SegmentedTokens, policy: str) -> None:
    traj = Trajectory(token_ids=tuple(tokens.token_ids), logprobs=tuple(tokens.logprobs),
                      loss_mask=tuple(tokens.loss_mask), segment_starts=tuple(tokens.segment_starts),
                      messages=({"role": "user", "content": "fix it"},), turns=2, finish_reason="stop")
    rollout = Rollout("r-1", "calc-1", "1", "g/calc-1", 0, 1.0, RolloutStatus.OK, PhaseTimings(), traj)
    rundir.mkdir()
    (rundir / "rollouts.jsonl").write_text(json.dumps(rollout.to_json()) + "\n")
    (rundir / "summary.json").write_text(json.dumps({"policy": policy}))


def test_show_prints_each_datum_s_spans_marked_and_the_reward(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    renderer = Qwen3Renderer(load_tokenizer(write_tokenizer_folder(tmp_path / "tok", "qwen3", "qwen3")))
    tokens = SegmentedTokens()
    first = renderer.prompt_ids([{"role": "user", "content": "fix it"}])
    done, yes = renderer.encode("<think>\nhm\n</think>\n\nDone ✓<|im_end|>"), renderer.encode("Yes<|im_end|>")
    tokens.add_turn(first, done, [-0.5] * len(done))
    tokens.add_turn(renderer.prompt_ids([{"role": "user", "content": "again"}]), yes, [-0.1] * len(yes))
    _write_run(tmp_path / "run", tokens, "http://127.0.0.1:8000/v1")
    main_code = _run(["show", str(tmp_path / "run"), "--tokenizer", str(tmp_path / "tok")])
    out = capsys.readouterr().out
    assert main_code == 0 and "datum 1 of 2" in out and "datum 2 of 2" in out
    assert "[not trained · " in out and "[trained · " in out and "Done ✓<|im_end|>" in out
    assert "reward 1.00" in out.splitlines()[-1]


def test_show_without_a_tokenizer_lists_span_sizes_and_messages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tokens = SegmentedTokens()
    tokens.add_turn([1, 2, 3], [4, 5], [-0.1, -0.2])
    _write_run(tmp_path / "run", tokens, "http://127.0.0.1:8000/v1")
    assert _run(["show", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "[not trained · 3 tokens]" in out and "[trained · 2 tokens]" in out and "--tokenizer" in out and "fix it" in out


def test_an_unknown_rollout_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tokens = SegmentedTokens()
    tokens.add_turn([1, 2, 3], [4, 5], [-0.1, -0.2])
    _write_run(tmp_path / "run", tokens, "builtin")
    assert _run(["show", str(tmp_path / "run"), "--rollout", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no rollout 'nope'" in err and "r-1" in err


def _run(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as info:
        main(argv)
    return int(info.value.code or 0)
