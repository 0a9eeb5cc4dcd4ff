"""GroupCollector, advantages and pack_groups: properties over random arrivals, plus examples.

The property tests simulate a step the way `train_steps.collect` runs it: every attempt of every
group is in flight, they finish in a random interleaved order, an attempt may hit an
infrastructure error (and is sent out again whenever the collector asks for a retry), and the
successful ones carry random rewards and the policy version that sampled them.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rl_daytona.learn.datum import Datum, DatumError
from rl_daytona.learn.groups import (GroupCollector, InfraPolicy, advantages, group_datums, pack_groups,
                                     request_bytes)
from rl_daytona.types import RolloutStatus, Trajectory
from tests.learn.builders import rollout_of, truncated

PROPERTY = settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
CURRENT_VERSION = 3


@st.composite
def steps(draw: st.DrawFn) -> dict:
    """A step: group sizes, retry budget, staleness bound, and per attempt slot its infra
    failures before it succeeds, its reward and the version that sampled the success."""
    sizes = draw(st.lists(st.integers(1, 5), min_size=1, max_size=5))
    slots = [(g, a) for g, size in enumerate(sizes) for a in range(size)]
    return {
        "sizes": sizes,
        "max_retries": draw(st.integers(0, 2)),
        "max_staleness": draw(st.one_of(st.none(), st.integers(0, 3))),
        "failures": {s: draw(st.sampled_from([0, 0, 0, 1, 2, 3])) for s in slots},
        "rewards": {s: draw(st.sampled_from([0.0, 1.0, 1.0, 0.25])) for s in slots},
        "versions": {s: draw(st.sampled_from([CURRENT_VERSION, CURRENT_VERSION, 2, 1, 0])) for s in slots},
    }


class Simulation:
    """Every attempt in flight; `arrive(i)` finishes the i-th and feeds it to the collector."""

    def __init__(self, step: dict, trajectories: list[Trajectory]) -> None:
        self.step = step
        self.trajectories = trajectories
        self.collector = GroupCollector(InfraPolicy(step["max_retries"]), step["max_staleness"])
        for g, size in enumerate(step["sizes"]):
            self.collector.expect(f"g{g}", size)
        self.in_flight = [(g, a) for g, size in enumerate(step["sizes"]) for a in range(size)]
        self.tries: Counter = Counter()
        self.complete: dict[str, tuple] = {}
        self.retries_asked = 0
        self.stale_arrivals: set[int] = set()  # groups that saw a stale success
        self.died: dict[int, str] = {}  # group -> what killed it first (infra | stale)

    def arrive(self, index: int) -> None:
        g, a = slot = self.in_flight.pop(index)
        attempt_no = self.tries[slot]
        self.tries[slot] += 1
        failed = attempt_no < self.step["failures"][slot]
        traj = self.trajectories[(g * 7 + a) % len(self.trajectories)]
        rollout = rollout_of(traj, f"g{g}", a, self.step["rewards"][slot],
                             RolloutStatus.INFRA_ERROR if failed else RolloutStatus.OK,
                             version=self.step["versions"][slot], rollout_id=f"g{g}/{a}/try{attempt_no}")
        bound = self.step["max_staleness"]
        stale = not failed and bound is not None and CURRENT_VERSION - self.step["versions"][slot] > bound
        if stale:
            self.stale_arrivals.add(g)
        if g not in self.died and f"g{g}" not in self.complete:
            if failed and self.tries[slot] > self.step["max_retries"]:
                self.died[g] = "infra"
            elif stale:
                self.died[g] = "stale"
        outcome = self.collector.add(rollout, CURRENT_VERSION)
        for retry in outcome.retry:
            assert retry is rollout and failed, "only an infra failure is sent out again"
            assert self.tries[slot] <= self.step["max_retries"], "more retries than the policy allows"
            self.retries_asked += 1
            self.in_flight.append(slot)
        for members in outcome.complete:
            group_id = members[0].group_id
            assert group_id not in self.complete, "a group completed twice"
            self.complete[group_id] = members

    def expected_complete(self) -> set[str]:
        """A group completes iff no slot ran out of retries and no success was stale."""
        r = self.step["max_retries"]
        return {f"g{g}" for g, size in enumerate(self.step["sizes"])
                if all(self.step["failures"][(g, a)] <= r for a in range(size)) and g not in self.stale_arrivals}


def _check_complete_groups(sim: Simulation) -> None:
    for group_id, members in sim.complete.items():
        g = int(group_id[1:])
        size = sim.step["sizes"][g]
        assert [m.attempt for m in members] == list(range(size)), "a complete group holds every attempt once"
        assert all(m.status is RolloutStatus.OK for m in members), "an infra failure entered a baseline"
        assert [m.reward for m in members] == [sim.step["rewards"][(g, a)] for a in range(size)]
        assert all(m.trajectory.token_ids for m in members)


def _check_accounting(sim: Simulation) -> None:
    c = sim.collector.counts
    assert c.completed + c.dropped == c.dispatched
    assert c.dispatched == sum(sim.step["sizes"]) + c.retried
    assert c.retried == sim.retries_asked
    assert c.completed == sum(len(m) for m in sim.complete.values())
    assert c.groups_complete == len(sim.complete)
    assert c.groups_mixed + c.groups_dropped_equal == c.groups_complete
    assert c.groups_mixed == sum(len({m.reward for m in ms}) > 1 for ms in sim.complete.values())
    assert c.groups_all_pass == sum(all(m.reward >= 1.0 for m in ms) for ms in sim.complete.values())
    assert c.groups_all_fail == sum(all(m.reward < 1.0 for m in ms) for ms in sim.complete.values())


@PROPERTY
@given(step=steps(), data=st.data())
def test_every_attempt_ends_in_exactly_one_place(trajectories: list[Trajectory], step: dict,
                                                 data: st.DataObject) -> None:
    sim = Simulation(step, trajectories)
    while sim.in_flight:
        sim.arrive(data.draw(st.integers(0, len(sim.in_flight) - 1), label="next to finish"))
    assert set(sim.complete) == sim.expected_complete()
    _check_complete_groups(sim)
    _check_accounting(sim)
    c = sim.collector.counts
    reasons = Counter(sim.died.values())
    assert set(sim.died) | {int(g[1:]) for g in sim.complete} == set(range(len(step["sizes"])))
    assert c.groups_dropped_infra == reasons["infra"]
    assert (c.dropped_stale > 0) == (reasons["stale"] > 0)
    assert sim.collector.pending() == 0 and c.cancelled == 0
    before = dataclasses.asdict(c)
    assert sim.collector.abandon_pending() == 0
    assert dataclasses.asdict(sim.collector.counts) == before


@PROPERTY
@given(step=steps(), data=st.data())
def test_abandon_pending_cancels_exactly_what_is_in_flight(trajectories: list[Trajectory], step: dict,
                                                           data: st.DataObject) -> None:
    sim = Simulation(step, trajectories)
    arrivals = data.draw(st.integers(0, 3 * sum(step["sizes"])), label="arrivals before the step gives up")
    for _ in range(arrivals):
        if not sim.in_flight:
            break
        sim.arrive(data.draw(st.integers(0, len(sim.in_flight) - 1)))
    live_pending = sim.collector.pending()
    assert live_pending <= len(sim.in_flight)
    cancelled = sim.collector.abandon_pending()
    assert cancelled == len(sim.in_flight), "every attempt still in flight is cancelled, and only those"
    assert sim.collector.pending() == 0
    assert not {int(g[1:]) for g in sim.complete} & set(sim.died), "a dead group completed"
    _check_complete_groups(sim)
    _check_accounting(sim)
    assert sim.collector.counts.cancelled == cancelled
    assert sim.collector.abandon_pending() == 0, "abandoning twice cancels nothing more"
    # the stragglers still arrive; they are ignored and change nothing
    before, completed_groups = dataclasses.asdict(sim.collector.counts), dict(sim.complete)
    while sim.in_flight:
        retries_before = sim.retries_asked
        sim.arrive(0)
        assert sim.retries_asked == retries_before, "no retry after the step gave up"
    assert sim.complete == completed_groups
    assert dataclasses.asdict(sim.collector.counts) == before
    _check_accounting(sim)


# -- pack_groups -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def datum_pool(trajectories: list[Trajectory]) -> list[Datum]:
    """Datums of many sizes: real trajectories whole, cut two tokens into their first completion,
    and cut halfway."""
    pool = []
    for i, traj in enumerate(trajectories):
        first = traj.loss_mask.index(1)
        cuts = {len(traj.token_ids), first + 2, (first + len(traj.token_ids)) // 2}
        for cut in sorted(c for c in cuts if first + 1 < c <= len(traj.token_ids)):
            pool.append(Datum.from_rollout(rollout_of(truncated(traj, cut), "pool", i, 1.0), 0.5))
    sizes = [d.nbytes for d in pool]
    assert max(sizes) > 4 * min(sizes)
    return pool


@PROPERTY
@given(data=st.data())
def test_pack_groups_keeps_whole_groups_in_order_under_the_budget(datum_pool: list[Datum],
                                                                  data: st.DataObject) -> None:
    shape = data.draw(st.lists(st.lists(st.integers(0, len(datum_pool) - 1), max_size=4), max_size=8),
                      label="groups (datum pool indices)")
    groups = [[dataclasses.replace(datum_pool[k], group_id=f"g{g}", rollout_id=f"g{g}/{j}")
               for j, k in enumerate(members)] for g, members in enumerate(shape)]
    group_bytes = {f"g{g}": sum(d.nbytes + 1 for d in group) for g, group in enumerate(groups)}
    biggest = max(group_bytes.values(), default=1)
    budget = data.draw(st.integers(1, 3 * biggest + 1), label="budget")

    chunks = pack_groups(groups, budget)

    flat = [d.rollout_id for group in groups for d in group]
    assert [d.rollout_id for chunk in chunks for d in chunk] == flat, "order and content preserved"
    assert all(chunk for chunk in chunks)
    where: dict[str, set[int]] = {}
    for index, chunk in enumerate(chunks):
        for d in chunk:
            where.setdefault(d.group_id, set()).add(index)
        in_chunk = list(dict.fromkeys(d.group_id for d in chunk))
        nbytes = request_bytes(chunk)
        if nbytes > budget:
            assert len(in_chunk) == 1 and request_bytes(chunk) > budget, \
                "only a single group that alone exceeds the budget may exceed it"
    assert all(len(v) == 1 for v in where.values()), "a group was split across chunks"
    for left, right in zip(chunks, chunks[1:]):  # greedy: a chunk is closed only when the next group did not fit
        first_next = right[0].group_id
        assert request_bytes(left) + group_bytes[first_next] > budget


def test_pack_groups_examples(datum_pool: list[Datum]) -> None:
    a, b, c = (dataclasses.replace(datum_pool[0], group_id=g, rollout_id=g) for g in "abc")
    size = a.nbytes
    assert pack_groups([], 100) == [] and pack_groups([[], []], 100) == []
    assert pack_groups([[a], [b], [c]], request_bytes([a, b, c])) == [[a, b, c]]
    assert pack_groups([[a], [b], [c]], request_bytes([a, b, c]) - 1) == [[a, b], [c]]
    assert pack_groups([[a], [b], [c]], request_bytes([a, b])) == [[a, b], [c]]
    assert pack_groups([[a, b], [c]], size) == [[a, b], [c]]  # a group alone over budget is its own chunk
    with pytest.raises(ValueError, match="positive"):
        pack_groups([[a]], 0)


# -- examples ----------------------------------------------------------------------------

def test_advantages_are_reward_minus_the_group_mean() -> None:
    np.testing.assert_allclose(advantages([1.0, 0.0, 0.0, 1.0]), [0.5, -0.5, -0.5, 0.5])
    np.testing.assert_allclose(advantages([1.0, 0.0, 0.0]), [2 / 3, -1 / 3, -1 / 3])
    rewards = [1.0, 0.0, 0.0, 0.0]
    r = np.asarray(rewards)
    np.testing.assert_allclose(advantages(rewards, normalize_std=True), (r - r.mean()) / (r.std() + 1e-6))
    np.testing.assert_allclose(advantages([0.5, 0.5], normalize_std=True), [0.0, 0.0])
    assert abs(advantages([0.3, 0.9, 0.1]).sum()) < 1e-12


def test_group_datums_carry_each_members_advantage(trajectories: list[Trajectory]) -> None:
    members = [rollout_of(trajectories[i], "g", i, reward) for i, reward in enumerate([1.0, 0.0, 0.0, 1.0])]
    datums = group_datums(members)
    assert [d.rollout_id for d in datums] == [m.rollout_id for m in members]
    for d, m, adv in zip(datums, members, [0.5, -0.5, -0.5, 0.5]):
        assert {a for a in d.advantages if a != 0.0} == {adv}
        assert d == Datum.from_rollout(m, adv)
    scaled = group_datums(members, normalize_std=True)
    (value,) = {a for a in scaled[0].advantages if a != 0.0}
    assert value == pytest.approx(0.5 / (0.5 + 1e-6), rel=1e-12)


def test_an_all_equal_group_gives_no_datums(trajectories: list[Trajectory]) -> None:
    for reward in (0.0, 1.0):
        assert group_datums([rollout_of(t, "g", i, reward) for i, t in enumerate(trajectories[:4])]) == []
    assert group_datums([rollout_of(trajectories[0], "g", 0, 1.0)]) == []


def test_a_member_without_tokens_makes_the_group_a_datum_error(trajectories: list[Trajectory]) -> None:
    members = [rollout_of(trajectories[0], "g", 0, 1.0), rollout_of(Trajectory(), "g", 1, 0.0)]
    with pytest.raises(DatumError):
        group_datums(members)


def test_a_duplicate_attempt_raises(trajectories: list[Trajectory]) -> None:
    collector = GroupCollector()
    collector.expect("g", 3)
    collector.add(rollout_of(trajectories[0], "g", 1, 1.0))
    with pytest.raises(ValueError, match="arrived twice"):
        collector.add(rollout_of(trajectories[1], "g", 1, 0.0))


def test_bad_expectations_and_unknown_groups_raise(trajectories: list[Trajectory]) -> None:
    collector = GroupCollector()
    collector.expect("g", 2)
    with pytest.raises(ValueError, match="already expected"):
        collector.expect("g", 2)
    with pytest.raises(ValueError, match="at least one"):
        collector.expect("h", 0)
    with pytest.raises(ValueError, match="unknown group"):
        collector.add(rollout_of(trajectories[0], "nope", 0, 1.0))
    with pytest.raises(ValueError, match="max_retries"):
        InfraPolicy(max_retries=-1)


def test_infra_failure_is_retried_then_drops_the_whole_group(trajectories: list[Trajectory]) -> None:
    collector = GroupCollector(InfraPolicy(max_retries=1))
    collector.expect("g", 3)
    assert collector.add(rollout_of(trajectories[0], "g", 0, 1.0)).complete == ()
    failed = rollout_of(trajectories[1], "g", 1, 0.0, RolloutStatus.INFRA_ERROR)
    assert collector.add(failed).retry == (failed,)
    assert collector.counts.dispatched == 4 and collector.pending() == 2
    out = collector.add(rollout_of(trajectories[1], "g", 1, 0.0, RolloutStatus.INFRA_ERROR, rollout_id="g/1/b"))
    assert out == type(out)()  # no retry left: the group dies, nothing completes
    assert collector.pending() == 0
    assert collector.add(rollout_of(trajectories[2], "g", 2, 0.0)).complete == ()  # a straggler of a dead group
    c = collector.counts
    assert (c.completed, c.dropped_infra, c.retried, c.groups_dropped_infra, c.groups_complete) == (0, 3, 1, 1, 0)
    assert c.completed + c.dropped == c.dispatched == 4


def test_a_retried_attempt_that_succeeds_completes_the_group(trajectories: list[Trajectory]) -> None:
    collector = GroupCollector(InfraPolicy(max_retries=2))
    collector.expect("g", 2)
    failed = rollout_of(trajectories[0], "g", 0, 0.0, RolloutStatus.INFRA_ERROR)
    assert collector.add(failed).retry == (failed,)
    collector.add(rollout_of(trajectories[1], "g", 1, 0.0))
    (members,) = collector.add(rollout_of(trajectories[0], "g", 0, 1.0, rollout_id="g/0/retry")).complete
    assert [m.reward for m in members] == [1.0, 0.0] and members[0].rollout_id == "g/0/retry"
    c = collector.counts
    assert (c.dispatched, c.completed, c.retried, c.groups_mixed) == (3, 2, 1, 1)


def test_a_stale_rollout_drops_its_group(trajectories: list[Trajectory]) -> None:
    collector = GroupCollector(max_staleness=1)
    collector.expect("old", 3)
    collector.expect("fresh", 2)
    assert collector.add(rollout_of(trajectories[0], "old", 0, 1.0, version=4), current_version=5).complete == ()
    assert collector.add(rollout_of(trajectories[1], "old", 1, 0.0, version=3), current_version=5).complete == ()
    assert collector.pending() == 2  # only 'fresh': the dead group's last attempt is not awaited
    assert collector.add(rollout_of(trajectories[2], "old", 2, 1.0, version=5), current_version=5).complete == ()
    # exactly at the bound is still fresh
    collector.add(rollout_of(trajectories[0], "fresh", 0, 1.0, version=4), current_version=5)
    (members,) = collector.add(rollout_of(trajectories[1], "fresh", 1, 0.0, version=4), current_version=5).complete
    assert len(members) == 2
    c = collector.counts
    assert c.dropped_stale == 3 and c.completed == 2
    assert c.completed + c.dropped == c.dispatched == 5
    # without a bound (or without a current version) nothing is stale
    free = GroupCollector()
    free.expect("g", 1)
    assert free.add(rollout_of(trajectories[0], "g", 0, 1.0, version=0), current_version=100).complete


def test_abandon_pending_drops_incomplete_groups_and_ignores_late_arrivals(trajectories: list[Trajectory]) -> None:
    collector = GroupCollector(InfraPolicy(max_retries=0))
    collector.expect("done", 2)
    collector.expect("half", 3)
    collector.expect("dead", 3)
    collector.add(rollout_of(trajectories[0], "done", 0, 1.0))
    assert collector.add(rollout_of(trajectories[1], "done", 1, 0.0)).complete
    collector.add(rollout_of(trajectories[2], "half", 0, 1.0))
    collector.add(rollout_of(trajectories[3], "dead", 0, 1.0, RolloutStatus.INFRA_ERROR))
    collector.add(rollout_of(trajectories[3], "dead", 1, 1.0))  # a straggler of the dead group
    assert collector.abandon_pending() == 2 + 1  # half: attempts 1, 2; dead: attempt 2
    c = collector.counts
    assert (c.cancelled, c.completed, c.groups_complete, c.groups_dropped_infra) == (3, 2, 1, 2)
    assert c.completed + c.dropped == c.dispatched == 8
    before = dataclasses.asdict(c)
    for late in (rollout_of(trajectories[4], "half", 1, 1.0), rollout_of(trajectories[4], "dead", 2, 1.0),
                 rollout_of(trajectories[4], "half", 2, 0.0, RolloutStatus.INFRA_ERROR)):
        out = collector.add(late)
        assert out.retry == () and out.complete == ()
    assert dataclasses.asdict(collector.counts) == before
