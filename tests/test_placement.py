"""placement: how RolloutActors are dealt over nodes, where the pool and Learner live, what a joining node gets."""

from __future__ import annotations

import pytest

from rl_daytona.placement import (LEARNER_RESOURCE, NodeInfo, address_of, alive_nodes, home_node, on_machine,
                                  share_for_new_node, spread)


def _node(node_id: str, head: bool = False, address: str = "10.0.0.1", **resources: float) -> NodeInfo:
    return NodeInfo(node_id=node_id, address=address, is_head=head, resources={"CPU": 2.0, **resources})


HEAD, W1, W2 = _node("head", head=True), _node("w1"), _node("w2")


def test_spread_deals_round_robin_from_the_head_so_no_node_is_left_out() -> None:
    assert spread([HEAD, W1, W2], 3) == ["head", "w1", "w2"]
    assert spread([HEAD, W1, W2], 5) == ["head", "w1", "w2", "head", "w1"]
    assert spread([HEAD, W1], 1) == ["head"]


def test_spread_per_node_puts_that_many_on_every_node_whatever_the_total() -> None:
    assert spread([HEAD, W1], 7, per_node=2) == ["head", "head", "w1", "w1"]


def test_spread_on_no_nodes_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no alive node"):
        spread([], 2)


@pytest.mark.parametrize("node_count, total, per_node, expected", [
    (2, 2, 0, 1),  # two actors over what is now two nodes: the newcomer gets the average share
    (3, 12, 0, 4),
    (5, 2, 0, 1),  # never zero: a node that joins always gets at least one
    (3, 2, 3, 3),  # per-node placement: exactly that many
])
def test_share_for_new_node(node_count: int, total: int, per_node: int, expected: int) -> None:
    assert share_for_new_node(node_count, total, per_node) == expected


def test_home_is_a_learner_node_when_one_exists_else_the_head() -> None:
    learner = _node("gpu", **{LEARNER_RESOURCE: 1.0})
    assert home_node([HEAD, W1, learner]) == "gpu"
    assert home_node([HEAD, W1]) == "head"
    assert home_node([W1, HEAD]) == "head"
    assert home_node([HEAD, _node("w3", **{LEARNER_RESOURCE: 0.0})]) == "head"


def test_nodes_on_one_machine_are_found_by_address() -> None:
    other = _node("far", address="10.0.0.2")
    assert [n.node_id for n in on_machine([HEAD, W1, other], "10.0.0.1")] == ["head", "w1"]
    assert address_of([HEAD, other], "far") == "10.0.0.2"
    with pytest.raises(ValueError, match="not alive"):
        address_of([HEAD], "gone")


@pytest.mark.usefixtures("ray_session")
def test_alive_nodes_reads_the_running_cluster_head_first() -> None:
    import ray

    nodes = alive_nodes()
    assert len(nodes) == 1 and nodes[0].is_head
    assert nodes[0].node_id == ray.get_runtime_context().get_node_id()
    assert home_node(nodes) == nodes[0].node_id and nodes[0].resources.get("CPU") == 2.0
