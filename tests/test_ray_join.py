"""rl_daytona.ray_join: which cluster a run joins, and that a dead one is never waited on."""

from __future__ import annotations

import socket

import pytest

from rl_daytona.ray_join import JoinPlan, plan_join, split_address, wait_for_address


@pytest.fixture
def live_port():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed on exit: nothing listens there any more


def test_split_address_forms() -> None:
    assert split_address("10.0.0.5:6379") == ("10.0.0.5", 6379)
    assert split_address("ray://head:10001") == ("head", 10001)
    assert split_address("[::1]:6379") == ("::1", 6379)
    assert split_address("auto") is None
    assert split_address("http://127.0.0.1:8265") is None


def test_no_record_starts_a_local_ray() -> None:
    assert plan_join(None, recorded="") == JoinPlan(None)


def test_a_live_recorded_cluster_is_joined_and_named(live_port: int) -> None:
    plan = plan_join(None, recorded=f"127.0.0.1:{live_port}")
    assert plan.address == f"127.0.0.1:{live_port}"
    assert f"127.0.0.1:{live_port}" in plan.note and "joining" in plan.note


def test_a_dead_recorded_cluster_is_passed_over_with_one_line() -> None:
    dead = f"127.0.0.1:{_dead_port()}"
    plan = plan_join(None, recorded=dead)
    assert plan.address == "local"
    assert dead in plan.note and "not running" in plan.note and "\n" not in plan.note


def test_an_explicit_live_address_is_joined(live_port: int) -> None:
    assert plan_join(f"127.0.0.1:{live_port}", recorded="ignored:1").address == f"127.0.0.1:{live_port}"


def test_an_explicit_dead_address_is_refused_in_one_line_after_the_bound() -> None:
    calls: list[tuple[str, int]] = []

    def never(host: str, port: int) -> bool:
        calls.append((host, port))
        return False

    with pytest.raises(ValueError) as info:
        plan_join("10.1.2.3:6379", probe=never, join_timeout_s=0.0)
    assert calls == [("10.1.2.3", 6379)]  # probed through the hook, never dialled for real
    message = str(info.value)
    assert "10.1.2.3:6379" in message and "RAY_ADDRESS" in message and "\n" not in message


def test_an_explicit_address_that_comes_up_late_is_joined() -> None:
    answers = iter([False, True])
    wait_for_address("127.0.0.1:7", timeout_s=5.0, probe=lambda host, port: next(answers))


def test_unprobeable_forms_are_left_to_ray() -> None:
    wait_for_address("auto", timeout_s=0.0, probe=lambda host, port: pytest.fail("probed"))
