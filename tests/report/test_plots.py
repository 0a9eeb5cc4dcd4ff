"""Each figure draws the run's numbers, or says why it cannot."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rl_daytona.report.load import load_run
from rl_daytona.report.plots import (NoData, group_spread, reward_spread, timeline, timing_cdfs, training_curve,
                                     variant_bars, variant_heatmap)
from tests.report.runs import eval_rollouts, make_eval_run, make_half_run, make_train_run


def _lines(fig):  # type: ignore[no-untyped-def]
    return {line.get_label(): list(line.get_ydata()) for line in fig.axes[0].get_lines()}


def test_group_spread_leaves_infra_errors_out() -> None:
    from rl_daytona.report.load import _row

    rows = [_row(r.to_json()) for r in eval_rollouts()]
    assert group_spread(rows) == {"mixed": 1, "all pass": 1, "all fail": 2}


def test_heatmap_holds_the_pass_rate_of_each_variant_and_step(tmp_path: Path) -> None:
    fig = variant_heatmap(load_run(make_train_run(tmp_path / "tr")))
    grid = fig.axes[0].images[0].get_array()
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["4", "5", "6", "7"]
    assert grid[:, 0].tolist() == [0.5, 1.0, 0.0, None]  # variant 7 was not sampled in step 1
    assert grid[:, 1].tolist() == [1.0, None, None, 0.25]


def test_training_curve_has_train_heldout_and_the_published_line(tmp_path: Path) -> None:
    run = make_train_run(tmp_path / "tr")
    lines = _lines(training_curve(load_run(run)))
    assert lines["train (rollouts of the step)"] == [0.5, 0.5]
    assert lines["held-out"] == [0.0, 1.0]
    assert lines["published 35.9% -> 81.2% (Qwen 4B; endpoints only)"] == [0.359, 0.812]
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "taskset": "mine"}))
    assert len(_lines(training_curve(load_run(run)))) == 2  # the reference is calc's only


def test_eval_run_figures(tmp_path: Path) -> None:
    data = load_run(make_eval_run(tmp_path / "ev"))
    with pytest.raises(NoData, match="eval run"):
        training_curve(data)
    heights = [p.get_height() for p in variant_bars(data).axes[0].patches]
    assert heights == [1.0, 0.5, 0.0, 0.0]
    spread = reward_spread(data).axes[0].patches
    assert [p.get_height() for p in spread] == [0.25, 0.25, 0.5]  # mixed, all pass, all fail
    assert len(timeline(data).axes[0].patches) == 4 * 8  # four phases per rollout
    assert all(len(ax.get_lines()) > 0 for ax in timing_cdfs(data).axes)


def test_half_run_draws_from_metrics_and_refuses_the_rest(tmp_path: Path) -> None:
    data = load_run(make_half_run(tmp_path / "half"))
    heights = [p.get_height() for p in reward_spread(data).axes[0].patches]
    assert np.allclose(heights, [1 / 3, 1 / 3, 1 / 3], atol=1e-3)  # the Learner's fractions of step 1
    for fn in (variant_heatmap, timing_cdfs, timeline):
        with pytest.raises(NoData):
            fn(data)


def test_rollouts_without_start_times_have_no_timeline(tmp_path: Path) -> None:
    run = make_eval_run(tmp_path / "old")
    rows = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    (run / "rollouts.jsonl").write_text("".join(json.dumps({**r, "started_at": 0.0}) + "\n" for r in rows))
    with pytest.raises(NoData, match="no start times"):
        timeline(load_run(run))


def test_log_time_axes_have_plain_labels_that_never_stack_and_the_legend_hides_no_curve(tmp_path: Path) -> None:
    fig = timing_cdfs(load_run(make_eval_run(tmp_path / "ev")))
    fig.canvas.draw()
    for ax in fig.axes:
        labels = [t.get_text() for t in ax.get_xticklabels(which="both") if t.get_text()]
        assert labels and not any("10^" in text or "times" in text for text in labels)
        assert all(float(text) > 0 for text in labels)  # plain seconds
    legend = fig.axes[1].get_legend()
    box = legend.get_window_extent()
    assert box.x0 >= fig.axes[1].get_window_extent().x1 - 1  # drawn beside the axes, not over the curves
