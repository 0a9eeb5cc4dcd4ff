"""The create-rate window: at most `per_minute` grants in any 60 s, in order, none a 429."""

from __future__ import annotations

import asyncio
import random

import pytest

from rl_daytona.backends.daytona_limits import WINDOW, LocalGate, RayGate, SlidingWindow
from rl_daytona.daytona_sim.faults import RateLimiter


def _arrivals(seed: int, count: int) -> list[float]:
    rng, now, times = random.Random(seed), 1000.0, []
    for _ in range(count):
        now += rng.choice((0.0, 0.0, rng.uniform(0, 3), rng.uniform(0, 40)))
        times.append(now)
    return times


@pytest.mark.parametrize("per_minute,seed", [(1, 0), (3, 1), (5, 2), (20, 3)])
def test_never_more_than_per_minute_in_any_window_and_in_order(per_minute: int, seed: int) -> None:
    window = SlidingWindow(per_minute)
    arrivals = _arrivals(seed, 300)
    grants = [window.reserve(now) for now in arrivals]
    assert all(g >= now for g, now in zip(grants, arrivals))
    assert grants == sorted(grants)
    assert all(later - earlier >= WINDOW for earlier, later in zip(grants, grants[per_minute:]))
    server = RateLimiter(per_minute)  # daytona-sim counts the way Daytona does
    assert all(server.admit(g) is None for g in grants)


def test_grants_are_immediate_until_the_window_is_full() -> None:
    window = SlidingWindow(3)
    assert [window.reserve(10.0) for _ in range(3)] == [10.0, 10.0, 10.0]
    fourth = window.reserve(11.0)
    assert WINDOW + 10.0 <= fourth < WINDOW + 11.0
    assert window.reserve(200.0) == 200.0  # the old grants have left the window


def test_a_window_needs_at_least_one_create_per_minute() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        SlidingWindow(0)


def test_local_gate_grants_at_once_while_there_is_room() -> None:
    async def go() -> list[float]:
        gate = LocalGate(4)
        return list(await asyncio.gather(*(gate.acquire() for _ in range(4))))
    assert asyncio.run(go()) == [0.0] * 4


def test_ray_gate_is_one_window_shared_by_every_gate_of_the_run(ray_session: None) -> None:
    import ray

    async def go() -> tuple[list[float], float]:
        first, second = RayGate("shared-run", 2), RayGate("shared-run", 2)
        waited = [await first.acquire(), await second.acquire()]
        actor = ray.get_actor("rl-daytona-limits-shared-run")
        return waited, await actor.delay.remote()  # a third create, from anywhere, must wait
    waited, third = asyncio.run(go())
    assert waited == [0.0, 0.0] and third > WINDOW - 5
