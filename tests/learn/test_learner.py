"""The Learner as a plain class (no Ray) over a recording TrainingClient: steps, chunks,
retries, skips and overlapping steps, on rollouts made from real trajectories."""

from __future__ import annotations

import asyncio
from typing import Any, Sequence

import pytest

from rl_daytona.learn.clients import (
    AdamParams,
    ForwardBackwardResult,
    OptimStepResult,
    TrainingCallError,
    TrainingClient,
)
from rl_daytona.learn.datum import Datum
from rl_daytona.learn.groups import group_datums
from rl_daytona.learn.learner import Learner, LearnerConfig, StepReport
from rl_daytona.learn.retry import CallStats, RetryPolicy
from rl_daytona.types import Rollout, RolloutRequest, RolloutStatus, Trajectory
from tests.learn.builders import rollout_of

FAST = dict(retry=RetryPolicy(max_consecutive_failures=3, backoff=0.0))


class RecordingClient:
    """Implements the TrainingClient protocol; records every call; can fail a number of times."""

    def __init__(self, fb_failures: int = 0, optim_failures: int = 0) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.fb_failures, self.optim_failures = fb_failures, optim_failures
        self.version = 0
        self.closed = False

    async def forward_backward(self, datums: Sequence[Datum], loss_fn: str = "importance_sampling",
                               loss_fn_config: dict[str, float] | None = None) -> ForwardBackwardResult:
        self.calls.append(("forward_backward", (list(datums), loss_fn)))
        await asyncio.sleep(0)
        if self.fb_failures:
            self.fb_failures -= 1
            raise TrainingCallError("forward_backward: HTTP 503: service busy")
        return ForwardBackwardResult(loss=-float(len(datums)), datums=len(datums),
                                     tokens=sum(1 for d in datums for a in d.advantages if a),
                                     bytes_sent=sum(d.nbytes for d in datums) + 60)

    async def optim_step(self, adam: AdamParams) -> OptimStepResult:
        self.calls.append(("optim_step", adam))
        if self.optim_failures:
            self.optim_failures -= 1
            raise TrainingCallError("optim_step: cannot reach http://127.0.0.1:9/api/v1/optim_step")
        self.version += 1
        return OptimStepResult(version=self.version)

    async def save_state(self, name: str) -> str:
        self.calls.append(("save_state", name))
        return f"/saved/{name}"

    async def load_state(self, path: str) -> int:
        self.calls.append(("load_state", path))
        return self.version

    async def close(self) -> None:
        self.closed = True

    def fb_batches(self) -> list[list[Datum]]:
        return [args[0] for name, args in self.calls if name == "forward_backward"]

    def count(self, name: str) -> int:
        return sum(1 for n, _ in self.calls if n == name)


class Groups:
    """Rollouts of named groups over the real trajectories; `ok(g, a, reward)` etc."""

    def __init__(self, trajectories: list[Trajectory], prefix: str = "") -> None:
        self.trajectories = trajectories
        self.prefix = prefix
        self._n = 0

    def ok(self, group: str, attempt: int, reward: float, version: int = 0) -> Rollout:
        self._n += 1
        traj = self.trajectories[self._n % len(self.trajectories)]
        return rollout_of(traj, self.prefix + group, attempt, reward, version=version)

    def infra(self, group: str, attempt: int) -> Rollout:
        return rollout_of(Trajectory(), self.prefix + group, attempt, 0.0, RolloutStatus.INFRA_ERROR)


async def _fill(learner: Learner, rollouts: list[Rollout]) -> list[RolloutRequest]:
    retries = []
    for r in rollouts:
        retries += await learner.add(r)
    return retries


def test_a_step_where_every_group_is_all_equal_is_skipped_without_calls(trajectories: list[Trajectory]) -> None:
    g, client = Groups(trajectories), RecordingClient()
    learner = Learner(client, LearnerConfig(**FAST))

    async def go() -> StepReport:
        await learner.begin_step(0, {"a": 3, "b": 2})
        await _fill(learner, [g.ok("a", 0, 0.0), g.ok("b", 0, 1.0), g.ok("a", 1, 0.0), g.ok("b", 1, 1.0),
                              g.ok("a", 2, 0.0)])
        return await learner.train_step(0)

    report = asyncio.run(go())
    assert not report.trained and report.skipped_reason == "no complete group had differing rewards"
    assert client.calls == [] and report.version == learner.version == 0
    assert (report.datums, report.chunks, report.bytes_sent, report.loss) == (0, 0, 0, 0.0)
    assert report.counts["groups_dropped_equal"] == 2 and report.counts["groups_mixed"] == 0
    assert report.rollouts_ok == 5 and report.train_pass_rate == pytest.approx(2 / 5)
    assert report.counts["completed"] + report.counts["dropped"] == report.counts["dispatched"] == 5


def test_a_step_whose_groups_all_died_says_so(trajectories: list[Trajectory]) -> None:
    g, client = Groups(trajectories), RecordingClient()
    learner = Learner(client, LearnerConfig(max_retries_infra=0, **FAST))

    async def go() -> tuple[list[RolloutRequest], StepReport]:
        await learner.begin_step(0, {"a": 2})
        retries = await _fill(learner, [g.ok("a", 0, 1.0), g.infra("a", 1)])
        return retries, await learner.train_step(0)

    retries, report = asyncio.run(go())
    assert retries == [] and client.calls == []
    assert not report.trained and report.skipped_reason == "no complete group (every group was dropped)"
    assert report.counts["groups_dropped_infra"] == 1 and report.rollouts_ok == 0


def test_mixed_groups_give_one_forward_backward_per_chunk_and_one_optim_step(trajectories: list[Trajectory]) -> None:
    g, client = Groups(trajectories), RecordingClient()
    adam = AdamParams(learning_rate=0.3)
    learner = Learner(lambda: client, LearnerConfig(adam=adam, **FAST))  # a factory, as runtime passes it

    async def go() -> StepReport:
        await learner.begin_step(0, {"a": 2, "b": 2, "c": 3})
        await _fill(learner, [g.ok("c", 0, 1.0), g.ok("a", 0, 1.0), g.ok("b", 0, 0.0), g.ok("c", 1, 0.0),
                              g.ok("a", 1, 0.0), g.ok("b", 1, 0.0), g.ok("c", 2, 0.0)])
        return await learner.train_step(0)

    report = asyncio.run(go())
    assert report.trained and report.skipped_reason == ""
    (batch,) = client.fb_batches()
    assert [d.group_id for d in batch] == ["a", "a", "c", "c", "c"]  # groups in completion order, b is all-equal
    assert [n for n, _ in client.calls] == ["forward_backward", "optim_step"]
    assert client.calls[0][1][1] == "importance_sampling" and client.calls[1][1] == adam
    assert report.version == learner.version == 1
    assert (report.datums, report.chunks) == (5, 1)
    assert report.chunk_bytes == (sum(d.nbytes for d in batch),)
    assert report.bytes_sent == sum(d.nbytes for d in batch) + 60 and report.loss == -5.0
    assert sorted(n for _, n in report.rollout_bytes) == sorted(d.nbytes for d in batch)
    assert report.counts["groups_mixed"] == 2 and report.counts["groups_dropped_equal"] == 1
    advantages = {d.rollout_id: {a for a in d.advantages if a} for d in batch}
    assert advantages["a/0"] == {0.5} and advantages["a/1"] == {-0.5}
    (c0,) = advantages["c/0"]
    assert c0 == pytest.approx(2 / 3, rel=1e-12)
    asyncio.run(learner.close())
    assert client.closed


def test_a_small_chunk_budget_gives_several_chunks_of_whole_groups(trajectories: list[Trajectory]) -> None:
    g = Groups(trajectories)
    groups = {f"g{i}": 2 + i % 2 for i in range(6)}
    rollouts = [g.ok(name, a, float(a == 0)) for name, size in groups.items() for a in range(size)]
    sizes = {}
    for name in groups:
        members = [r for r in rollouts if r.group_id == name]
        sizes[name] = sum(d.nbytes for d in group_datums(members))
    budget = max(sizes.values()) + 1
    client = RecordingClient()
    learner = Learner(client, LearnerConfig(chunk_bytes=budget, **FAST))

    async def go() -> StepReport:
        await learner.begin_step(3, groups)
        await _fill(learner, rollouts)
        return await learner.train_step(3)

    report = asyncio.run(go())
    batches = client.fb_batches()
    assert len(batches) == report.chunks >= 3 and client.count("optim_step") == 1
    seen: list[str] = []
    for batch in batches:
        ids = list(dict.fromkeys(d.group_id for d in batch))
        for name in ids:
            assert sum(d.group_id == name for d in batch) == groups[name], "a group was split"
            assert name not in seen
        seen += ids
        assert sum(d.nbytes for d in batch) <= budget
    assert seen == list(groups) and report.datums == len(rollouts)
    assert report.chunk_bytes == tuple(sum(d.nbytes for d in b) for b in batches)


def test_infra_errors_come_back_as_retry_requests(trajectories: list[Trajectory]) -> None:
    g, client = Groups(trajectories), RecordingClient()
    learner = Learner(client, LearnerConfig(max_retries_infra=1, **FAST))

    async def go() -> tuple[Any, ...]:
        await learner.begin_step(0, {"a": 2, "b": 2})
        (retry,) = await learner.add(g.infra("a", 1))
        again = await learner.add(rollout_of(trajectories[0], "a", 1, 1.0, rollout_id=retry.rollout_id))
        await learner.add(g.ok("a", 0, 0.0))
        (b_retry,) = await learner.add(g.infra("b", 0))
        no_more = await learner.add(rollout_of(Trajectory(), "b", 0, 0.0, RolloutStatus.INFRA_ERROR,
                                               rollout_id=b_retry.rollout_id))
        late = await learner.add(g.ok("b", 1, 1.0))
        counts = await learner.counts(0)
        return retry, again, no_more, late, counts, await learner.train_step(0)

    retry, again, no_more, late, counts, report = asyncio.run(go())
    assert isinstance(retry, RolloutRequest)
    assert (retry.group_id, retry.attempt, retry.task_id) == ("a", 1, "calc[variant=8]")
    assert retry.rollout_id != "a/1"
    assert again == [] and no_more == [] and late == []
    assert counts["retried"] == 2 and counts["dispatched"] == 6 and counts["pending"] == 0
    assert counts["completed"] + counts["dropped"] == counts["dispatched"]
    assert report.trained and [d.group_id for d in client.fb_batches()[0]] == ["a", "a"]
    assert report.counts["groups_dropped_infra"] == 1


def test_a_failing_forward_backward_is_retried_then_fails_without_an_optim_step(
        trajectories: list[Trajectory]) -> None:
    g, client = Groups(trajectories), RecordingClient(fb_failures=100)
    learner = Learner(client, LearnerConfig(**FAST))

    async def go() -> None:
        await learner.begin_step(0, {"a": 2})
        await _fill(learner, [g.ok("a", 0, 1.0), g.ok("a", 1, 0.0)])
        await learner.train_step(0)

    with pytest.raises(TrainingCallError, match="HTTP 503"):
        asyncio.run(go())
    assert client.count("forward_backward") == 3 and client.count("optim_step") == 0
    assert learner.version == 0


def test_a_transient_failure_is_retried_and_the_step_goes_through(trajectories: list[Trajectory]) -> None:
    g, client = Groups(trajectories), RecordingClient(fb_failures=1, optim_failures=2)
    learner = Learner(client, LearnerConfig(**FAST))

    async def go() -> StepReport:
        await learner.begin_step(0, {"a": 2})
        await _fill(learner, [g.ok("a", 0, 1.0), g.ok("a", 1, 0.0)])
        return await learner.train_step(0)

    report = asyncio.run(go())
    assert report.trained and report.version == 1
    assert [n for n, _ in client.calls] == ["forward_backward"] * 2 + ["optim_step"] * 3


def test_a_failing_optim_step_raises_and_keeps_the_version(trajectories: list[Trajectory]) -> None:
    g, client = Groups(trajectories), RecordingClient(optim_failures=100)
    learner = Learner(client, LearnerConfig(**FAST))

    async def go() -> None:
        await learner.begin_step(0, {"a": 2})
        await _fill(learner, [g.ok("a", 0, 1.0), g.ok("a", 1, 0.0)])
        await learner.train_step(0)

    with pytest.raises(TrainingCallError, match="optim_step: cannot reach"):
        asyncio.run(go())
    assert client.count("optim_step") == 3 and learner.version == 0


def test_two_steps_can_be_open_at_once(trajectories: list[Trajectory]) -> None:
    g, client = Groups(trajectories), RecordingClient()
    learner = Learner(client, LearnerConfig(max_staleness=1, **FAST))

    async def go() -> tuple[StepReport, StepReport]:
        await learner.begin_step(0, {"s0a": 2, "s0b": 2})
        await learner.begin_step(1, {"s1a": 2, "s1b": 2})
        await _fill(learner, [g.ok("s0a", 0, 1.0), g.ok("s1a", 0, 1.0), g.ok("s0a", 1, 0.0),
                              g.ok("s1b", 0, 0.0), g.ok("s0b", 0, 1.0), g.ok("s0b", 1, 0.0)])
        first = await learner.train_step(0)
        # step 1's rollouts were sampled by version 0 and keep arriving after step 0 trained
        await _fill(learner, [g.ok("s1a", 1, 0.0, version=0), g.ok("s1b", 1, 1.0, version=0)])
        return first, await learner.train_step(1)

    first, second = asyncio.run(go())
    step0, step1 = client.fb_batches()
    assert {d.group_id for d in step0} == {"s0a", "s0b"} and {d.group_id for d in step1} == {"s1a", "s1b"}
    assert (first.version, second.version) == (1, 2) and first.trained and second.trained
    assert first.counts["dispatched"] == second.counts["dispatched"] == 4
    assert [n for n, _ in client.calls] == ["forward_backward", "optim_step"] * 2


def test_rollouts_older_than_the_staleness_bound_are_dropped(trajectories: list[Trajectory]) -> None:
    g, client = Groups(trajectories), RecordingClient()
    learner = Learner(client, LearnerConfig(max_staleness=0, **FAST))

    async def go() -> tuple[StepReport, StepReport]:
        await learner.begin_step(0, {"s0": 2})
        await learner.begin_step(1, {"s1": 2})
        await _fill(learner, [g.ok("s0", 0, 1.0), g.ok("s0", 1, 0.0), g.ok("s1", 0, 1.0, version=0)])
        first = await learner.train_step(0)
        await _fill(learner, [g.ok("s1", 1, 0.0, version=0)])  # one version behind: too old
        return first, await learner.train_step(1)

    first, second = asyncio.run(go())
    assert first.trained and not second.trained
    assert second.counts["dropped_stale"] == 2 and second.skipped_reason.startswith("no complete group")
    assert client.count("optim_step") == 1


def test_an_incomplete_group_at_train_time_is_abandoned_not_trained(trajectories: list[Trajectory]) -> None:
    g, client = Groups(trajectories), RecordingClient()
    learner = Learner(client, LearnerConfig(**FAST))

    async def go() -> StepReport:
        await learner.begin_step(0, {"full": 2, "partial": 3})
        await _fill(learner, [g.ok("full", 0, 1.0), g.ok("partial", 0, 1.0), g.ok("full", 1, 0.0),
                              g.ok("partial", 1, 0.0)])
        return await learner.train_step(0)

    report = asyncio.run(go())
    assert [d.group_id for d in client.fb_batches()[0]] == ["full", "full"]
    assert report.counts["cancelled"] == 1 and report.counts["groups_dropped_infra"] == 1
    assert report.counts["completed"] + report.counts["dropped"] == report.counts["dispatched"]


def test_a_group_without_tokens_is_counted_and_not_trained(trajectories: list[Trajectory]) -> None:
    g, client = Groups(trajectories), RecordingClient()
    learner = Learner(client, LearnerConfig(**FAST))
    tokenless = rollout_of(Trajectory(turns=2), "bare", 1, 0.0)  # an endpoint without token ids

    async def go() -> StepReport:
        await learner.begin_step(0, {"bare": 2, "good": 2})
        await _fill(learner, [g.ok("bare", 0, 1.0), tokenless, g.ok("good", 0, 1.0), g.ok("good", 1, 0.0)])
        return await learner.train_step(0)

    report = asyncio.run(go())
    assert report.counts["groups_without_tokens"] == 1 and report.trained
    assert {d.group_id for d in client.fb_batches()[0]} == {"good"}


def test_misuse_is_refused(trajectories: list[Trajectory]) -> None:
    g, client = Groups(trajectories), RecordingClient()
    learner = Learner(client, LearnerConfig(**FAST))

    async def go() -> None:
        await learner.begin_step(0, {"a": 2})
        with pytest.raises(ValueError, match="already begun"):
            await learner.begin_step(0, {"b": 2})
        with pytest.raises(ValueError, match="already belongs to step 0"):
            await learner.begin_step(1, {"a": 2})
        with pytest.raises(ValueError, match="not part of an open step"):
            await learner.add(g.ok("nowhere", 0, 1.0))
        with pytest.raises(ValueError, match="never begun"):
            await learner.train_step(5)
        await learner.train_step(0)
        with pytest.raises(ValueError, match="already trained"):
            await learner.train_step(0)
        assert await learner.save("ckpt") == "/saved/ckpt"
        assert await learner.get_version() == 0

    asyncio.run(go())
    assert isinstance(client, TrainingClient)


@pytest.mark.parametrize("kwargs, message", [
    ({"chunk_bytes": 0}, "--chunk-bytes"),
    ({"adam": AdamParams(learning_rate=-1.0)}, "--lr"),
    ({"loss_fn": "cross_entropy"}, "--loss"),
])
def test_bad_learner_config_is_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LearnerConfig(**kwargs)


def test_failures_are_absorbed_until_too_many_come_in_a_row(trajectories: list[Trajectory]) -> None:
    """Max 3 in a row: 2 failures, a success, 2 failures, a success go through; the count resets
    on each success and the step reports every attempt and failure."""
    g, client = Groups(trajectories), RecordingClient(fb_failures=2, optim_failures=2)
    learner = Learner(client, LearnerConfig(**FAST))

    async def go() -> StepReport:
        await learner.begin_step(0, {"a": 2})
        await _fill(learner, [g.ok("a", 0, 1.0), g.ok("a", 1, 0.0)])
        return await learner.train_step(0)

    report = asyncio.run(go())
    assert report.trained and report.calls == CallStats(attempts=6, failures=4, retries=4)
    assert asyncio.run(learner.call_stats()) == report.calls


def test_giving_up_says_how_many_failed_in_a_row_in_one_line(trajectories: list[Trajectory]) -> None:
    g, client = Groups(trajectories), RecordingClient(fb_failures=100)
    learner = Learner(client, LearnerConfig(retry=RetryPolicy(max_consecutive_failures=10, backoff=0.0)))

    async def go() -> None:
        await learner.begin_step(0, {"a": 2})
        await _fill(learner, [g.ok("a", 0, 1.0), g.ok("a", 1, 0.0)])
        await learner.train_step(0)

    with pytest.raises(TrainingCallError) as info:
        asyncio.run(go())
    assert str(info.value) == "forward_backward: HTTP 503: service busy (10 failures in a row, giving up)"
    assert client.count("forward_backward") == 10 and client.count("optim_step") == 0


def test_a_refused_request_is_not_repeated(trajectories: list[Trajectory]) -> None:
    g, client = Groups(trajectories), RecordingClient()

    async def refuse(datums: Sequence[Datum], loss_fn: str = "importance_sampling",
                     loss_fn_config: dict[str, float] | None = None) -> ForwardBackwardResult:
        client.calls.append(("forward_backward", (list(datums), loss_fn)))
        raise TrainingCallError("forward_backward: HTTP 400: datum 0: bad", retryable=False)

    client.forward_backward = refuse  # type: ignore[method-assign]
    learner = Learner(client, LearnerConfig(**FAST))

    async def go() -> None:
        await learner.begin_step(0, {"a": 2})
        await _fill(learner, [g.ok("a", 0, 1.0), g.ok("a", 1, 0.0)])
        await learner.train_step(0)

    with pytest.raises(TrainingCallError, match="HTTP 400"):
        asyncio.run(go())
    assert client.count("forward_backward") == 1


def test_retry_policy_backoff_doubles_up_to_its_cap_and_refuses_nonsense() -> None:
    policy = RetryPolicy(max_consecutive_failures=10, backoff=0.5, max_backoff=3.0)
    assert [policy.delay(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    with pytest.raises(ValueError, match="at least 1"):
        RetryPolicy(max_consecutive_failures=0)
    with pytest.raises(ValueError, match=">= 0"):
        RetryPolicy(backoff=-1.0)


def test_training_call_error_keeps_retryable_through_pickling() -> None:
    import pickle

    again = pickle.loads(pickle.dumps(TrainingCallError("x: HTTP 400: no", retryable=False)))
    assert isinstance(again, TrainingCallError) and str(again) == "x: HTTP 400: no" and again.retryable is False
