"""What a train step records (rl_daytona.step_record): its terminal line says the metrics line's figures."""

from __future__ import annotations

from rl_daytona.learn.learner import StepReport
from rl_daytona.step_record import metrics_line, step_line


def _report(step: int, passed: int, scored: int, mixed: int, complete: int) -> StepReport:
    return StepReport(step=step, trained=mixed > 0, skipped_reason="", version=step + 1, datums=0, chunks=0,
                      bytes_sent=0, chunk_bytes=(), loss=0.0, train_seconds=1.0,
                      counts={"groups_complete": complete, "groups_mixed": mixed}, rollouts_ok=scored,
                      train_pass_rate=passed / scored if scored else 0.0, mean_turns=2.0, rollout_bytes=())


def test_the_step_line_counts_what_the_metrics_line_rates() -> None:
    report = _report(2, 27, 64, 5, 8)
    assert step_line(report, 10, None, 31.4) == "step 3/10  train 42.2% (27/64)  mixed groups 5/8  31 s"
    held = {"pass_rate": 23 / 64, "rollouts": 66, "infra_errors": 2}
    assert step_line(report, 10, held, 30.6) == ("step 3/10  train 42.2% (27/64)  mixed groups 5/8  "
                                                 "held-out 35.9% (23/64)  31 s")
    line = metrics_line(report, 10.0, 31.4, held, None, None)
    assert (line["train_pass_rate"], line["frac_groups_mixed"], line["heldout_pass_rate"]) == (0.4219, 0.625, 0.3594)


def test_a_step_with_nothing_scored_says_so() -> None:
    assert step_line(_report(0, 0, 0, 0, 0), 2, None, 0.2) == "step 1/2  train - (0/0)  mixed groups 0/0  0 s"
