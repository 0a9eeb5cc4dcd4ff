"""Where a run's actors go on a Ray cluster of one node or many.

Invariant: the SandboxPool and the Learner go to the "home" node: one offering the custom
`learner` resource when the cluster has one, else the head node (else the driver's own node);
RolloutActors are pinned to alive nodes by node affinity, so each node gets its share however
Ray would otherwise pack them; with local sandboxes (files on one machine's disk) only the nodes
on the pool's machine may hold them. Reading the cluster is the only thing done here; the actors
are started in `rl_daytona.runtime` and kept by `rl_daytona.fleet`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

LEARNER_RESOURCE = "learner"
_HEAD_RESOURCE = "node:__internal_head__"


@dataclass(frozen=True)
class NodeInfo:
    node_id: str
    address: str
    is_head: bool
    resources: dict[str, float] = field(default_factory=dict)


def alive_nodes() -> list[NodeInfo]:
    """The cluster's alive nodes, the head first (needs `ray.init` to have run)."""
    import ray

    nodes = [NodeInfo(node_id=n["NodeID"], address=n.get("NodeManagerAddress", ""),
                      is_head=_HEAD_RESOURCE in n.get("Resources", {}),
                      resources=dict(n.get("Resources", {})))
             for n in ray.nodes() if n.get("Alive")]
    return sorted(nodes, key=lambda n: (not n.is_head, n.node_id))


def home_node(nodes: list[NodeInfo]) -> str:
    """The node for the SandboxPool and the Learner: a `learner` node, else the head."""
    for node in nodes:
        if node.resources.get(LEARNER_RESOURCE, 0) > 0:
            return node.node_id
    for node in nodes:
        if node.is_head:
            return node.node_id
    import ray

    return ray.get_runtime_context().get_node_id()


def on_machine(nodes: list[NodeInfo], address: str) -> list[NodeInfo]:
    """The nodes at `address` (one machine may run several Ray nodes)."""
    return [n for n in nodes if n.address == address]


def address_of(nodes: list[NodeInfo], node_id: str) -> str:
    for node in nodes:
        if node.node_id == node_id:
            return node.address
    raise ValueError(f"node {node_id} is not alive in the Ray cluster")


def pinned(node_id: str, soft: bool) -> Any:
    """A scheduling strategy placing an actor on `node_id` (`soft`: elsewhere if it is gone)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=soft)


def spread(nodes: list[NodeInfo], total: int, per_node: int = 0) -> list[str]:
    """The node id of each RolloutActor to start: `per_node` on every node when it is set,
    else `total` dealt round-robin (the head first), so no node is left out while total >= nodes."""
    if not nodes:
        raise ValueError("the Ray cluster has no alive node to place RolloutActors on")
    if per_node > 0:
        return [n.node_id for n in nodes for _ in range(per_node)]
    return [nodes[i % len(nodes)].node_id for i in range(total)]


def share_for_new_node(node_count: int, total: int, per_node: int = 0) -> int:
    """How many RolloutActors a node joining mid-run gets: `per_node`, else the average share."""
    if per_node > 0:
        return per_node
    return max(1, total // max(node_count, 1))
