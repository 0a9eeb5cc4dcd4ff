"""`eval` on a real multi-node Ray cluster on this machine: spread, a node lost mid-run, a node joining.

The cluster (`ray.cluster_utils.Cluster`: one head, worker raylets added and killed at will)
needs a Ray of its own, so the scenarios run in a child process (`python -m tests.test_cluster
WORKDIR`) with its own RAY_TMPDIR and in its own session: it never meets the session-wide
`ray.init` of tests/conftest.py, and whatever it leaves is killed by pid. Every eval is real:
bwrap sandboxes, the built-in policy over HTTP, RolloutActors pinned by `rl_daytona.placement`.
The node a rollout ran on is read from `Rollout.node_id` in rollouts.jsonl.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

REPO = Path(__file__).resolve().parents[1]
SPLIT, TASKS = "heldout", 8  # calc's 8 held-out tasks
GROUPS = {"spread": 2, "lost": 2, "joined": 3}  # attempts per task: the join needs a longer run to land in
# a killed node is found dead in ~5 s, not ~30 s; an overloaded live raylet still answers in time
HEALTH = {"health_check_period_ms": 1000, "health_check_failure_threshold": 5}


# -- the child process -------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _records(out: Path) -> list[dict[str, Any]]:
    path = out / "rollouts.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _during(run: Callable[[], dict[str, Any]], out: Path, ready: Callable[[list[dict[str, Any]]], bool],
            action: Callable[[], None]) -> dict[str, Any]:
    """Run `run` (an eval) in a thread; once its rollouts.jsonl satisfies `ready`, do `action` here
    (the main thread: a Ray node can only be started from it)."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = run()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    deadline = time.monotonic() + 180
    while thread.is_alive() and time.monotonic() < deadline and not ready(_records(out)):
        time.sleep(0.1)
    if thread.is_alive():
        action()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def _eval(out: Path, **flags: Any) -> dict[str, Any]:
    from rl_daytona.eval import EvalConfig, run_eval
    from rl_daytona.types import Settings

    summary = run_eval(EvalConfig(out=out, taskset="calc", split=SPLIT, group=GROUPS[out.name], max_concurrent=4,
                                  settings=Settings(max_turns=2), **flags))
    return {"summary": {k: summary[k] for k in ("rollouts", "counts_by_status", "fleet", "rollouts_by_node")},
            "records": [{k: r[k] for k in ("rollout_id", "group_id", "node_id", "status", "actor")}
                        for r in _records(out)],
            "sandboxes_left": len(list((out / "sandboxes").glob("sb-*")))}


def _home_probe() -> str:
    """The node an actor placed like the SandboxPool and the Learner lands on."""
    import ray

    from rl_daytona import runtime

    class Where:
        def node(self) -> str:
            return ray.get_runtime_context().get_node_id()

    probe = ray.remote(Where).options(num_cpus=0, scheduling_strategy=runtime._on_home_node()).remote()
    node = ray.get(probe.node.remote())
    ray.kill(probe)
    return node


def scenarios(work: Path) -> dict[str, Any]:
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args=dict(
        num_cpus=2, include_dashboard=False, dashboard_agent_listen_port=free_port(), _system_config=HEALTH))
    try:
        first = cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        ids = {"head": cluster.head_node.node_id, "first": first.node_id,
               "driver": ray.get_runtime_context().get_node_id()}
        print("cluster node ids:", ids, flush=True)
        result: dict[str, Any] = {"ids": ids, "home_before_join": _home_probe()}
        result["spread"] = _eval(work / "spread", rollout_actors_per_node=1)

        lost = work / "lost"
        result["lost"] = _during(lambda: _eval(lost, rollout_actors=2), lost,
                                 lambda rs: any(r["node_id"] == ids["first"] for r in rs),
                                 lambda: cluster.remove_node(first, allow_graceful=False))

        joined = work / "joined"

        def join() -> None:
            ids["late"] = cluster.add_node(num_cpus=1, resources={"learner": 1}).node_id

        result["joined"] = _during(lambda: _eval(joined, rollout_actors=1), joined, lambda rs: len(rs) >= 1, join)
        result["home_after_join"] = _home_probe()
        return result
    finally:
        ray.shutdown()
        cluster.shutdown()


# -- the tests ---------------------------------------------------------------------------

def _session_pids(session: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.getsid(int(entry.name)) == session:
                pids.append(int(entry.name))
        except (ProcessLookupError, PermissionError):
            continue
    return pids


def outlivers(session: int, grace: float = 15.0) -> list[str]:
    """Wait up to `grace` seconds for the child's session (only our processes) to empty, then
    SIGKILL what is left by pid; returns the command lines of what had to be killed."""
    deadline = time.monotonic() + grace
    while _session_pids(session) and time.monotonic() < deadline:
        time.sleep(0.2)
    killed = []
    for pid in _session_pids(session):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            os.kill(pid, signal.SIGKILL)
            killed.append(command[:300])
        except (ProcessLookupError, FileNotFoundError):
            continue
    return killed


def _tail(output: str) -> str:
    """The child's own lines (not Ray's raylet log echoes), last first-hand 80 of them."""
    lines = [line for line in output.splitlines() if "(raylet)" not in line and "[state-dump]" not in line]
    return "\n".join(lines[-80:])


@pytest.fixture(scope="module")
def cluster_run() -> Iterator[dict[str, Any]]:
    work = Path(tempfile.mkdtemp(prefix="rlc-", dir="/tmp"))  # short: Ray's socket paths live under it
    env = {**os.environ, "RAY_TMPDIR": str(work / "ray"), "RAY_AUTH_MODE": "disabled",
           "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"}
    (work / "ray").mkdir()
    child = subprocess.Popen([sys.executable, "-m", "tests.test_cluster", str(work)], cwd=REPO, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        output, _ = child.communicate(timeout=420)
    except subprocess.TimeoutExpired:
        child.kill()
        output, _ = child.communicate()
    leftovers = outlivers(child.pid)
    results = work / "results.json"
    if child.returncode != 0 or not results.exists():
        shutil.rmtree(work, ignore_errors=True)
        pytest.fail(_tail(output.decode(errors="replace")), pytrace=False)
    yield {**json.loads(results.read_text()), "leftovers": leftovers}
    shutil.rmtree(work, ignore_errors=True)


def _groups_complete(run: dict[str, Any], group: int) -> None:
    records = run["records"]
    expected = TASKS * group
    assert run["summary"]["rollouts"] == len(records) == len({r["rollout_id"] for r in records}) == expected
    by_group: dict[str, int] = {}
    for r in records:
        by_group[r["group_id"]] = by_group.get(r["group_id"], 0) + 1
    assert len(by_group) == TASKS and set(by_group.values()) == {group}, by_group
    assert run["summary"]["counts_by_status"] == {"ok": expected}, run["summary"]
    assert run["sandboxes_left"] == 0


@pytest.mark.timeout(600)
def test_eval_spreads_rollout_actors_over_both_nodes(cluster_run: dict[str, Any]) -> None:
    ids, run = cluster_run["ids"], cluster_run["spread"]
    assert ids["driver"] == ids["head"]
    _groups_complete(run, GROUPS["spread"])
    nodes = {r["node_id"] for r in run["records"]}
    assert nodes == {ids["head"], ids["first"]}, "rollouts ran on the head and on the worker node"
    assert run["summary"]["rollouts_by_node"].keys() == nodes
    actors_by_node = {r["node_id"]: r["actor"] for r in run["records"]}
    assert len(set(actors_by_node.values())) == 2, "--rollout-actors-per-node 1: one actor on each node"


@pytest.mark.timeout(600)
def test_losing_a_node_mid_run_redispatches_its_rollouts_and_completes_every_group(
        cluster_run: dict[str, Any]) -> None:
    ids, run = cluster_run["ids"], cluster_run["lost"]
    _groups_complete(run, GROUPS["lost"])
    fleet = run["summary"]["fleet"]
    assert fleet["redispatched"] >= 1 and fleet["actors_lost"] >= 1 and fleet["lost"] == 0, fleet
    on_lost_node = [r for r in run["records"] if r["node_id"] == ids["first"]]
    assert on_lost_node, "the node did work before it was killed"
    assert len(on_lost_node) < TASKS * GROUPS["lost"], "the rest ran on the head after the loss"


@pytest.mark.timeout(600)
def test_a_node_joining_mid_run_gets_rollout_actors_and_work(cluster_run: dict[str, Any]) -> None:
    ids, run = cluster_run["ids"], cluster_run["joined"]
    _groups_complete(run, GROUPS["joined"])
    assert run["summary"]["fleet"]["nodes_joined"] == 1
    assert any(r["node_id"] == ids["late"] for r in run["records"]), "the joining node ran rollouts"
    assert run["records"][0]["node_id"] == ids["head"], "the run started before the node joined"


@pytest.mark.timeout(600)
def test_pool_and_learner_go_to_the_learner_node_else_the_head(cluster_run: dict[str, Any]) -> None:
    ids = cluster_run["ids"]
    assert cluster_run["home_before_join"] == ids["head"]
    assert cluster_run["home_after_join"] == ids["late"], "the node offering the `learner` resource"


@pytest.mark.timeout(600)
def test_the_cluster_left_no_process_behind(cluster_run: dict[str, Any]) -> None:
    assert cluster_run["leftovers"] == []


if __name__ == "__main__":
    workdir = Path(sys.argv[1])
    (workdir / "results.json").write_text(json.dumps(scenarios(workdir)))
